package budget_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	ibudget "github.com/flexway/flexway/interceptors/budget"
)

func TestEstimate(t *testing.T) {
	m := ibudget.New(ibudget.Config{ReserveOutputTokens: 1000, ReserveTokensPerImage: 2048})
	text := func(role, s string) *flexwayv1.ChatMessage {
		return &flexwayv1.ChatMessage{Role: role, Content: &flexwayv1.ChatMessage_Text{Text: s}}
	}
	image := &flexwayv1.ChatMessage{Role: "user", Content: &flexwayv1.ChatMessage_Parts{Parts: &flexwayv1.ContentParts{Parts: []*flexwayv1.ContentPart{
		{Type: "text", Text: proto.String("what is this?")},
		{Type: "image_url", ImageUrl: &flexwayv1.ImageUrl{Url: "data:image/png;base64,AAAA"}},
	}}}}
	cases := []struct {
		name          string
		req           any
		input, output int64
	}{
		// "user" + 12 bytes = 16 bytes → 6 tokens, + 4 per message + 3.
		{"default output", &flexwayv1.CreateChatCompletionRequest{Messages: []*flexwayv1.ChatMessage{text("user", "Hello there!")}}, 6 + 4 + 3, 1000},
		{"max_tokens", &flexwayv1.CreateChatCompletionRequest{MaxTokens: proto.Int64(50), Messages: []*flexwayv1.ChatMessage{text("user", "Hello there!")}}, 13, 50},
		{"the larger of both fields", &flexwayv1.CreateChatCompletionRequest{MaxTokens: proto.Int64(500), MaxCompletionTokens: proto.Int64(20), Messages: []*flexwayv1.ChatMessage{text("user", "Hello there!")}}, 13, 500},
		{"n choices", &flexwayv1.CreateChatCompletionRequest{N: proto.Int32(3), MaxCompletionTokens: proto.Int64(20), Messages: []*flexwayv1.ChatMessage{text("user", "Hello there!")}}, 13, 60},
		// "user" + "what is this?" = 17 bytes → 6, + 4 + 3, + one image.
		{"image", &flexwayv1.CreateChatCompletionRequest{MaxTokens: proto.Int64(1), Messages: []*flexwayv1.ChatMessage{image}}, 6 + 4 + 3 + 2048, 1},
		{"tools count as input", &flexwayv1.CreateChatCompletionRequest{MaxTokens: proto.Int64(1), Messages: []*flexwayv1.ChatMessage{text("user", "Hello there!")},
			ExtraFields: map[string]string{"tools": `[{"type":"function","function":{"name":"f"}}]`, "seed": "null"}}, (16+45+2)/3 + 4 + 3, 1},
		{"embeddings text", &flexwayv1.CreateEmbeddingRequest{Input: &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Text{Text: "abcdefg"}}}, 3, 0},
		{"embeddings texts", &flexwayv1.CreateEmbeddingRequest{Input: &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Texts{Texts: &flexwayv1.Texts{Values: []string{"abc", "abcd"}}}}}, 1 + 2, 0},
		{"embeddings token arrays", &flexwayv1.CreateEmbeddingRequest{Input: &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_TokenArrays{TokenArrays: &flexwayv1.TokenArrays{Values: []*flexwayv1.Tokens{{Values: []int64{1, 2, 3}}, {Values: []int64{4}}}}}}}, 4, 0},
	}
	for _, tc := range cases {
		est, ok := m.Estimate(tc.req)
		if !ok || est.Input != tc.input || est.Output != tc.output {
			t.Errorf("%s: %+v (%v), want input %d, output %d", tc.name, est, ok, tc.input, tc.output)
		}
	}
	if _, ok := m.Estimate(&flexwayv1.ListModelsRequest{}); ok {
		t.Error("a models listing is estimated: it is not metered")
	}
}
