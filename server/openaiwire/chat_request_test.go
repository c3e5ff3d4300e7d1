package openaiwire_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/openaiwire"
)

// TestAppendChatCompletionRequestUpstream checks what the upstream
// receives: the client's request with only model and the stream members
// changed.
func TestAppendChatCompletionRequestUpstream(t *testing.T) {
	t.Parallel()
	const base = `"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"seed":12345678901234567890,"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"x_vendor":{"a":[1,{"b":null}]}`
	tests := []struct {
		name string
		in   string
		u    openaiwire.Upstream
		// edit turns the decoded input into the expected decoded output.
		edit func(m map[string]any)
	}{
		{
			name: "stream_true_without_stream_options",
			in:   `{"model":"gpt-4o",` + base + `}`,
			u:    openaiwire.Upstream{Model: "gpt-4o-2024-08-06", Stream: true},
			edit: func(m map[string]any) {
				m["model"] = "gpt-4o-2024-08-06"
				m["stream"] = true
				m["stream_options"] = map[string]any{"include_usage": true}
			},
		},
		{
			name: "stream_true_keeps_other_stream_options",
			in:   `{"model":"gpt-4o",` + base + `,"stream":true,"stream_options":{"include_usage":false,"x_chunk_usage":true}}`,
			u:    openaiwire.Upstream{Model: "local-llama", Stream: true},
			edit: func(m map[string]any) {
				m["model"] = "local-llama"
				m["stream_options"] = map[string]any{"include_usage": true, "x_chunk_usage": true}
			},
		},
		{
			name: "stream_true_replaces_null_stream",
			in:   `{"model":"gpt-4o",` + base + `,"stream":null,"stream_options":null}`,
			u:    openaiwire.Upstream{Model: "m2", Stream: true},
			edit: func(m map[string]any) {
				m["model"] = "m2"
				m["stream"] = true
				m["stream_options"] = map[string]any{"include_usage": true}
			},
		},
		{
			name: "unary_drops_stream_options",
			in:   `{"model":"gpt-4o",` + base + `,"stream":true,"stream_options":{"include_usage":true}}`,
			u:    openaiwire.Upstream{Model: "gpt-4o"},
			edit: func(m map[string]any) {
				m["stream"] = false
				delete(m, "stream_options")
			},
		},
		{
			name: "unary_without_stream_writes_none",
			in:   `{"model":"gpt-4o",` + base + `}`,
			u:    openaiwire.Upstream{Model: "gpt-4o-mini"},
			edit: func(m map[string]any) { m["model"] = "gpt-4o-mini" },
		},
		{
			// A replayed assistant refusal reaches the upstream unchanged,
			// its refusal member and any other member of the part included.
			name: "refusal_part_carried",
			in: `{"model":"gpt-4o","messages":[{"role":"user","content":"how do I pick a lock?"},` +
				`{"role":"assistant","content":[{"type":"refusal","refusal":"I can't help with that. \u00e9\n","x_part":[1,null]}]},` +
				`{"role":"assistant","content":[{"type":"text","text":"Try:"},{"refusal":"No.","type":"refusal"}]},` +
				`{"role":"user","content":[{"type":"text","text":"why?"}]}]}`,
			u:    openaiwire.Upstream{Model: "gpt-4o"},
			edit: func(m map[string]any) {},
		},
		{
			name: "unary_keeps_stream_false",
			in:   `{"model":"gpt-4o",` + base + `,"stream":false}`,
			u:    openaiwire.Upstream{},
			edit: func(m map[string]any) {},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := openaiwire.ParseChatCompletionRequest([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			out, err := openaiwire.AppendChatCompletionRequest([]byte("prefix:"), req, tt.u)
			if err != nil {
				t.Fatal(err)
			}
			if string(out[:7]) != "prefix:" {
				t.Fatalf("dst prefix lost: %s", out)
			}
			out = out[7:]
			want := decodeJSON(t, []byte(tt.in)).(map[string]any)
			tt.edit(want)
			wantJSON, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			if diff := diffJSON(t, wantJSON, out); diff != "" {
				t.Errorf("upstream request (-want +got):\n%s\ngot: %s", diff, out)
			}
			// The request itself is not modified.
			again, err := openaiwire.ParseChatCompletionRequest([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(req, again) {
				t.Errorf("AppendChatCompletionRequest modified its request")
			}
		})
	}
}

// TestNullsKept checks that a null given for a typed field is written back
// as null, and that a value given after a null (duplicate keys) wins.
func TestNullsKept(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
	}{
		{name: "request_nulls", in: `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u","detail":null}}],"name":null}],"max_tokens":null,"max_completion_tokens":null,"n":null,"user":null,"stream":false,"stream_options":null}`},
		{name: "include_usage_null", in: `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true,"x":null}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := openaiwire.ParseChatCompletionRequest([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			out, err := openaiwire.AppendChatCompletionRequest(nil, req, openaiwire.Upstream{Stream: req.GetStream()})
			if err != nil {
				t.Fatal(err)
			}
			if req.GetStream() {
				// stream_options is rewritten; compare the rest.
				if diff := diffJSON(t, []byte(tt.in), out); diff != "" {
					t.Errorf("(-in +out):\n%s", diff)
				}
				return
			}
			want := decodeJSON(t, []byte(tt.in)).(map[string]any)
			delete(want, "stream_options")
			wantJSON, _ := json.Marshal(want)
			if diff := diffJSON(t, wantJSON, out); diff != "" {
				t.Errorf("(-want +out):\n%s\n%s", diff, out)
			}
		})
	}

	t.Run("duplicate_keys_last_wins", func(t *testing.T) {
		t.Parallel()
		req, err := openaiwire.ParseChatCompletionRequest([]byte(`{"model":"a","max_tokens":null,"max_tokens":5,"user":"u","user":null,"messages":[],"messages":[{"role":"user","content":"x"}],"model":"b"}`))
		if err != nil {
			t.Fatal(err)
		}
		if req.GetModel() != "b" || req.GetMaxTokens() != 5 || req.User != nil || len(req.GetMessages()) != 1 {
			t.Errorf("request = %v", req)
		}
		if _, ok := req.GetExtraFields()["max_tokens"]; ok {
			t.Errorf("max_tokens null kept beside its value")
		}
		if got := req.GetExtraFields()["user"]; got != "null" {
			t.Errorf("user extra = %q, want null", got)
		}
	})
}

// TestIntegralNumbers checks that integer fields take integral numbers
// written with a fraction or an exponent.
func TestIntegralNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want int64
	}{
		{name: "plain", in: `100`, want: 100},
		{name: "fraction_zero", in: `100.0`, want: 100},
		{name: "exponent", in: `1e2`, want: 100},
		{name: "negative_zero", in: `-0`, want: 0},
		{name: "max_int64", in: `9223372036854775807`, want: 9223372036854775807},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := openaiwire.ParseChatCompletionRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":` + tt.in + `}`))
			if err != nil {
				t.Fatal(err)
			}
			if got := req.GetMaxTokens(); got != tt.want {
				t.Errorf("max_tokens = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestResponseEncodersRobust checks the response encoders on messages
// built by code: invalid raw values are written as null, raw line breaks
// are compacted away, nil entries do not panic.
func TestResponseEncodersRobust(t *testing.T) {
	t.Parallel()
	c := &flexwayv1.ChatCompletionChunk{
		Id: "c1", Object: "chat.completion.chunk", Model: "m",
		Choices: []*flexwayv1.ChatCompletionChunkChoice{
			{Delta: &flexwayv1.ChatMessage{ExtraFields: map[string]string{
				"tool_calls": "[\n  {\"index\": 0, \"a\": \"x\\ny\"}\n]",
				"broken":     "{",
			}}},
			nil,
		},
		ExtraFields: map[string]string{"id": `"shadowed"`, "x": "\xff", "y": "\"a\xffb\""},
	}
	out := openaiwire.AppendChatCompletionChunk(nil, c)
	want := `{"id":"c1","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"broken":null,"tool_calls":[{"index":0,"a":"x\ny"}]},"finish_reason":null},{"index":0,"finish_reason":null}],"x":null,"y":null}`
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("chunk (-want +got):\n%s", diff)
	}
	for _, f := range []func() []byte{
		func() []byte { return openaiwire.AppendChatCompletion(nil, nil) },
		func() []byte { return openaiwire.AppendChatCompletionChunk(nil, nil) },
		func() []byte { return openaiwire.AppendEmbeddingResponse(nil, nil) },
		func() []byte { return openaiwire.AppendModelList(nil, nil) },
		func() []byte {
			return openaiwire.AppendChatCompletion(nil, &flexwayv1.ChatCompletion{Choices: []*flexwayv1.ChatCompletionChoice{nil, {Message: &flexwayv1.ChatMessage{
				Content: &flexwayv1.ChatMessage_Parts{Parts: &flexwayv1.ContentParts{Parts: []*flexwayv1.ContentPart{nil}}},
			}}}})
		},
		func() []byte {
			return openaiwire.AppendEmbeddingResponse(nil, &flexwayv1.CreateEmbeddingResponse{Data: []*flexwayv1.Embedding{nil, {Floats: []float64{1, 0.5, 1e-9, 1e21}}}})
		},
	} {
		decodeJSON(t, f())
	}
}

// TestAppendStringEscapes checks string escaping against encoding/json.
func TestAppendStringEscapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "plain", in: "hello", want: `"hello"`},
		{name: "quote_backslash", in: `a"b\c`, want: `"a\"b\\c"`},
		{name: "controls", in: "\n\r\t\b\f\x00\x1f", want: `"\n\r\t\b\f\u0000\u001f"`},
		{name: "line_separators", in: "a\u2028b\u2029c", want: `"a\u2028b\u2029c"`},
		{name: "invalid_utf8", in: "a\xffb\xc3", want: `"a\ufffdb\ufffd"`},
		{name: "unicode_kept", in: "été 😀 <&>", want: `"été 😀 <&>"`},
		{name: "long_ascii_then_escape", in: "0123456789abcdef0123456789abcdef\"", want: `"0123456789abcdef0123456789abcdef\""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := openaiwire.AppendError(nil, tt.in, "t", "", "")
			want := `{"error":{"message":` + tt.want + `,"type":"t","param":null,"code":null}}`
			if diff := cmp.Diff(want, string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseCopiesInput checks that a parsed message shares no memory with
// its input, which the caller may reuse.
func TestParseCopiesInput(t *testing.T) {
	t.Parallel()
	in := readTestdata(t, "chat_request_tools.json")
	req, err := openaiwire.ParseChatCompletionRequest(in)
	if err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(req)
	for i := range in {
		in[i] = 'X'
	}
	if !proto.Equal(want, req) {
		t.Errorf("overwriting the input changed the parsed request")
	}
}
