package metering_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/metering"
)

func hello(extra map[string]string) *flexwayv1.CreateChatCompletionRequest {
	return &flexwayv1.CreateChatCompletionRequest{
		Messages:    []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "Hello there!"}}},
		ExtraFields: extra,
	}
}

// TestOutputLengthAliasesCount: the output-length fields other
// OpenAI-compatible servers read count toward the output reservation, the
// largest of all present winning, times n, matched case-insensitively, at
// the top level and in the option objects servers read.
func TestOutputLengthAliasesCount(t *testing.T) {
	m := metering.New(metering.Config{ReserveOutputTokens: 100})
	cases := []struct {
		name          string
		req           *flexwayv1.CreateChatCompletionRequest
		output, limit int64
	}{
		{"llama.cpp n_predict over max_tokens", func() *flexwayv1.CreateChatCompletionRequest {
			r := hello(map[string]string{"n_predict": "5000"})
			r.MaxTokens = proto.Int64(20)
			return r
		}(), 5000, 5000},
		{"times n", func() *flexwayv1.CreateChatCompletionRequest {
			r := hello(map[string]string{"n_predict": "5000"})
			r.MaxTokens, r.N = proto.Int64(20), proto.Int32(3)
			return r
		}(), 15000, 5000},
		{"max_tokens over a smaller alias", func() *flexwayv1.CreateChatCompletionRequest {
			r := hello(map[string]string{"max_new_tokens": "10"})
			r.MaxTokens = proto.Int64(20)
			return r
		}(), 20, 20},
		{"case-insensitive", hello(map[string]string{"N_Predict": "700"}), 700, 700},
		{"Ollama options.num_predict", hello(map[string]string{"options": `{"temperature":0.1,"num_predict":900}`}), 900, 900},
		{"Ollama top-level num_predict", hello(map[string]string{"num_predict": "800"}), 800, 800},
		{"TGI parameters.max_new_tokens", hello(map[string]string{"parameters": `{"max_new_tokens":1200}`}), 1200, 1200},
		{"max_tokens inside options", hello(map[string]string{"options": `{"max_tokens":333}`}), 333, 333},
		{"Gemini generationConfig.maxOutputTokens", hello(map[string]string{"generationConfig": `{"maxOutputTokens":444}`}), 444, 444},
		{"the largest of several", hello(map[string]string{"max_output_tokens": "300", "max_gen_len": "350", "options": `{"num_predict":250}`}), 350, 350},
		// Without max_tokens the default still joins: an upstream that does
		// not read the alias uses its own length.
		{"an alias under the default", hello(map[string]string{"n_predict": "30"}), 100, 30},
		{"null is absent", hello(map[string]string{"n_predict": "null"}), 100, 0},
		{"an unrelated field", hello(map[string]string{"num_ctx": "99999"}), 100, 0},
	}
	for _, tc := range cases {
		est, _ := m.Estimate(tc.req)
		if est.Output != tc.output || est.OutputLimit != tc.limit {
			t.Errorf("%s: output %d, limit %d; want %d, %d", tc.name, est.Output, est.OutputLimit, tc.output, tc.limit)
		}
	}
}

// TestOutputLengthAliasRefused: a value that is no non-negative integer is
// refused with invalid_request naming the field; -1 (no limit to
// llama.cpp and Ollama) included.
func TestOutputLengthAliasRefused(t *testing.T) {
	for _, tc := range []struct {
		extra map[string]string
		param string
	}{
		{map[string]string{"n_predict": "-1"}, "n_predict"},
		{map[string]string{"num_predict": "12.5"}, "num_predict"},
		{map[string]string{"MAX_NEW_TOKENS": `"100"`}, "MAX_NEW_TOKENS"},
		{map[string]string{"options": `{"num_predict":-2}`}, "options.num_predict"},
		{map[string]string{"max_gen_len": "99999999999999999999"}, "max_gen_len"},
	} {
		_, fe := metering.OutputLengthFields(tc.extra)
		if fe == nil || fe.Reason != faults.InvalidRequest || fe.Param != tc.param || !strings.Contains(fe.Message, tc.param) {
			t.Errorf("%v: %v, want invalid_request naming %s", tc.extra, fe, tc.param)
		}
	}
	if v, fe := metering.OutputLengthFields(map[string]string{"n_predict": "0", "options": `"not an object"`}); fe != nil || v != 0 {
		t.Errorf("n_predict 0: %d, %v; want 0, no error", v, fe)
	}
}

// TestPromptOverheadOfThePlan: the input bound counts the largest
// prompt_overhead_tokens among the planned backend and its fallbacks; a
// backend that declares none has the default.
func TestPromptOverheadOfThePlan(t *testing.T) {
	m := metering.New(metering.Config{PromptOverheadTokens: map[string]int64{"main": 10, "big": 200}})
	for _, tc := range []struct {
		plan []string
		want int64
	}{
		{[]string{"main"}, 16 + 8 + 10},
		{[]string{"main", "big"}, 16 + 8 + 200},
		{[]string{"main", "undeclared"}, 16 + 8 + metering.DefaultPromptOverheadTokens},
	} {
		est, _ := m.EstimateFor(hello(nil), tc.plan)
		if est.Input != tc.want {
			t.Errorf("plan %v: input %d, want %d", tc.plan, est.Input, tc.want)
		}
	}
}

// englishKB is a typical English prompt of 1,024 bytes.
var englishKB = func() string {
	const p = "Please summarise the following meeting notes for the weekly report. The team reviewed the budget for the next quarter, agreed to move the release to the second week of March, and asked the vendor for a revised quote on the storage upgrade. "
	s := strings.Repeat(p, 5)
	return s[:1024]
}()

// TestInputBoundOfATypicalPrompt measures what the README quotes: the
// reservation of a 1 KiB English prompt in one user message with
// max_tokens 256, under the old bytes/3 estimate and under the bound.
func TestInputBoundOfATypicalPrompt(t *testing.T) {
	m := metering.New(metering.Config{})
	r := hello(nil)
	r.Messages[0].Content = &flexwayv1.ChatMessage_Text{Text: englishKB}
	r.MaxTokens = proto.Int64(256)
	est, _ := m.Estimate(r)
	// Old: (4 + 1024) bytes / 3 → 343, + 4 + 3 = 350. New: 1028 + 8 + 32.
	if est.InputCharge != 350 || est.Input != 1068 || est.Output != 256 {
		t.Fatalf("1 KiB English prompt: %+v; want the old estimate 350 (kept as the charge), the bound 1068, output 256", est)
	}
}
