package call_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
)

// TestNoteRequest: a call's capability is recorded from its request once;
// a recorded one (a proxied call's grpc) is never replaced.
func TestNoteRequest(t *testing.T) {
	image := &flexwayv1.CreateChatCompletionRequest{Messages: []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Parts{Parts: &flexwayv1.ContentParts{Parts: []*flexwayv1.ContentPart{
		{Type: "text", Text: proto.String("what is this?")},
		{Type: "image_url", ImageUrl: &flexwayv1.ImageUrl{Url: "data:image/png;base64,AAAA"}},
	}}}}}}
	tests := []struct {
		name  string
		first call.Capability
		req   any
		want  call.Capability
	}{
		{name: "chat", req: &flexwayv1.CreateChatCompletionRequest{}, want: call.Chat},
		{name: "vision", req: image, want: call.Vision},
		{name: "embeddings", req: &flexwayv1.CreateEmbeddingRequest{}, want: call.Embeddings},
		{name: "no inference request", req: &flexwayv1.ListModelsRequest{}, want: ""},
		{name: "recorded first", first: call.GRPC, req: image, want: call.GRPC},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &call.State{Capability: tt.first}
			st.NoteRequest(tt.req)
			st.NoteRequest(&flexwayv1.CreateEmbeddingRequest{}) // later calls change nothing
			if tt.want == "" {
				tt.want = call.Embeddings // nothing was recorded: the second call records
			}
			if st.Capability != tt.want {
				t.Fatalf("capability %q, want %q", st.Capability, tt.want)
			}
		})
	}
}
