package openaiwire_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/openaiwire"
)

var update = flag.Bool("update", false, "rewrite the golden output files under testdata")

// roundTrip parses a golden input and appends it back, by the kind its file
// name starts with.
func roundTrip(name string, data []byte) ([]byte, error) {
	switch {
	case strings.HasPrefix(name, "chat_request_"):
		req, err := openaiwire.ParseChatCompletionRequest(data)
		if err != nil {
			return nil, err
		}
		return openaiwire.AppendChatCompletionRequest(nil, req, openaiwire.Upstream{Model: req.GetModel(), Stream: req.GetStream()})
	case strings.HasPrefix(name, "chat_completion_"):
		c, err := openaiwire.ParseChatCompletion(data)
		if err != nil {
			return nil, err
		}
		return openaiwire.AppendChatCompletion(nil, c), nil
	case strings.HasPrefix(name, "chat_chunk_"):
		c, err := openaiwire.ParseChatCompletionChunk(data)
		if err != nil {
			return nil, err
		}
		return openaiwire.AppendChatCompletionChunk(nil, c), nil
	case strings.HasPrefix(name, "embedding_request_"):
		req, err := openaiwire.ParseEmbeddingRequest(data)
		if err != nil {
			return nil, err
		}
		return openaiwire.AppendEmbeddingRequest(nil, req, "")
	case strings.HasPrefix(name, "embedding_response_"):
		r, err := openaiwire.ParseEmbeddingResponse(data)
		if err != nil {
			return nil, err
		}
		return openaiwire.AppendEmbeddingResponse(nil, r), nil
	}
	return nil, os.ErrNotExist
}

// TestGoldenRoundTrip checks that every golden input under testdata parses
// and appends back to a semantically identical document.
func TestGoldenRoundTrip(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		file string
	}{}
	for _, f := range files {
		base := filepath.Base(f)
		if strings.HasSuffix(base, ".golden.json") {
			continue
		}
		tests = append(tests, struct {
			name string
			file string
		}{strings.TrimSuffix(base, ".json"), base})
	}
	if len(tests) < 10 {
		t.Fatalf("found %d golden inputs, want at least 10", len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := readTestdata(t, tt.file)
			out, err := roundTrip(tt.file, in)
			if err != nil {
				t.Fatalf("round trip: %v", err)
			}
			if diff := diffJSON(t, in, out); diff != "" {
				t.Errorf("round trip changed the document (-in +out):\n%s\nout: %s", diff, out)
			}
			// Appending is deterministic: a second round trip is byte-identical.
			again, err := roundTrip(tt.file, out)
			if err != nil {
				t.Fatalf("second round trip: %v", err)
			}
			if !bytes.Equal(out, again) {
				t.Errorf("second round trip differs:\n%s\n%s", out, again)
			}
		})
	}
}

// TestGoldenChatRequestValues pins the typed and raw values of the request
// golden files.
func TestGoldenChatRequestValues(t *testing.T) {
	t.Parallel()
	in := readTestdata(t, "chat_request_tools.json")
	req, err := openaiwire.ParseChatCompletionRequest(in)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := req.GetExtraFields()["seed"], "12345678901234567890"; got != want {
		t.Errorf("seed raw = %q, want %q", got, want)
	}
	if got, want := req.GetExtraFields()["top_p"], "1.0"; got != want {
		t.Errorf("top_p raw = %q, want %q (byte for byte)", got, want)
	}
	if got, want := req.GetExtraFields()["presence_penalty"], "null"; got != want {
		t.Errorf("presence_penalty raw = %q, want %q", got, want)
	}
	if got := req.GetExtraFields()["x_vendor"]; !strings.HasPrefix(got, `{"routing": {"region": "eu-west"`) {
		t.Errorf("x_vendor raw = %q, want the vendor object as sent", got)
	}
	for _, k := range []string{"tools", "tool_choice", "parallel_tool_calls", "response_format", "logprobs", "top_logprobs", "logit_bias", "stop", "metadata", "temperature"} {
		if _, ok := req.GetExtraFields()[k]; !ok {
			t.Errorf("extra field %q missing", k)
		}
	}
	for _, k := range []string{"model", "messages", "stream", "stream_options", "max_completion_tokens", "n", "user"} {
		if _, ok := req.GetExtraFields()[k]; ok {
			t.Errorf("typed field %q also in extra_fields", k)
		}
	}
	if req.GetModel() != "gpt-4o" || req.GetMaxCompletionTokens() != 512 || req.GetN() != 2 || req.GetUser() != "user-1234" || !req.GetStream() {
		t.Errorf("typed fields: model %q max_completion_tokens %d n %d user %q stream %v", req.GetModel(), req.GetMaxCompletionTokens(), req.GetN(), req.GetUser(), req.GetStream())
	}
	if req.MaxTokens != nil {
		t.Errorf("max_tokens = %d, want unset", req.GetMaxTokens())
	}
	so := req.GetStreamOptions()
	if !so.GetIncludeUsage() || so.GetExtraFields()["x_vendor_continuous_usage"] != "true" {
		t.Errorf("stream_options = %v", so)
	}
	msgs := req.GetMessages()
	if len(msgs) != 4 {
		t.Fatalf("got %d messages, want 4", len(msgs))
	}
	if got, want := msgs[0].GetText(), "You are a helpful assistant. Answer in \"quotes\" été 😀\nline two."; got != want {
		t.Errorf("escaped content = %q, want %q", got, want)
	}
	parts := msgs[1].GetParts().GetParts()
	if len(parts) != 3 || msgs[1].GetName() != "alice" {
		t.Fatalf("user message: name %q, %d parts, want alice and 3 (never flattened)", msgs[1].GetName(), len(parts))
	}
	if parts[1].GetType() != "image_url" || !strings.HasPrefix(parts[1].GetImageUrl().GetUrl(), "data:image/png;base64,") || parts[1].GetImageUrl().GetDetail() != "high" {
		t.Errorf("image part = %v", parts[1])
	}
	if got := parts[1].GetImageUrl().GetExtraFields()["x_vendor_crop"]; got != "[0, 0, 1, 1]" {
		t.Errorf("image_url extra = %q", got)
	}
	if got := parts[2].GetExtraFields()["cache_control"]; got != `{"type": "ephemeral"}` {
		t.Errorf("part extra = %q", got)
	}
	if _, ok := msgs[2].GetContent().(*flexwayv1.ChatMessage_Null); !ok {
		t.Errorf("assistant content = %T, want the null member", msgs[2].GetContent())
	}
	if got := msgs[2].GetExtraFields()["tool_calls"]; !strings.Contains(got, `"id": "call_abc123"`) {
		t.Errorf("tool_calls raw = %q", got)
	}
	if got := msgs[3].GetExtraFields()["tool_call_id"]; got != `"call_abc123"` {
		t.Errorf("tool_call_id raw = %q", got)
	}

	out, err := openaiwire.AppendChatCompletionRequest(nil, req, openaiwire.Upstream{Model: "gpt-4o", Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"seed":12345678901234567890`, `"content":null,"refusal":null,"tool_calls":[`, `"top_p":1.0`, `"presence_penalty":null`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
}

// TestGoldenChatRequestRefusal pins how a replayed assistant refusal part
// is held: type "refusal", its refusal member raw in extra_fields, and
// written back byte for byte.
func TestGoldenChatRequestRefusal(t *testing.T) {
	t.Parallel()
	req, err := openaiwire.ParseChatCompletionRequest(readTestdata(t, "chat_request_refusal.json"))
	if err != nil {
		t.Fatal(err)
	}
	msgs := req.GetMessages()
	if len(msgs) != 5 {
		t.Fatalf("got %d messages, want 5", len(msgs))
	}
	p := msgs[2].GetParts().GetParts()
	const raw = `"I can't help with that. \u00e9 \"quoted\""`
	if len(p) != 1 || p[0].GetType() != "refusal" || p[0].GetExtraFields()["refusal"] != raw || p[0].Text != nil {
		t.Errorf("refusal part = %v, want type refusal and refusal %s raw in extra_fields", p, raw)
	}
	if got := msgs[2].GetExtraFields()["refusal"]; got != "null" {
		t.Errorf("message refusal raw = %q, want null", got)
	}
	p = msgs[3].GetParts().GetParts()
	if len(p) != 2 || p[1].GetType() != "refusal" || p[1].GetExtraFields()["refusal"] != `""` || p[1].GetExtraFields()["x_vendor"] != `{"a": [1, null]}` {
		t.Errorf("parts = %v", p)
	}
	out, err := openaiwire.AppendChatCompletionRequest(nil, req, openaiwire.Upstream{Model: "gpt-4o"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"refusal","refusal":` + raw + `}`; !bytes.Contains(out, []byte(want)) {
		t.Errorf("output lacks %s:\n%s", want, out)
	}
}

// TestGoldenResponseValues pins values of the response and chunk golden
// files, and what their encoding writes.
func TestGoldenResponseValues(t *testing.T) {
	t.Parallel()
	t.Run("completion_n3", func(t *testing.T) {
		c, err := openaiwire.ParseChatCompletion(readTestdata(t, "chat_completion_n3.json"))
		if err != nil {
			t.Fatal(err)
		}
		if len(c.GetChoices()) != 3 {
			t.Fatalf("got %d choices, want 3", len(c.GetChoices()))
		}
		for i, want := range []string{"stop", "tool_calls", "length"} {
			if ch := c.GetChoices()[i]; ch.GetIndex() != int32(i) || ch.GetFinishReason() != want {
				t.Errorf("choice %d: index %d finish_reason %q, want %q", i, ch.GetIndex(), ch.GetFinishReason(), want)
			}
		}
		if _, ok := c.GetChoices()[1].GetMessage().GetContent().(*flexwayv1.ChatMessage_Null); !ok {
			t.Errorf("choice 1 content = %T, want the null member", c.GetChoices()[1].GetMessage().GetContent())
		}
		u := c.GetUsage()
		if u.GetPromptTokens() != 1117 || u.GetCompletionTokens() != 46 || u.GetTotalTokens() != 1163 || len(u.GetExtraFields()) != 2 {
			t.Errorf("usage = %v", u)
		}
		if got := c.GetExtraFields()["system_fingerprint"]; got != `"fp_fc9f1d7035"` {
			t.Errorf("system_fingerprint raw = %q", got)
		}
		out := openaiwire.AppendChatCompletion(nil, c)
		if !bytes.Contains(out, []byte(`"choices":[{"index":0,`)) {
			t.Errorf("index 0 not written:\n%s", out)
		}
	})
	t.Run("chunk_tool_calls", func(t *testing.T) {
		c, err := openaiwire.ParseChatCompletionChunk(readTestdata(t, "chat_chunk_tool_calls.json"))
		if err != nil {
			t.Fatal(err)
		}
		ch := c.GetChoices()[0]
		if ch.FinishReason != nil {
			t.Errorf("finish_reason = %q, want unset", ch.GetFinishReason())
		}
		raw := ch.GetDelta().GetExtraFields()["tool_calls"]
		if !strings.Contains(raw, `"index":0`) || !strings.HasPrefix(raw, "[{") {
			t.Errorf("tool_calls raw = %q, want the delta as sent", raw)
		}
		if c.GetUsage() != nil || c.GetExtraFields()["usage"] != "null" {
			t.Errorf("usage = %v, extra %q; want unset and kept as null", c.GetUsage(), c.GetExtraFields()["usage"])
		}
		out := openaiwire.AppendChatCompletionChunk(nil, c)
		for _, want := range []string{`{"index":0,"delta":{"tool_calls":[{"index":0,`, `"finish_reason":null`, `"usage":null`} {
			if !bytes.Contains(out, []byte(want)) {
				t.Errorf("output lacks %s:\n%s", want, out)
			}
		}
	})
	t.Run("chunk_usage", func(t *testing.T) {
		c, err := openaiwire.ParseChatCompletionChunk(readTestdata(t, "chat_chunk_usage.json"))
		if err != nil {
			t.Fatal(err)
		}
		if len(c.GetChoices()) != 0 || c.GetUsage().GetTotalTokens() != 29 {
			t.Errorf("usage chunk: %d choices, usage %v", len(c.GetChoices()), c.GetUsage())
		}
		if out := openaiwire.AppendChatCompletionChunk(nil, c); !bytes.Contains(out, []byte(`"choices":[],"usage":{"prompt_tokens":19,`)) {
			t.Errorf("output:\n%s", out)
		}
	})
	t.Run("embedding_base64", func(t *testing.T) {
		r, err := openaiwire.ParseEmbeddingResponse(readTestdata(t, "embedding_response_base64.json"))
		if err != nil {
			t.Fatal(err)
		}
		if e := r.GetData()[0]; e.GetBase64() != "AACAPwAAAEAAAEBAAACAQA==" || len(e.GetFloats()) != 0 || e.GetIndex() != 0 {
			t.Errorf("embedding 0 = %v", e)
		}
	})
	t.Run("embedding_float", func(t *testing.T) {
		r, err := openaiwire.ParseEmbeddingResponse(readTestdata(t, "embedding_response_float.json"))
		if err != nil {
			t.Fatal(err)
		}
		want := []float64{-0.006929283495992422, -0.005336422007530928, 0, 1e-7, 3.4028234663852886e+38, -2.5, 0.1, 12}
		if diff := cmp.Diff(want, r.GetData()[0].GetFloats()); diff != "" {
			t.Errorf("floats (-want +got):\n%s", diff)
		}
		if r.GetData()[0].Base64 != nil || r.GetUsage().GetPromptTokens() != 8 {
			t.Errorf("response = %v", r)
		}
	})
	t.Run("embedding_request_tokens", func(t *testing.T) {
		req, err := openaiwire.ParseEmbeddingRequest(readTestdata(t, "embedding_request_tokens.json"))
		if err != nil {
			t.Fatal(err)
		}
		want := &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_TokenArrays{TokenArrays: &flexwayv1.TokenArrays{Values: []*flexwayv1.Tokens{
			{Values: []int64{1, 2, 3}}, {Values: []int64{0, 4096, 100263}},
		}}}}
		if diff := cmp.Diff(want, req.GetInput(), protocmp.Transform()); diff != "" {
			t.Errorf("input (-want +got):\n%s", diff)
		}
		if req.GetDimensions() != 256 || req.GetEncodingFormat() != "float" || req.GetUser() != "u-1" {
			t.Errorf("request = %v", req)
		}
	})
}

// TestGoldenOutputs compares the encoders whose output has no parsed
// input (the model list, the error envelope) byte for byte with golden
// files; -update rewrites them.
func TestGoldenOutputs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		got  []byte
	}{
		{
			name: "model_list",
			file: "models_list.golden.json",
			got: openaiwire.AppendModelList(nil, &flexwayv1.ListModelsResponse{Object: "list", Data: []*flexwayv1.Model{
				{Id: "gpt-4o", Object: "model", Created: 1767225600, OwnedBy: "openai-eu"},
				{Id: "llama-3.1-8b-instruct", Object: "model", Created: 1767225600, OwnedBy: "local"},
				{Id: "text-embedding-3-small", Created: 1767225600, OwnedBy: "openai-eu"},
			}}),
		},
		{
			name: "model_list_empty",
			file: "models_list_empty.golden.json",
			got:  openaiwire.AppendModelList(nil, &flexwayv1.ListModelsResponse{}),
		},
		{
			name: "error_with_param",
			file: "error_param.golden.json",
			got:  openaiwire.AppendError(nil, "invalid 'messages[2].content[1].type': content part type \"input_audio\" is not supported", "invalid_request_error", "messages[2].content[1].type", "invalid_request"),
		},
		{
			name: "error_without_param",
			file: "error_no_param.golden.json",
			got:  openaiwire.AppendError(nil, "Budget exhausted for tenant \"acme\"\u2028retry later", "insufficient_quota", "", ""),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata", tt.file)
			if *update {
				if err := os.WriteFile(path, append(tt.got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want := bytes.TrimSuffix(readTestdata(t, tt.file), []byte("\n"))
			if diff := cmp.Diff(string(want), string(tt.got)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tt.file, diff)
			}
			decodeJSON(t, tt.got)
		})
	}
}
