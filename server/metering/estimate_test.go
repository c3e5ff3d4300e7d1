package metering_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/metering"
)

func TestEstimate(t *testing.T) {
	m := metering.New(metering.Config{ReserveOutputTokens: 1000, ReserveTokensPerImage: 2048})
	text := func(role, s string) *flexwayv1.ChatMessage {
		return &flexwayv1.ChatMessage{Role: role, Content: &flexwayv1.ChatMessage_Text{Text: s}}
	}
	image := &flexwayv1.ChatMessage{Role: "user", Content: &flexwayv1.ChatMessage_Parts{Parts: &flexwayv1.ContentParts{Parts: []*flexwayv1.ContentPart{
		{Type: "text", Text: proto.String("what is this?")},
		{Type: "image_url", ImageUrl: &flexwayv1.ImageUrl{Url: "data:image/png;base64,AAAA"}},
	}}}}
	cases := []struct {
		name                 string
		req                  any
		input, output, limit int64
		charge               int64
	}{
		// "user" + 12 bytes = 16 bytes, one token each at most, + 8 for the
		// message + 32 for the call; charged 16/3 → 6, + 4 + 3.
		{"default output", &flexwayv1.CreateChatCompletionRequest{Messages: []*flexwayv1.ChatMessage{text("user", "Hello there!")}}, 16 + 8 + 32, 1000, 0, 6 + 4 + 3},
		{"max_tokens", &flexwayv1.CreateChatCompletionRequest{MaxTokens: proto.Int64(50), Messages: []*flexwayv1.ChatMessage{text("user", "Hello there!")}}, 56, 50, 50, 13},
		{"the larger of both fields", &flexwayv1.CreateChatCompletionRequest{MaxTokens: proto.Int64(500), MaxCompletionTokens: proto.Int64(20), Messages: []*flexwayv1.ChatMessage{text("user", "Hello there!")}}, 56, 500, 500, 13},
		{"n choices", &flexwayv1.CreateChatCompletionRequest{N: proto.Int32(3), MaxCompletionTokens: proto.Int64(20), Messages: []*flexwayv1.ChatMessage{text("user", "Hello there!")}}, 56, 60, 20, 13},
		// "user" + "what is this?" = 17 bytes, + 8 + 32, + one image.
		{"image", &flexwayv1.CreateChatCompletionRequest{MaxTokens: proto.Int64(1), Messages: []*flexwayv1.ChatMessage{image}}, 17 + 8 + 32 + 2048, 1, 1, 6 + 4 + 3 + 2048},
		{"tools count as input", &flexwayv1.CreateChatCompletionRequest{MaxTokens: proto.Int64(1), Messages: []*flexwayv1.ChatMessage{text("user", "Hello there!")},
			ExtraFields: map[string]string{"tools": `[{"type":"function","function":{"name":"f"}}]`, "seed": "null"}}, 16 + 45 + 8 + 32, 1, 1, (16+45+2)/3 + 4 + 3},
		{"embeddings text", &flexwayv1.CreateEmbeddingRequest{Input: &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Text{Text: "abcdefg"}}}, 7 + 2, 0, 0, 9},
		{"embeddings texts", &flexwayv1.CreateEmbeddingRequest{Input: &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Texts{Texts: &flexwayv1.Texts{Values: []string{"abc", "abcd"}}}}}, 3 + 2 + 4 + 2, 0, 0, 11},
		{"embeddings token arrays", &flexwayv1.CreateEmbeddingRequest{Input: &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_TokenArrays{TokenArrays: &flexwayv1.TokenArrays{Values: []*flexwayv1.Tokens{{Values: []int64{1, 2, 3}}, {Values: []int64{4}}}}}}}, 3 + 2 + 1 + 2, 0, 0, 8},
	}
	for _, tc := range cases {
		est, ok := m.Estimate(tc.req)
		if !ok || est.Input != tc.input || est.Output != tc.output || est.OutputLimit != tc.limit || est.InputCharge != tc.charge {
			t.Errorf("%s: %+v (%v), want input %d, output %d, limit %d, charge %d", tc.name, est, ok, tc.input, tc.output, tc.limit, tc.charge)
		}
	}
	if _, ok := m.Estimate(&flexwayv1.ListModelsRequest{}); ok {
		t.Error("a models listing is estimated: it is not metered")
	}
}

// TestEstimateCoversABackendsOwnMaxTokens: a request without an output
// limit reserves, per choice, the largest max_tokens a planned backend
// sends itself (kind anthropic's max_output_tokens), not only
// reserve_output_tokens; a request with its own limit reserves that.
func TestEstimateCoversABackendsOwnMaxTokens(t *testing.T) {
	m := metering.New(metering.Config{ReserveOutputTokens: 1000, BackendOutputTokens: map[string]int64{"claude": 64000}})
	msg := []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "hi"}}}
	for _, tc := range []struct {
		name   string
		req    *flexwayv1.CreateChatCompletionRequest
		plan   []string
		output int64
	}{
		{"anthropic first", &flexwayv1.CreateChatCompletionRequest{Messages: msg}, []string{"claude", "main"}, 64000},
		{"anthropic as fallback", &flexwayv1.CreateChatCompletionRequest{Messages: msg}, []string{"main", "claude"}, 64000},
		{"no such backend", &flexwayv1.CreateChatCompletionRequest{Messages: msg}, []string{"main"}, 1000},
		{"two choices", &flexwayv1.CreateChatCompletionRequest{Messages: msg, N: proto.Int32(2)}, []string{"claude"}, 128000},
		{"own limit", &flexwayv1.CreateChatCompletionRequest{Messages: msg, MaxTokens: proto.Int64(10)}, []string{"claude"}, 10},
	} {
		if est, _ := m.EstimateFor(tc.req, tc.plan); est.Output != tc.output {
			t.Errorf("%s: output %d, want %d", tc.name, est.Output, tc.output)
		}
	}
}
