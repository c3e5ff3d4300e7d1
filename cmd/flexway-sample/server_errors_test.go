package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantType   string
		wantParam  string // "" means null
		wantCode   string // "" means null
	}{
		{name: "chat_malformed_json", method: "POST", path: "/v1/chat/completions", body: `{"model":`, wantStatus: 400, wantType: "invalid_request_error", wantCode: "invalid_json"},
		{name: "chat_trailing_garbage", method: "POST", path: "/v1/chat/completions", body: `{"messages":[]} x`, wantStatus: 400, wantType: "invalid_request_error", wantCode: "invalid_json"},
		{name: "chat_missing_messages", method: "POST", path: "/v1/chat/completions", body: `{"model":"sample-small"}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "messages", wantCode: "missing_required_parameter"},
		{name: "chat_null_messages", method: "POST", path: "/v1/chat/completions", body: `{"messages":null}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "messages", wantCode: "missing_required_parameter"},
		{name: "chat_empty_messages", method: "POST", path: "/v1/chat/completions", body: `{"messages":[]}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "messages", wantCode: "empty_array"},
		{name: "chat_n_zero", method: "POST", path: "/v1/chat/completions", body: `{"n":0,"messages":[{"role":"user","content":"hi"}]}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "n", wantCode: "invalid_value"},
		{name: "chat_bad_content", method: "POST", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":42}]}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "messages[0].content", wantCode: "invalid_type"},
		{name: "chat_wrong_method", method: "GET", path: "/v1/chat/completions", wantStatus: 405, wantType: "invalid_request_error", wantCode: "method_not_allowed"},
		{name: "unknown_path", method: "POST", path: "/v1/completions", body: `{}`, wantStatus: 404, wantType: "invalid_request_error", wantCode: "unknown_url"},
		{name: "root_path", method: "GET", path: "/", wantStatus: 404, wantType: "invalid_request_error", wantCode: "unknown_url"},
		{name: "trailing_slash", method: "GET", path: "/v1/models/", wantStatus: 404, wantType: "invalid_request_error", wantCode: "unknown_url"},
		{name: "unknown_model", method: "GET", path: "/v1/models/gpt-4o", wantStatus: 404, wantType: "invalid_request_error", wantParam: "model", wantCode: "model_not_found"},
		{name: "embeddings_malformed_json", method: "POST", path: "/v1/embeddings", body: `[`, wantStatus: 400, wantType: "invalid_request_error", wantCode: "invalid_json"},
		{name: "embeddings_missing_input", method: "POST", path: "/v1/embeddings", body: `{"model":"sample-small"}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "input", wantCode: "missing_required_parameter"},
		{name: "embeddings_empty_array", method: "POST", path: "/v1/embeddings", body: `{"input":[]}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "input", wantCode: "invalid_value"},
		{name: "embeddings_mixed_array", method: "POST", path: "/v1/embeddings", body: `{"input":["a",1]}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "input", wantCode: "invalid_value"},
		{name: "embeddings_object_input", method: "POST", path: "/v1/embeddings", body: `{"input":{"a":1}}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "input", wantCode: "invalid_value"},
		{name: "embeddings_zero_dimensions", method: "POST", path: "/v1/embeddings", body: `{"input":"a","dimensions":0}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "dimensions", wantCode: "invalid_value"},
		{name: "embeddings_bad_encoding", method: "POST", path: "/v1/embeddings", body: `{"input":"a","encoding_format":"hex"}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "encoding_format", wantCode: "invalid_value"},
	}
	srv := newTestServer(t, fastOptions())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := do(t, srv, tt.method, tt.path, tt.body, nil)
			checkError(t, resp, body, tt.wantStatus, tt.wantType, tt.wantParam, tt.wantCode)
			if tt.wantStatus == http.StatusMethodNotAllowed && resp.Header.Get("Allow") != http.MethodPost {
				t.Errorf("Allow = %q, want POST", resp.Header.Get("Allow"))
			}
		})
	}
}

// checkError asserts an OpenAI error envelope with all four fields present.
func checkError(tb testing.TB, resp *http.Response, body []byte, status int, typ, param, code string) {
	tb.Helper()
	if resp.StatusCode != status {
		tb.Errorf("status = %d, want %d; body %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		tb.Errorf("Content-Type = %q, want application/json", ct)
	}
	var env struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Error == nil {
		tb.Fatalf("not an OpenAI error envelope: %s (%v)", body, err)
	}
	field := func(name, want string) {
		raw, ok := env.Error[name]
		if !ok {
			tb.Errorf("error.%s missing in %s", name, body)
			return
		}
		wantRaw := "null"
		if want != "" {
			b, _ := json.Marshal(want)
			wantRaw = string(b)
		}
		if string(raw) != wantRaw {
			tb.Errorf("error.%s = %s, want %s", name, raw, wantRaw)
		}
	}
	var msg string
	if err := json.Unmarshal(env.Error["message"], &msg); err != nil || msg == "" {
		tb.Errorf("error.message = %s, want a non-empty string", env.Error["message"])
	}
	field("type", typ)
	field("param", param)
	field("code", code)
}

func TestRequireBearer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		require    string
		auth       string
		wantStatus int
	}{
		{name: "not_required_no_header", require: "", auth: "", wantStatus: 200},
		{name: "required_no_header", require: "s3cret", auth: "", wantStatus: 401},
		{name: "required_wrong_token", require: "s3cret", auth: "Bearer nope", wantStatus: 401},
		{name: "required_token_prefix", require: "s3cret", auth: "Bearer s3cre", wantStatus: 401},
		{name: "required_basic_scheme", require: "s3cret", auth: "Basic czNjcmV0", wantStatus: 401},
		{name: "required_right_token", require: "s3cret", auth: "Bearer s3cret", wantStatus: 200},
		{name: "scheme_is_case_insensitive", require: "s3cret", auth: "bearer s3cret", wantStatus: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := fastOptions()
			opts.requireBearer = tt.require
			srv := newTestServer(t, opts)
			header := map[string]string{}
			if tt.auth != "" {
				header["Authorization"] = tt.auth
			}
			for _, path := range []string{"/v1/models", "/v1/chat/completions"} {
				method, body := http.MethodGet, ""
				if path == "/v1/chat/completions" {
					method, body = http.MethodPost, `{"messages":[{"role":"user","content":"hi"}]}`
				}
				resp, b := do(t, srv, method, path, body, header)
				if tt.wantStatus == http.StatusUnauthorized {
					checkError(t, resp, b, 401, "invalid_request_error", "", "invalid_api_key")
					if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
						t.Errorf("WWW-Authenticate = %q, want Bearer", resp.Header.Get("WWW-Authenticate"))
					}
				} else if resp.StatusCode != tt.wantStatus {
					t.Errorf("%s: status = %d, want %d; body %s", path, resp.StatusCode, tt.wantStatus, b)
				}
			}
		})
	}
}

func TestTestHooks(t *testing.T) {
	t.Parallel()
	const chat = `{"model":"%s","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name        string
		method      string
		path        string
		body        string
		header      map[string]string
		wantStatus  int
		wantType    string // for errors
		wantCode    string // for errors
		wantModel   string // for successful chat answers
		wantAtLeast time.Duration
	}{
		{name: "status_header_503", method: "POST", path: "/v1/chat/completions", body: strings.ReplaceAll(chat, "%s", "sample-small"),
			header: map[string]string{"X-Sample-Status": "503"}, wantStatus: 503, wantType: "server_error"},
		{name: "status_header_429", method: "GET", path: "/v1/models",
			header: map[string]string{"X-Sample-Status": "429"}, wantStatus: 429, wantType: "requests", wantCode: "rate_limit_exceeded"},
		{name: "status_header_not_a_number", method: "GET", path: "/v1/models",
			header: map[string]string{"X-Sample-Status": "soon"}, wantStatus: 400, wantType: "invalid_request_error", wantCode: "invalid_test_hook"},
		{name: "status_header_success_refused", method: "GET", path: "/v1/models",
			header: map[string]string{"X-Sample-Status": "200"}, wantStatus: 400, wantType: "invalid_request_error", wantCode: "invalid_test_hook"},
		{name: "delay_header", method: "POST", path: "/v1/chat/completions", body: strings.ReplaceAll(chat, "%s", "sample-small"),
			header: map[string]string{"X-Sample-Delay": "200ms"}, wantStatus: 200, wantModel: "sample-small", wantAtLeast: 200 * time.Millisecond},
		{name: "delay_header_invalid", method: "GET", path: "/v1/models",
			header: map[string]string{"X-Sample-Delay": "-1s"}, wantStatus: 400, wantType: "invalid_request_error", wantCode: "invalid_test_hook"},
		{name: "delay_then_status", method: "GET", path: "/v1/models",
			header: map[string]string{"X-Sample-Delay": "100ms", "X-Sample-Status": "502"}, wantStatus: 502, wantType: "server_error", wantAtLeast: 100 * time.Millisecond},
		{name: "model_fail_503_chat", method: "POST", path: "/v1/chat/completions", body: strings.ReplaceAll(chat, "%s", "sample-fail-503"),
			wantStatus: 503, wantType: "server_error", wantCode: "sample_unavailable"},
		{name: "model_fail_503_stream", method: "POST", path: "/v1/chat/completions", body: `{"model":"sample-fail-503","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			wantStatus: 503, wantType: "server_error", wantCode: "sample_unavailable"},
		{name: "model_fail_503_embeddings", method: "POST", path: "/v1/embeddings", body: `{"model":"sample-fail-503","input":"hi"}`,
			wantStatus: 503, wantType: "server_error", wantCode: "sample_unavailable"},
		{name: "model_slow_chat", method: "POST", path: "/v1/chat/completions", body: strings.ReplaceAll(chat, "%s", "sample-slow"),
			wantStatus: 200, wantModel: "sample-slow", wantAtLeast: 500 * time.Millisecond},
	}
	srv := newTestServer(t, fastOptions())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			resp, body := do(t, srv, tt.method, tt.path, tt.body, tt.header)
			if elapsed := time.Since(start); elapsed < tt.wantAtLeast {
				t.Errorf("answered after %v, want at least %v", elapsed, tt.wantAtLeast)
			}
			if tt.wantStatus >= 400 {
				checkError(t, resp, body, tt.wantStatus, tt.wantType, "", tt.wantCode)
				return
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tt.wantStatus, body)
			}
			var got gotCompletion
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if got.Model != tt.wantModel || len(got.Choices) != 1 || got.Choices[0].Message.Content != sampleAnswer(tt.wantModel, "hi") {
				t.Errorf("model %q choices %+v, want a normal answer from %q", got.Model, got.Choices, tt.wantModel)
			}
		})
	}
}
