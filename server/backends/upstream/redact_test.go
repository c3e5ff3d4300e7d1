package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/flexway/flexway/server/faults"
)

// TestClientErrorURLRedacted: an HTTP client error names the request's URL,
// and is kept as a cause that the core logs: the URL's query, which may
// hold a credential, never reaches it, while the host and path still do.
func TestClientErrorURLRedacted(t *testing.T) {
	t.Parallel()
	const secret = "QUERYSECRET"
	closed := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return "http://" + addr
	}
	tests := []struct {
		name    string
		base    func(t *testing.T) string
		timeout time.Duration
		reason  faults.Reason
	}{
		{name: "closed_port", base: closed, reason: faults.UpstreamError},
		{name: "header_timeout", timeout: 200 * time.Millisecond, reason: faults.UpstreamTimeout, base: func(t *testing.T) string {
			return newUpstream(t, func(w http.ResponseWriter, r *http.Request) { block(r, nil) }).URL
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := tt.base(t)
			b, err := New(Options{Name: "main", URL: base + "/v1?api-version=1&api-key=" + secret, Timeout: tt.timeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.CloseIdleConnections)
			check := func(what, path string, err error) {
				t.Helper()
				fe := wantFault(t, err, tt.reason)
				notContains(t, what+" error", err.Error(), secret, "api-version")
				notContains(t, what+" cause chain", causeChain(err), secret, "api-version")
				ue, ok := errors.AsType[*url.Error](err)
				if !ok {
					t.Fatalf("%s: cause %v, want a *url.Error kept", what, fe.Err)
				}
				if want := base + path; ue.URL != want {
					t.Errorf("%s: cause URL %q, want %q", what, ue.URL, want)
				}
			}
			_, _, err = b.CreateChatCompletion(context.Background(), chatRequest("m"))
			check("chat", "/v1/chat/completions", err)
			_, _, err = b.StreamChatCompletion(context.Background(), chatRequest("m"))
			check("stream", "/v1/chat/completions", err)
			_, _, err = b.CreateEmbedding(context.Background(), embeddingRequest("m"))
			check("embeddings", "/v1/embeddings", err)
		})
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"http://127.0.0.1:8000/v1/chat/completions?api-key=S", "http://127.0.0.1:8000/v1/chat/completions"},
		{"https://u:S@llm.example.com/v1/embeddings?x=1#S", "https://llm.example.com/v1/embeddings"},
		{"https://llm.example.com/a%2Fb/embeddings?sig=S", "https://llm.example.com/a%2Fb/embeddings"},
		{"http://[::1/v1?key=S", "(unparsable URL)"},
	}
	for _, tt := range tests {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestFailedAnswerMediaTypeOnly: of a failed answer's Content-Type, the
// logged cause keeps the media type only, at most 64 bytes: parameters are
// free text an upstream controls.
func TestFailedAnswerMediaTypeOnly(t *testing.T) {
	t.Parallel()
	long := "application/" + strings.Repeat("x", 100)
	tests := []struct {
		contentType, want string
	}{
		{"text/html; charset=utf-8; note=PARAM-SECRET", "text/html"},
		{"Application/JSON;PARAM-SECRET", "application/json"},
		{long, long[:64]},
		{"not a media type PARAM-SECRET", "(invalid)"},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.contentType, func(t *testing.T) {
			t.Parallel()
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header()["Content-Type"] = []string{tt.contentType}
				w.WriteHeader(502)
			})
			b := newBackend(t, u, Options{})
			_, _, err := b.CreateChatCompletion(context.Background(), chatRequest("m"))
			fe := wantFault(t, err, faults.UpstreamError)
			want := fmt.Sprintf(`upstream main status 502, Content-Type %q, 0 body bytes read`, tt.want)
			if fe.Err == nil || fe.Err.Error() != want {
				t.Errorf("cause %v, want %q", fe.Err, want)
			}
			notContains(t, "cause chain", causeChain(err), "PARAM-SECRET", strings.Repeat("x", 53))
		})
	}
}

// TestErrorObjectWith2xx: an upstream that answers 2xx with an OpenAI error
// object and no result is failing, not answering an empty completion: an
// upstream error whose cause keeps the error's type and code, never its
// message, which may echo a prompt or a credential.
func TestErrorObjectWith2xx(t *testing.T) {
	t.Parallel()
	const secret = "BODY-SECRET"
	errObj := `{"message":"quota exceeded for key ` + secret + `","type":"insufficient_quota","param":null,"code":"quota_exceeded"}`
	tests := []struct {
		name   string
		status int
		chat   string // the body answered to chat; embeddings get it too unless embed is set
		embed  string
		ok     bool // a result, not an error
	}{
		{name: "error_only", status: 200, chat: `{"error":` + errObj + `}`},
		{name: "error_201", status: 201, chat: `  {"error":` + errObj + `}`},
		{name: "error_with_null_result", status: 200, chat: `{"error":` + errObj + `,"choices":null,"data":null}`},
		{name: "error_with_empty_result", status: 200, chat: `{"error":` + errObj + `,"choices":[ ],"data":[]}`},
		{name: "error_string", status: 200, chat: `{"error":"` + secret + `"}`},
		{name: "error_null_is_no_error", status: 200, ok: true,
			chat:  strings.Replace(completionJSON, `{"id"`, `{"error":null,"id"`, 1),
			embed: strings.Replace(embeddingJSON, `{"object"`, `{"error":null,"object"`, 1)},
		{name: "error_beside_a_result", status: 200, ok: true,
			chat:  strings.Replace(completionJSON, `{"id"`, `{"error":{"type":"warning"},"id"`, 1),
			embed: strings.Replace(embeddingJSON, `{"object"`, `{"error":{"type":"warning"},"object"`, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				if tt.embed != "" && strings.HasSuffix(r.URL.Path, "/embeddings") {
					io.WriteString(w, tt.embed)
					return
				}
				io.WriteString(w, tt.chat)
			})
			b := newBackend(t, u, Options{})
			check := func(what string, err error) {
				t.Helper()
				if tt.ok {
					if err != nil {
						t.Errorf("%s: %v, want a result", what, err)
					}
					return
				}
				fe := wantFault(t, err, faults.UpstreamError)
				if want := fmt.Sprintf("upstream main answered %d with an error object", tt.status); fe.Message != want {
					t.Errorf("%s: message %q, want %q", what, fe.Message, want)
				}
				if tt.name != "error_string" && (fe.Err == nil || !strings.Contains(fe.Err.Error(), `type "insufficient_quota", code "quota_exceeded"`)) {
					t.Errorf("%s: cause %v, want the error's type and code", what, fe.Err)
				}
				notContains(t, what+" cause chain", causeChain(err), secret, "quota exceeded")
			}
			resp, _, err := b.CreateChatCompletion(context.Background(), chatRequest("m"))
			check("chat", err)
			if tt.ok && len(resp.GetChoices()) != 1 {
				t.Errorf("chat: completion %v, want its choice", resp)
			}
			emb, _, err := b.CreateEmbedding(context.Background(), embeddingRequest("m"))
			check("embeddings", err)
			if tt.ok && len(emb.GetData()) != 1 {
				t.Errorf("embeddings: %v, want its data", emb)
			}
		})
	}
}
