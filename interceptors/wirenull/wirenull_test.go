package wirenull_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/interceptors/wirenull"
)

// answer is a completion whose extra fields hold nulls at every level,
// beside values that must stay.
func answer() *flexwayv1.ChatCompletion {
	text := "hi"
	return &flexwayv1.ChatCompletion{
		Id:          "c1",
		ExtraFields: map[string]string{"system_fingerprint": "null", "service_tier": `"default"`},
		Choices: []*flexwayv1.ChatCompletionChoice{{
			Message: &flexwayv1.ChatMessage{Role: "assistant", Content: &flexwayv1.ChatMessage_Parts{Parts: &flexwayv1.ContentParts{Parts: []*flexwayv1.ContentPart{
				{Type: "text", Text: &text, ExtraFields: map[string]string{"annotations": "null"}},
			}}}, ExtraFields: map[string]string{"refusal": "null", "audio": "null", "annotations": "[]"}},
			ExtraFields: map[string]string{"logprobs": "null"},
		}, {
			Message:     &flexwayv1.ChatMessage{Role: "assistant", Content: &flexwayv1.ChatMessage_Null{Null: structpb.NullValue_NULL_VALUE}},
			ExtraFields: map[string]string{"logprobs": `{"content":[],"refusal":null}`},
		}},
		Usage: &flexwayv1.Usage{TotalTokens: 3, ExtraFields: map[string]string{"prompt_tokens_details": "null", "x": " null"}},
	}
}

func TestDrop(t *testing.T) {
	got := answer()
	wirenull.Drop(got)
	want := answer()
	want.ExtraFields = map[string]string{"service_tier": `"default"`}
	want.Choices[0].Message.GetParts().Parts[0].ExtraFields = nil
	want.Choices[0].Message.ExtraFields = map[string]string{"annotations": "[]"}
	want.Choices[0].ExtraFields = nil
	want.Usage.ExtraFields = map[string]string{"x": " null"}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Fatalf("after Drop (-want +got):\n%s", d)
	}
	// Other values pass untouched.
	wirenull.Drop(nil)
	wirenull.Drop([]byte("null"))
	wirenull.Drop((*flexwayv1.ChatCompletion)(nil))
	st, _ := structpb.NewStruct(map[string]any{"extra_fields": "null"})
	wirenull.Drop(st)
	if st.Fields["extra_fields"].GetStringValue() != "null" {
		t.Fatal("a message of another package was changed")
	}
}

func TestInterceptors(t *testing.T) {
	resp, err := wirenull.UnaryServerInterceptor(context.Background(), nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
		return answer(), nil
	})
	if err != nil || resp.(*flexwayv1.ChatCompletion).GetChoices()[0].GetMessage().GetExtraFields()["refusal"] != "" {
		t.Fatalf("unary: %v, %v", resp, err)
	}
	var sent []any
	err = wirenull.StreamServerInterceptor(nil, &recorder{sent: &sent}, &grpc.StreamServerInfo{}, func(_ any, ss grpc.ServerStream) error {
		return ss.SendMsg(&flexwayv1.ChatCompletionChunk{ExtraFields: map[string]string{"usage": "null"}, Choices: []*flexwayv1.ChatCompletionChunkChoice{{
			Delta: &flexwayv1.ChatMessage{ExtraFields: map[string]string{"refusal": "null"}}, ExtraFields: map[string]string{"logprobs": "null"},
		}}})
	})
	if err != nil || len(sent) != 1 {
		t.Fatalf("stream: %v, %d sent", err, len(sent))
	}
	ch := sent[0].(*flexwayv1.ChatCompletionChunk)
	if len(ch.GetExtraFields())+len(ch.GetChoices()[0].GetExtraFields())+len(ch.GetChoices()[0].GetDelta().GetExtraFields()) != 0 {
		t.Fatalf("chunk sent with nulls: %v", ch)
	}
}

type recorder struct {
	grpc.ServerStream
	sent *[]any
}

func (r *recorder) SendMsg(m any) error {
	*r.sent = append(*r.sent, m)
	return nil
}
