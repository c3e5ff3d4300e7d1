package openaiwire_test

import (
	"errors"
	"strings"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// msgs wraps message JSON in a valid request.
func msgs(messages string) string {
	return `{"model":"gpt-4o","messages":[` + messages + `]}`
}

// checkInvalidRequest asserts that err is a *faults.Error of reason
// InvalidRequest naming param, whose message holds wantMsg.
func checkInvalidRequest(t *testing.T, err error, param, wantMsg string) {
	t.Helper()
	var fe *faults.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error = %v (%T), want a *faults.Error", err, err)
	}
	if fe.Reason != faults.InvalidRequest {
		t.Errorf("reason = %q, want %q", fe.Reason, faults.InvalidRequest)
	}
	if fe.Param != param {
		t.Errorf("param = %q, want %q (message %q)", fe.Param, param, fe.Message)
	}
	if fe.Message == "" || !strings.Contains(fe.Message, wantMsg) {
		t.Errorf("message = %q, want it to contain %q", fe.Message, wantMsg)
	}
}

// parseNoPanic runs parse and turns a panic into a test failure.
func parseNoPanic[T any](t *testing.T, parse func([]byte) (T, error), body string) (v T, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic on %q: %v", body, r)
		}
	}()
	return parse([]byte(body))
}

func TestParseChatCompletionRequestErrors(t *testing.T) {
	t.Parallel()
	deep := `{"model":"m","messages":[{"role":"user","content":"x"}],"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`
	tests := []struct {
		name  string
		body  string
		param string
		msg   string
	}{
		{name: "empty_body", body: ``, param: "", msg: "byte offset 0"},
		{name: "truncated", body: `{"model":"gpt-4o",`, param: "", msg: "byte offset 18"},
		{name: "missing_colon", body: `{"model" "gpt-4o"}`, param: "", msg: "byte offset 9"},
		{name: "trailing_comma", body: `{"model":"gpt-4o",}`, param: "", msg: "byte offset 18"},
		{name: "trailing_data", body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]} x`, param: "", msg: "after top-level value"},
		{name: "bad_literal", body: `{"model":"m","stream":tru}`, param: "", msg: "byte offset"},
		{name: "bad_escape", body: `{"model":"m\x"}`, param: "", msg: "invalid escape"},
		{name: "bad_unicode_escape", body: `{"model":"m\u12G4"}`, param: "", msg: "\\u escape"},
		{name: "control_char_in_string", body: "{\"model\":\"m\x01\"}", param: "", msg: "control character"},
		{name: "bad_number", body: `{"model":"m","seed":01}`, param: "", msg: "byte offset"},
		{name: "bad_number_fraction", body: `{"model":"m","temperature":1.}`, param: "", msg: "decimal point"},
		{name: "bad_value_in_extra", body: `{"model":"m","tools":[1,,2]}`, param: "", msg: "byte offset"},
		{name: "too_deep", body: deep, param: "", msg: "max depth"},
		{name: "invalid_utf8", body: "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}", param: "", msg: "UTF-8 at byte offset 59"},
		{name: "invalid_utf8_in_extra", body: "{\"model\":\"m\",\"x\":\"\xff\"}", param: "", msg: "UTF-8"},
		{name: "top_level_array", body: `[{"model":"gpt-4o"}]`, param: "", msg: "must be a JSON object, got an array"},
		{name: "top_level_string", body: `"hello"`, param: "", msg: "must be a JSON object"},
		{name: "top_level_null", body: `null`, param: "", msg: "must be a JSON object"},
		{name: "model_missing", body: `{"messages":[{"role":"user","content":"hi"}]}`, param: "model", msg: "model"},
		{name: "model_empty", body: `{"model":"","messages":[{"role":"user","content":"hi"}]}`, param: "model", msg: "model"},
		{name: "model_number", body: `{"model":4,"messages":[{"role":"user","content":"hi"}]}`, param: "model", msg: "expected a string, got a number"},
		{name: "model_null", body: `{"model":null,"messages":[{"role":"user","content":"hi"}]}`, param: "model", msg: "got null"},
		{name: "messages_missing", body: `{"model":"gpt-4o"}`, param: "messages", msg: "at least one message"},
		{name: "messages_empty", body: `{"model":"gpt-4o","messages":[]}`, param: "messages", msg: "at least one message"},
		{name: "messages_not_array", body: `{"model":"gpt-4o","messages":{"role":"user"}}`, param: "messages", msg: "expected an array, got an object"},
		{name: "messages_string", body: `{"model":"gpt-4o","messages":"hi"}`, param: "messages", msg: "expected an array, got a string"},
		{name: "message_not_object", body: msgs(`"hi"`), param: "messages[0]", msg: "expected an object"},
		{name: "role_missing", body: msgs(`{"role":"system","content":"x"},{"content":"hi"}`), param: "messages[1].role", msg: "needs a role"},
		{name: "role_number", body: msgs(`{"role":1,"content":"hi"}`), param: "messages[0].role", msg: "expected a string"},
		{name: "role_null", body: msgs(`{"role":null,"content":"hi"}`), param: "messages[0].role", msg: "expected a string, got null"},
		{name: "role_empty", body: msgs(`{"role":"","content":"hi"}`), param: "messages[0].role", msg: "must not be empty"},
		{name: "content_number", body: msgs(`{"role":"user","content":42}`), param: "messages[0].content", msg: "got a number"},
		{name: "content_object", body: msgs(`{"role":"user","content":{"type":"text"}}`), param: "messages[0].content", msg: "got an object"},
		{name: "content_bool", body: msgs(`{"role":"user","content":true}`), param: "messages[0].content", msg: "got a boolean"},
		{name: "part_not_object", body: msgs(`{"role":"user","content":["hi"]}`), param: "messages[0].content[0]", msg: "expected an object, got a string"},
		{name: "part_input_audio", body: msgs(`{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"input_audio","input_audio":{"data":"AAA=","format":"wav"}}]}`), param: "messages[2].content[1].type", msg: `"input_audio" is not supported`},
		{name: "part_file", body: msgs(`{"role":"user","content":[{"type":"file","file":{"file_id":"f"}}]}`), param: "messages[0].content[0].type", msg: `"file" is not supported`},
		{name: "part_unknown", body: msgs(`{"role":"user","content":[{"type":"hologram"}]}`), param: "messages[0].content[0].type", msg: "not supported"},
		{name: "part_type_missing", body: msgs(`{"role":"user","content":[{"text":"hi"}]}`), param: "messages[0].content[0].type", msg: "needs a type"},
		{name: "part_type_number", body: msgs(`{"role":"user","content":[{"type":1,"text":"hi"}]}`), param: "messages[0].content[0].type", msg: "expected a string"},
		{name: "text_part_without_text", body: msgs(`{"role":"user","content":[{"type":"text"}]}`), param: "messages[0].content[0].text", msg: "string text"},
		{name: "text_part_number_text", body: msgs(`{"role":"user","content":[{"type":"text","text":5}]}`), param: "messages[0].content[0].text", msg: "expected a string"},
		{name: "text_part_null_text", body: msgs(`{"role":"user","content":[{"type":"text","text":null}]}`), param: "messages[0].content[0].text", msg: "string text"},
		{name: "image_part_without_image_url", body: msgs(`{"role":"user","content":[{"type":"image_url"}]}`), param: "messages[0].content[0].image_url", msg: "image_url object"},
		{name: "image_part_string_image_url", body: msgs(`{"role":"user","content":[{"type":"image_url","image_url":"https://x/y.png"}]}`), param: "messages[0].content[0].image_url", msg: "expected an object, got a string"},
		{name: "image_part_without_url", body: msgs(`{"role":"user","content":[{"type":"image_url","image_url":{"detail":"low"}}]}`), param: "messages[0].content[0].image_url.url", msg: "string url"},
		{name: "image_part_number_url", body: msgs(`{"role":"user","content":[{"type":"image_url","image_url":{"url":7}}]}`), param: "messages[0].content[0].image_url.url", msg: "expected a string"},
		{name: "image_part_number_detail", body: msgs(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"u","detail":1}}]}`), param: "messages[0].content[0].image_url.detail", msg: "expected a string"},
		{name: "refusal_part_without_refusal", body: msgs(`{"role":"user","content":"u"},{"role":"assistant","content":[{"type":"refusal"}]}`), param: "messages[1].content[0].refusal", msg: "string refusal"},
		{name: "refusal_part_number_refusal", body: msgs(`{"role":"assistant","content":[{"type":"text","text":"a"},{"refusal":7,"type":"refusal"}]}`), param: "messages[0].content[1].refusal", msg: "string refusal"},
		{name: "refusal_part_null_refusal", body: msgs(`{"role":"assistant","content":[{"type":"refusal","refusal":null}]}`), param: "messages[0].content[0].refusal", msg: "string refusal"},
		{name: "refusal_part_object_refusal", body: msgs(`{"role":"assistant","content":[{"type":"refusal","refusal":{"text":"no"}}]}`), param: "messages[0].content[0].refusal", msg: "string refusal"},
		{name: "refusal_part_text_only", body: msgs(`{"role":"assistant","content":[{"type":"refusal","text":"no"}]}`), param: "messages[0].content[0].refusal", msg: "string refusal"},
		{name: "name_number", body: msgs(`{"role":"user","content":"hi","name":3}`), param: "messages[0].name", msg: "expected a string"},
		{name: "n_zero", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":0}`, param: "n", msg: "between 1 and 128"},
		{name: "n_129", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":129}`, param: "n", msg: "between 1 and 128"},
		{name: "n_negative", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":-1}`, param: "n", msg: "between 1 and 128"},
		{name: "n_huge", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":4294967297}`, param: "n", msg: "between 1 and 128"},
		{name: "n_string", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":"2"}`, param: "n", msg: "expected an integer, got a string"},
		{name: "n_fraction", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":1.5}`, param: "n", msg: "expected an integer"},
		{name: "max_tokens_negative", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":-1}`, param: "max_tokens", msg: "must not be negative"},
		{name: "max_tokens_fraction", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":10.5}`, param: "max_tokens", msg: "expected an integer"},
		{name: "max_tokens_string", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":"100"}`, param: "max_tokens", msg: "expected an integer"},
		{name: "max_tokens_out_of_range", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":12345678901234567890}`, param: "max_tokens", msg: "out of range"},
		{name: "max_tokens_huge_float", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1e300}`, param: "max_tokens", msg: "out of range"},
		{name: "max_completion_tokens_negative", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":-5}`, param: "max_completion_tokens", msg: "must not be negative"},
		{name: "max_completion_tokens_bool", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":true}`, param: "max_completion_tokens", msg: "got a boolean"},
		{name: "stream_string", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":"yes"}`, param: "stream", msg: "expected a boolean"},
		{name: "stream_options_number", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream_options":1}`, param: "stream_options", msg: "expected an object"},
		{name: "include_usage_string", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":"true"}}`, param: "stream_options.include_usage", msg: "expected a boolean"},
		{name: "user_number", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"user":12}`, param: "user", msg: "expected a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := parseNoPanic(t, openaiwire.ParseChatCompletionRequest, tt.body)
			if err == nil {
				t.Fatalf("parsed %q to %v, want an error", tt.body, req)
			}
			if req != nil {
				t.Errorf("got a request beside the error")
			}
			checkInvalidRequest(t, err, tt.param, tt.msg)
		})
	}
}

func TestParseEmbeddingRequestErrors(t *testing.T) {
	t.Parallel()
	in := func(input string) string { return `{"model":"text-embedding-3-small","input":` + input + `}` }
	tests := []struct {
		name  string
		body  string
		param string
		msg   string
	}{
		{name: "malformed", body: `{"model":`, param: "", msg: "byte offset 9"},
		{name: "invalid_utf8", body: "{\"model\":\"m\",\"input\":\"\xc3\x28\"}", param: "", msg: "UTF-8 at byte offset 22"},
		{name: "top_level_array", body: `["a"]`, param: "", msg: "must be a JSON object"},
		{name: "model_missing", body: `{"input":"hello"}`, param: "model", msg: "model"},
		{name: "model_empty", body: `{"model":"","input":"hello"}`, param: "model", msg: "model"},
		{name: "input_missing", body: `{"model":"m"}`, param: "input", msg: "provide an input"},
		{name: "input_null", body: in(`null`), param: "input", msg: "provide an input"},
		{name: "input_empty_string", body: in(`""`), param: "input", msg: "empty string"},
		{name: "input_empty_array", body: in(`[]`), param: "input", msg: "empty array"},
		{name: "input_number", body: in(`5`), param: "input", msg: "expected a string or an array, got a number"},
		{name: "input_object", body: in(`{"text":"a"}`), param: "input", msg: "got an object"},
		{name: "input_texts_mixed", body: in(`["a","b",1]`), param: "input[2]", msg: "expected a string, got a number"},
		{name: "input_texts_empty_element", body: in(`["a",""]`), param: "input[1]", msg: "empty string"},
		{name: "input_tokens_mixed", body: in(`[1,"a"]`), param: "input[1]", msg: "expected an integer, got a string"},
		{name: "input_tokens_negative", body: in(`[1,2,3,-4]`), param: "input[3]", msg: "must not be negative"},
		{name: "input_tokens_fraction", body: in(`[1.5]`), param: "input[0]", msg: "expected an integer"},
		{name: "input_token_arrays_negative", body: in(`[[1],[2,3,-1]]`), param: "input[1][2]", msg: "must not be negative"},
		{name: "input_token_arrays_empty_inner", body: in(`[[1],[]]`), param: "input[1]", msg: "must not be empty"},
		{name: "input_token_arrays_mixed", body: in(`[[1],2]`), param: "input[1]", msg: "expected an array, got a number"},
		{name: "input_token_arrays_string_inner", body: in(`[[1],["a"]]`), param: "input[1][0]", msg: "expected an integer"},
		{name: "input_bool_element", body: in(`[true]`), param: "input[0]", msg: "got a boolean"},
		{name: "input_null_element", body: in(`[null]`), param: "input[0]", msg: "got null"},
		{name: "dimensions_zero", body: `{"model":"m","input":"a","dimensions":0}`, param: "dimensions", msg: "positive integer"},
		{name: "dimensions_negative", body: `{"model":"m","input":"a","dimensions":-256}`, param: "dimensions", msg: "positive integer"},
		{name: "dimensions_fraction", body: `{"model":"m","input":"a","dimensions":25.6}`, param: "dimensions", msg: "expected an integer"},
		{name: "dimensions_string", body: `{"model":"m","input":"a","dimensions":"256"}`, param: "dimensions", msg: "expected an integer"},
		{name: "dimensions_too_big", body: `{"model":"m","input":"a","dimensions":3000000000}`, param: "dimensions", msg: "positive integer"},
		{name: "encoding_format_unknown", body: `{"model":"m","input":"a","encoding_format":"int8"}`, param: "encoding_format", msg: `"float" or "base64"`},
		{name: "encoding_format_number", body: `{"model":"m","input":"a","encoding_format":1}`, param: "encoding_format", msg: "expected a string"},
		{name: "user_bool", body: `{"model":"m","input":"a","user":false}`, param: "user", msg: "expected a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := parseNoPanic(t, openaiwire.ParseEmbeddingRequest, tt.body)
			if err == nil {
				t.Fatalf("parsed %q to %v, want an error", tt.body, req)
			}
			checkInvalidRequest(t, err, tt.param, tt.msg)
		})
	}
}

// TestParseUpstreamErrors checks that garbage from an upstream is a plain
// error, never a *faults.Error, and never a panic.
func TestParseUpstreamErrors(t *testing.T) {
	t.Parallel()
	parsers := []struct {
		name  string
		parse func([]byte) (any, error)
	}{
		{name: "completion", parse: func(b []byte) (any, error) { return openaiwire.ParseChatCompletion(b) }},
		{name: "chunk", parse: func(b []byte) (any, error) { return openaiwire.ParseChatCompletionChunk(b) }},
		{name: "embedding_response", parse: func(b []byte) (any, error) { return openaiwire.ParseEmbeddingResponse(b) }},
	}
	bodies := []struct {
		name string
		body string
	}{
		{name: "empty", body: ``},
		{name: "html", body: `<html>502 Bad Gateway</html>`},
		{name: "done_marker", body: `[DONE]`},
		{name: "truncated", body: `{"id":"x","choices":[{"index":0`},
		{name: "array", body: `[]`},
		{name: "invalid_utf8", body: "{\"id\":\"\xff\"}"},
		{name: "id_number", body: `{"id":1,"object":"list","model":2}`},
		{name: "choices_object", body: `{"choices":{},"data":{}}`},
		{name: "created_string", body: `{"created":"now","data":"x"}`},
		{name: "usage_array", body: `{"usage":[]}`},
	}
	for _, p := range parsers {
		for _, b := range bodies {
			t.Run(p.name+"/"+b.name, func(t *testing.T) {
				t.Parallel()
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panic: %v", r)
					}
				}()
				_, err := p.parse([]byte(b.body))
				if err == nil {
					t.Fatalf("parsed %q, want an error", b.body)
				}
				var fe *faults.Error
				if errors.As(err, &fe) {
					t.Errorf("error is a *faults.Error, want a plain error: %v", err)
				}
				if !strings.HasPrefix(err.Error(), "openaiwire: parse upstream ") {
					t.Errorf("error = %q, want the openaiwire prefix", err)
				}
			})
		}
	}
}

func TestAppendChatCompletionRequestErrors(t *testing.T) {
	t.Parallel()
	user := func() *flexwayv1.ChatMessage {
		return &flexwayv1.ChatMessage{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "hi"}}
	}
	tests := []struct {
		name  string
		req   *flexwayv1.CreateChatCompletionRequest
		u     openaiwire.Upstream
		param string
	}{
		{name: "nil_request", req: nil, u: openaiwire.Upstream{Model: "m"}, param: ""},
		{name: "no_model", req: &flexwayv1.CreateChatCompletionRequest{Messages: []*flexwayv1.ChatMessage{user()}}, param: "model"},
		{
			name:  "bad_top_level_extra",
			req:   &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{user()}, ExtraFields: map[string]string{"seed": "12 13"}},
			param: "seed",
		},
		{
			name:  "empty_extra",
			req:   &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{user()}, ExtraFields: map[string]string{"tools": ""}},
			param: "tools",
		},
		{
			name: "bad_message_extra",
			req: &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{
				user(), {Role: "assistant", Content: &flexwayv1.ChatMessage_Null{}, ExtraFields: map[string]string{"tool_calls": "[{"}},
			}},
			param: "messages[1].tool_calls",
		},
		{
			name: "bad_image_url_extra",
			req: &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{
				{Role: "user", Content: &flexwayv1.ChatMessage_Parts{Parts: &flexwayv1.ContentParts{Parts: []*flexwayv1.ContentPart{
					{Type: "text", Text: ptr("a")},
					{Type: "image_url", ImageUrl: &flexwayv1.ImageUrl{Url: "u", ExtraFields: map[string]string{"x": "\"a\xffb\""}}},
				}}}},
			}},
			param: "messages[0].content[1].image_url.x",
		},
		{
			name: "bad_stream_options_extra",
			req: &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{user()},
				StreamOptions: &flexwayv1.StreamOptions{ExtraFields: map[string]string{"x": "nul"}}},
			u:     openaiwire.Upstream{Stream: true},
			param: "stream_options.x",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dst := []byte("prefix")
			out, err := openaiwire.AppendChatCompletionRequest(dst, tt.req, tt.u)
			if err == nil {
				t.Fatalf("appended %s, want an error", out)
			}
			if string(out) != "prefix" {
				t.Errorf("dst = %q on error, want it unchanged", out)
			}
			checkInvalidRequest(t, err, tt.param, "")
		})
	}
}

func TestAppendEmbeddingRequestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		req   *flexwayv1.CreateEmbeddingRequest
		model string
		param string
	}{
		{name: "nil_request", req: nil, model: "m", param: ""},
		{name: "no_model", req: &flexwayv1.CreateEmbeddingRequest{Input: &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Text{Text: "a"}}}, param: "model"},
		{name: "no_input", req: &flexwayv1.CreateEmbeddingRequest{Model: "m"}, param: "input"},
		{name: "bad_extra", req: &flexwayv1.CreateEmbeddingRequest{Model: "m", Input: &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Text{Text: "a"}}, ExtraFields: map[string]string{"x": "{"}}, param: "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := openaiwire.AppendEmbeddingRequest(nil, tt.req, tt.model)
			if err == nil {
				t.Fatalf("appended %s, want an error", out)
			}
			checkInvalidRequest(t, err, tt.param, "")
		})
	}
}

func ptr[T any](v T) *T { return &v }
