package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// onlyReader hides every method of a reader but Read, so that the HTTP
// client cannot know the body's length and sends it chunked.
type onlyReader struct{ io.Reader }

// TestBadInput: each bad request gets a 4xx in the OpenAI envelope (or
// RFC 9457 problem details off /v1/), never a 500, and never reaches the
// upstream.
func TestBadInput(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	cfg := baseTestConfig(up.URL)
	cfg.Vision = &testVision{MaxBodyBytes: "1MiB"}
	g := startGateway(t, cfg.yaml())
	big := `{"model":"m-large","messages":[{"role":"user","content":"` + strings.Repeat("x", 2<<20) + `"}]}`
	tests := []struct {
		name    string
		method  string
		path    string
		body    func() io.Reader
		headers map[string]string
		status  int
		code    string // OpenAI error.code; empty for problem details
		param   string // OpenAI error.param; empty means null
		problem bool   // application/problem+json instead of the envelope
	}{
		{name: "malformed_json", body: str(`{"model":"m-large","messages":[`), status: 400, code: "invalid_request"},
		{name: "trailing_garbage", body: str(`{"model":"m-large","messages":[{"role":"user","content":"hi"}]} x`), status: 400, code: "invalid_request"},
		{name: "not_an_object", body: str(`[1,2]`), status: 400, code: "invalid_request"},
		{name: "empty_body", body: str(``), status: 400, code: "invalid_request"},
		{name: "messages_not_array", body: str(`{"model":"m-large","messages":"hi"}`), status: 400, code: "invalid_request", param: "messages"},
		{name: "content_a_number", body: str(`{"model":"m-large","messages":[{"role":"user","content":42}]}`), status: 400, code: "invalid_request", param: "messages[0].content"},
		{name: "empty_messages", body: str(`{"model":"m-large","messages":[]}`), status: 400, code: "invalid_request", param: "messages"},
		{name: "missing_model", body: str(`{"messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "invalid_request", param: "model"},
		{name: "unknown_part_type", body: str(`{"model":"m-large","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"video_url","video_url":{"url":"https://x"}}]}]}`), status: 400, code: "invalid_request", param: "messages[0].content[1].type"},
		{name: "invalid_utf8", body: func() io.Reader {
			return bytes.NewReader([]byte("{\"model\":\"m-large\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9 \xff\xfe\"}]}"))
		}, status: 400, code: "invalid_request"},
		{name: "message_null", body: str(`{"model":"m-large","messages":[null]}`), status: 400, code: "invalid_request", param: "messages[0]"},
		{name: "stream_a_string", body: str(`{"model":"m-large","stream":"yes","messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "invalid_request", param: "stream"},
		{name: "n_zero", body: str(`{"model":"m-large","n":0,"messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "invalid_request", param: "n"},
		{name: "max_tokens_huge", body: str(`{"model":"m-large","max_tokens":1e400,"messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "invalid_request", param: "max_tokens"},
		{name: "max_tokens_zero", body: str(`{"model":"m-large","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "invalid_request", param: "max_tokens"},
		{name: "max_completion_tokens_zero", body: str(`{"model":"m-large","max_completion_tokens":0,"messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "invalid_request", param: "max_completion_tokens"},
		{name: "raw_control_character", body: str("{\"model\":\"m-large\",\"messages\":[{\"role\":\"user\",\"content\":\"a\x00b\"}]}"), status: 400, code: "invalid_request"},
		{name: "nesting_too_deep", body: str(`{"model":"m-large","messages":[{"role":"user","content":"hi"}],"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`), status: 400, code: "invalid_request"},
		{name: "embeddings_malformed", path: "/v1/embeddings", body: str(`{"model":"m-small","input":`), status: 400, code: "invalid_request"},
		{name: "embeddings_no_input", path: "/v1/embeddings", body: str(`{"model":"m-small"}`), status: 400, code: "invalid_request", param: "input"},
		{name: "embeddings_empty_input", path: "/v1/embeddings", body: str(`{"model":"m-small","input":[]}`), status: 400, code: "invalid_request", param: "input"},
		// Issue 12, items 3, 8 and 18: a modelled field in another case, an
		// image-bearing field other than an image_url part, a bad model, an
		// unknown role.
		{name: "n_case_variant", body: str(`{"model":"m-large","max_tokens":20,"n":1,"N":128,"messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "invalid_request", param: "N"},
		{name: "max_tokens_upper", body: str(`{"model":"m-large","max_tokens":20,"MAX_TOKENS":100000,"messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "invalid_request", param: "MAX_TOKENS"},
		{name: "stream_title_case", body: str(`{"model":"m-large","Stream":true,"messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "invalid_request", param: "Stream"},
		{name: "image_url_upper_in_part", body: str(`{"model":"m-large","messages":[{"role":"user","content":[{"type":"text","text":"what is it?","IMAGE_URL":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}`), status: 400, code: "invalid_request", param: "messages[0].content[0].IMAGE_URL"},
		{name: "message_images", body: str(`{"model":"m-large","messages":[{"role":"user","content":"what is it?","images":["iVBORw0KGgo="]}]}`), status: 400, code: "invalid_request", param: "messages[0].images"},
		{name: "unknown_role", body: str(`{"model":"m-large","messages":[{"role":"user","content":"hi"},{"role":"wizard","content":"hi"}]}`), status: 400, code: "invalid_request", param: "messages[1].role"},
		{name: "model_control_character", body: str(`{"model":"m-large\n","messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "invalid_request", param: "model"},
		{name: "model_too_long", body: str(`{"model":"` + strings.Repeat("m", 257) + `","messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "invalid_request", param: "model"},
		{name: "embeddings_model_too_long", path: "/v1/embeddings", body: str(`{"model":"` + strings.Repeat("m", 257) + `","input":"a"}`), status: 400, code: "invalid_request", param: "model"},
		{name: "embeddings_input_case_variant", path: "/v1/embeddings", body: str(`{"model":"m-small","input":"a","Input":["b","c"]}`), status: 400, code: "invalid_request", param: "Input"},
		{name: "body_over_limit", body: str(big), status: 413, code: "request_too_large"},
		{name: "body_over_limit_chunked", body: func() io.Reader { return onlyReader{strings.NewReader(big)} }, status: 413, code: "request_too_large"},
		{name: "no_authorization", body: str(`{"model":"m-large","messages":[{"role":"user","content":"hi"}]}`), headers: map[string]string{"Authorization": ""}, status: 401, code: "invalid_api_key"},
		{name: "unknown_key", body: str(`{"model":"m-large","messages":[{"role":"user","content":"hi"}]}`), headers: map[string]string{"Authorization": "Bearer sk-nope"}, status: 401, code: "invalid_api_key"},
		{name: "no_authorization_models", method: "GET", path: "/v1/models", headers: map[string]string{"Authorization": ""}, status: 401, code: "invalid_api_key"},
		{name: "wrong_method", method: "GET", status: 405, code: "invalid_request"},
		{name: "unknown_v1_path", method: "POST", path: "/v1/foo", body: str(`{}`), status: 404, code: "not_found"},
		{name: "unknown_path_problem", method: "GET", path: "/foo/bar", status: 404, problem: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, path := tt.method, tt.path
			if method == "" {
				method = "POST"
			}
			if path == "" {
				path = "/v1/chat/completions"
			}
			var body io.Reader
			if tt.body != nil {
				body = tt.body()
			}
			resp := send(t, g, method, path, body, tt.headers)
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %.300s", resp.StatusCode, tt.status, raw)
			}
			if tt.problem {
				if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
					t.Fatalf("Content-Type %q", ct)
				}
				var p struct {
					Type   string `json:"type"`
					Title  string `json:"title"`
					Status int    `json:"status"`
				}
				if err := json.Unmarshal(raw, &p); err != nil || p.Status != tt.status || p.Title != http.StatusText(tt.status) || p.Type == "" {
					t.Fatalf("problem details %+v (%v): %s", p, err, raw)
				}
				return
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q: %s", ct, raw)
			}
			var env struct {
				Error *struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(raw, &env); err != nil || env.Error == nil {
				t.Fatalf("not the OpenAI envelope (%v): %s", err, raw)
			}
			e := env.Error
			if e.Code == nil || *e.Code != tt.code || e.Message == "" || e.Type != "invalid_request_error" {
				t.Fatalf("error %s, want code %q", raw, tt.code)
			}
			switch {
			case tt.param == "" && e.Param != nil:
				t.Fatalf("param %q, want null: %s", *e.Param, raw)
			case tt.param != "" && (e.Param == nil || *e.Param != tt.param):
				t.Fatalf("param %v, want %q: %s", e.Param, tt.param, raw)
			}
			if tt.status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") != "POST" {
				t.Fatalf("Allow %q, want POST", resp.Header.Get("Allow"))
			}
			if n := len(up.requests()); n != 0 {
				t.Fatalf("the upstream saw %d requests", n)
			}
		})
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the upstream saw %d requests", n)
	}
}

func str(s string) func() io.Reader {
	return func() io.Reader { return strings.NewReader(s) }
}

// TestInflightBodyBound: server.max_inflight_body_bytes reaches the
// front: while one caller's body holds the whole bound, another's is
// refused with 503 unavailable and Retry-After before it is read, and
// nothing reaches the upstream for it.
func TestInflightBodyBound(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	cfg := baseTestConfig(up.URL)
	cfg.MaxInflightBodyBytes = "1MiB"
	cfg.Vision = &testVision{MaxBodyBytes: "1MiB"}
	g := startGateway(t, cfg.yaml())
	addr := strings.TrimPrefix(g.HTTP, "http://")
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + demoKey + "\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"
	holder, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	_, _ = io.WriteString(holder, head+`{"model":"m-large","messages":[`)
	// The holder's body is being read once its request is admitted; ask
	// until the second is refused (the first may not be in yet).
	var resp *http.Response
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp = send(t, g, "POST", "/v1/chat/completions", strings.NewReader(`{"model":"m-large","messages":[{"role":"user","content":"hi"}]}`), nil)
		if resp.StatusCode != 200 || time.Now().After(deadline) {
			break
		}
		resp.Body.Close()
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(raw), `"code":"unavailable"`) {
		t.Fatalf("a body past the bound: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), raw)
	}
}

// TestBadFraming: requests net/http refuses before any handler runs (a
// Transfer-Encoding other than a lone chunked, a bad Content-Length, no
// Host) are answered 400 in the surface's format, not net/http's text/plain
// (501 for a transfer coding): the OpenAI envelope on /v1/*, problem
// details elsewhere, the connection closed. A request with both
// Transfer-Encoding and Content-Length is answered, as chunked, and the
// connection then closed (RFC 9112 §6.1); a plain chunked request keeps
// its connection.
func TestBadFraming(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	addr := strings.TrimPrefix(g.HTTP, "http://")
	body := `{"model":"m-large","messages":[{"role":"user","content":"hi"}]}`
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	auth := "Authorization: Bearer " + demoKey + "\r\nContent-Type: application/json\r\n"
	// exchange sends raw on a new connection and returns the answer and
	// whether the connection was closed after it.
	exchange := func(t *testing.T, raw string) (*http.Response, []byte, bool) {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, raw); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
		_, err = br.ReadByte()
		return resp, b, err == io.EOF
	}
	for _, tc := range []struct {
		name, raw string
		status    int
		problem   bool // problem details, else the OpenAI envelope
	}{
		{"chunked_identity_v1", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: chunked, identity\r\n\r\n" + chunked, 400, false},
		{"gzip_chunked_v1", "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked, 400, false},
		{"two_transfer_encodings_v1", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked, 400, false},
		{"chunked_identity_admin", "POST /flexway/v1/tenants/acme/usage HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 400, true},
		{"bad_content_length_v1", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 12abc\r\n\r\n" + body, 400, false},
		{"two_content_lengths_healthz", "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx", 400, true},
		{"no_host_v1", "POST /v1/chat/completions HTTP/1.1\r\n" + auth + "Content-Length: 2\r\n\r\n{}", 400, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b, closed := exchange(t, tc.raw)
			ct := resp.Header.Get("Content-Type")
			var e struct {
				Error struct{ Code, Type string }
			}
			var p struct {
				Status int
				Code   string
			}
			ok := resp.StatusCode == tc.status && closed
			if tc.problem {
				ok = ok && ct == "application/problem+json" && json.Unmarshal(b, &p) == nil && p.Status == tc.status && p.Code == "invalid_request"
			} else {
				ok = ok && ct == "application/json" && json.Unmarshal(b, &e) == nil && e.Error.Code == "invalid_request" && e.Error.Type == "invalid_request_error"
			}
			if !ok {
				t.Errorf("%d %s closed=%v\n%s", resp.StatusCode, ct, closed, b)
			}
		})
	}

	t.Run("transfer_encoding_and_content_length", func(t *testing.T) {
		resp, b, closed := exchange(t, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"+auth+"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"+chunked)
		if resp.StatusCode != 200 || !closed || !resp.Close {
			t.Errorf("%d closed=%v Connection: %q\n%s", resp.StatusCode, closed, resp.Header.Get("Connection"), b)
		}
	})
	t.Run("chunked_keeps_the_connection", func(t *testing.T) {
		resp, b, closed := exchange(t, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"+auth+"Transfer-Encoding: chunked\r\n\r\n"+chunked)
		if resp.StatusCode != 200 || closed || resp.Close {
			t.Errorf("%d closed=%v\n%s", resp.StatusCode, closed, b)
		}
	})
	if n := len(up.requests()); n != 2 {
		t.Errorf("%d requests reached the upstream, want the 2 well-framed ones", n)
	}
}
