package upstream

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
)

func TestUpstream4xxKeptForRelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		retryAfter  string
		wantRetry   int64
	}{
		{
			name: "400_json", status: 400, contentType: "application/json; charset=utf-8",
			body: `{"error":{"message":"unknown parameter: foo","type":"invalid_request_error","param":"foo","code":null}}`,
		},
		{
			name: "429_retry_after", status: 429, contentType: "application/json",
			body:       `{"error":{"message":"Rate limit reached","type":"rate_limit_exceeded","code":"rate_limit_exceeded"}}`,
			retryAfter: "7", wantRetry: 7,
		},
		{name: "404_text", status: 404, contentType: "text/plain", body: "no such model"},
		{name: "422_empty", status: 422},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.contentType != "" {
					w.Header().Set("Content-Type", tt.contentType)
				}
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			b := newBackend(t, u, Options{})
			check := func(what string, err error) {
				t.Helper()
				fe := wantFault(t, err, faults.UpstreamStatus)
				if fe.UpstreamHTTPStatus != tt.status || fe.HTTPStatus() != tt.status || fe.UpstreamContentType != tt.contentType ||
					string(fe.UpstreamBody) != tt.body || fe.RetryAfterSeconds != tt.wantRetry {
					t.Errorf("%s: got status %d, type %q, body %q, retry %d", what, fe.UpstreamHTTPStatus, fe.UpstreamContentType, fe.UpstreamBody, fe.RetryAfterSeconds)
				}
				notContains(t, what+" message", fe.Message, "Rate limit", "unknown parameter", "no such model")
			}
			_, _, err := b.CreateChatCompletion(context.Background(), chatRequest("m"))
			check("chat", err)
			_, _, err = b.StreamChatCompletion(context.Background(), chatRequest("m"))
			check("stream", err)
			_, _, err = b.CreateEmbedding(context.Background(), embeddingRequest("m"))
			check("embeddings", err)
		})
	}
}

// TestUpstreamAuthRefused: an upstream 401 or 403 refuses the gateway's
// credentials, not the caller's: it is an upstream error (502) wrapping
// backends.ErrUpstreamAuth whose cause, not its message, names the backend
// and its auth setting, and the upstream's body, which may echo the
// credential, is kept nowhere.
func TestUpstreamAuthRefused(t *testing.T) {
	t.Parallel()
	const secret = "upstream-secret-XYZ"
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
	}{
		{
			name: "401_openai_json", status: 401, contentType: "application/json",
			body: `{"error":{"message":"Incorrect API key provided: ` + secret + `.","type":"invalid_request_error","code":"invalid_api_key"}}`,
		},
		{name: "403_text", status: 403, contentType: "text/plain", body: "forbidden for key " + secret},
		{name: "401_empty", status: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.contentType != "" {
					w.Header().Set("Content-Type", tt.contentType)
				}
				w.Header().Set("Retry-After", "30")
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			b := newBackend(t, u, Options{Auth: Auth{Type: AuthBearer, Secret: secret}})
			// The caller learns neither the backend's name nor a
			// configuration key; the log (the cause) learns both.
			const want = "the backend refused the gateway's credentials"
			wantCause := fmt.Sprintf("upstream main status %d, check ai.backends.main.auth: ", tt.status)
			check := func(what string, err error) {
				t.Helper()
				fe := wantFault(t, err, faults.UpstreamError)
				if !errors.Is(err, backends.ErrUpstreamAuth) {
					t.Errorf("%s: errors.Is(err, backends.ErrUpstreamAuth) = false; cause %v", what, fe.Err)
				}
				if fe.Message != want {
					t.Errorf("%s: message %q, want %q", what, fe.Message, want)
				}
				notContains(t, what+" error", err.Error(), "main", "ai.backends")
				if fe.Err == nil || !strings.HasPrefix(fe.Err.Error(), wantCause) {
					t.Errorf("%s: cause %v, want it to start with %q", what, fe.Err, wantCause)
				}
				if fe.HTTPStatus() != http.StatusBadGateway || fe.UpstreamHTTPStatus != 0 || fe.UpstreamBody != nil ||
					fe.UpstreamContentType != "" || fe.RetryAfterSeconds != 0 {
					t.Errorf("%s: HTTP %d, upstream status %d, type %q, body %q, retry %d; want 502 and nothing relayed",
						what, fe.HTTPStatus(), fe.UpstreamHTTPStatus, fe.UpstreamContentType, fe.UpstreamBody, fe.RetryAfterSeconds)
				}
				notContains(t, what+" error", err.Error(), secret, "Incorrect API key", "forbidden")
				notContains(t, what+" cause chain", causeChain(err), secret, "Incorrect API key", "forbidden")
			}
			_, _, err := b.CreateChatCompletion(context.Background(), chatRequest("m"))
			check("chat", err)
			_, _, err = b.StreamChatCompletion(context.Background(), chatRequest("m"))
			check("stream", err)
			_, _, err = b.CreateEmbedding(context.Background(), embeddingRequest("m"))
			check("embeddings", err)
		})
	}
}

// TestUpstream5xxBodyNotKept: a 5xx body may echo a prompt or a token; the
// error keeps, for logs, the status, the Content-Type and the size read,
// never a byte of the body.
func TestUpstream5xxBodyNotKept(t *testing.T) {
	t.Parallel()
	const secret = "upstream-secret-XYZ"
	echo := `{"error":{"message":"overloaded while serving: my password is ` + secret + `"}}`
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		gzip        bool
		wantCause   string
	}{
		{
			name: "500_json", status: 500, contentType: "application/json", body: echo,
			wantCause: fmt.Sprintf(`upstream main status 500, Content-Type "application/json", %d body bytes read`, len(echo)),
		},
		{
			name: "503_gzip", status: 503, contentType: "application/json", body: echo, gzip: true,
			wantCause: fmt.Sprintf(`upstream main status 503, Content-Type "application/json", %d body bytes read`, len(echo)),
		},
		{
			name: "502_large", status: 502, contentType: "text/html", body: strings.Repeat(secret, 10000),
			wantCause: `upstream main status 502, Content-Type "text/html", over 65536 body bytes, the rest not read`,
		},
		{
			name: "500_empty", status: 500,
			wantCause: `upstream main status 500, Content-Type "", 0 body bytes read`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.contentType != "" {
					w.Header().Set("Content-Type", tt.contentType)
				}
				if tt.gzip {
					w.Header().Set("Content-Encoding", "gzip")
					w.WriteHeader(tt.status)
					zw := gzip.NewWriter(w)
					io.WriteString(zw, tt.body)
					zw.Close()
					return
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			b := newBackend(t, u, Options{})
			check := func(what string, err error) {
				t.Helper()
				fe := wantFault(t, err, faults.UpstreamError)
				if fe.Err == nil || fe.Err.Error() != tt.wantCause {
					t.Errorf("%s: cause %v, want %q", what, fe.Err, tt.wantCause)
				}
				notContains(t, what+" error", err.Error(), secret, "overloaded")
				notContains(t, what+" cause chain", causeChain(err), secret, "overloaded")
			}
			_, _, err := b.CreateChatCompletion(context.Background(), chatRequest("m"))
			check("chat", err)
			_, _, err = b.StreamChatCompletion(context.Background(), chatRequest("m"))
			check("stream", err)
			_, _, err = b.CreateEmbedding(context.Background(), embeddingRequest("m"))
			check("embeddings", err)
		})
	}
}

func TestUpstream4xxBodyBounded(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		io.WriteString(w, strings.Repeat("x", 3<<20))
	})
	b := newBackend(t, u, Options{})
	_, _, err := b.CreateChatCompletion(context.Background(), chatRequest("m"))
	if fe := wantFault(t, err, faults.UpstreamStatus); len(fe.UpstreamBody) != maxStatusBodyBytes {
		t.Errorf("body kept: %d bytes, want %d", len(fe.UpstreamBody), maxStatusBodyBytes)
	}
}

func TestUpstreamErrors(t *testing.T) {
	t.Parallel()
	html := "<html><body><h1>502 Bad Gateway</h1>secret-internal-host</body></html>"
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    string // in the message
	}{
		{
			name: "502_html",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(502)
				io.WriteString(w, html)
			},
			want: "upstream main answered 502",
		},
		{
			name: "503_json",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "3")
				w.WriteHeader(503)
				io.WriteString(w, `{"error":{"message":"overloaded secret-internal-host"}}`)
			},
			want: "upstream main answered 503",
		},
		{
			name: "500_empty",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(500)
			},
			want: "upstream main answered 500",
		},
		{
			name: "307_not_followed",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "http://secret-internal-host/v1", http.StatusTemporaryRedirect)
			},
			want: "upstream main answered 307",
		},
		{
			name: "200_html",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				io.WriteString(w, html)
			},
			want: "unreadable",
		},
		{
			name: "200_json_truncated",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", "5000")
				io.WriteString(w, completionJSON[:40])
			},
			want: "cut its answer short",
		},
		{
			name: "unsupported_encoding",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", "br")
				io.WriteString(w, completionJSON)
			},
			want: "unreadable",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := newUpstream(t, tt.handler)
			b := newBackend(t, u, Options{})
			_, served, err := b.CreateChatCompletion(context.Background(), chatRequest("m"))
			fe := wantFault(t, err, faults.UpstreamError)
			if !strings.Contains(fe.Message, tt.want) {
				t.Errorf("message %q, want it to contain %q", fe.Message, tt.want)
			}
			notContains(t, "message", fe.Message, "<html", "secret-internal-host", "overloaded")
			if served.Backend != "main" {
				t.Errorf("served = %+v", served)
			}
			_, _, err = b.StreamChatCompletion(context.Background(), chatRequest("m"))
			if tt.name == "200_json_truncated" {
				// A JSON answer to a stream request is refused as such.
				wantFault(t, err, faults.UpstreamError)
				return
			}
			fe = wantFault(t, err, faults.UpstreamError)
			notContains(t, "stream message", fe.Message, "<html", "secret-internal-host")
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		v    string
		want int64
	}{
		{name: "seconds", v: "7", want: 7},
		{name: "spaces", v: " 12 ", want: 12},
		{name: "fraction_rounds_up", v: "1.2", want: 2},
		{name: "zero", v: "0", want: 0},
		{name: "negative", v: "-3", want: 0},
		{name: "empty", v: "", want: 0},
		{name: "garbage", v: "soon", want: 0},
		{name: "http_date", v: now.Add(10 * time.Second).Format(http.TimeFormat), want: 10},
		{name: "past_date", v: now.Add(-time.Hour).Format(http.TimeFormat), want: 0},
		{name: "capped", v: "99999999999", want: maxRetryAfterSeconds},
		{name: "nan", v: "NaN", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retryAfter(tt.v, now); got != tt.want {
				t.Errorf("retryAfter(%q) = %d, want %d", tt.v, got, tt.want)
			}
		})
	}
}

// TestSlow5xxBodyDoesNotDelay: a 5xx whose body never comes fails at once,
// so that the core can fall back without waiting for the idle timeout.
func TestSlow5xxBodyDoesNotDelay(t *testing.T) {
	t.Parallel()
	done := make(chan struct{}, 1)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
		w.(http.Flusher).Flush()
		block(r, done)
	})
	b := newBackend(t, u, Options{})
	start := time.Now()
	_, _, err := b.CreateChatCompletion(context.Background(), chatRequest("m"))
	wantFault(t, err, faults.UpstreamError)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("failed after %v, want well under the 30s idle timeout", d)
	}
	waitDone(t, done, "its request end")
}
