package transcoder

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/transcoder/inproc"
)

// noCore is a core that must not be reached: the requests of these tests
// are answered by the front itself.
type noCore struct{ t *testing.T }

var _ Core = noCore{}

func (c noCore) ServerStream(context.Context, string, any, inproc.Sink) (metadata.MD, error) {
	c.t.Error("the core was called")
	return nil, errors.New("no core")
}

func (c noCore) Invoke(context.Context, string, any, any, ...grpc.CallOption) error {
	c.t.Error("the core was called")
	return errors.New("no core")
}

func (c noCore) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	c.t.Error("the core was called")
	return nil, errors.New("no core")
}

func newFront(t *testing.T, opts Options) *httptest.Server {
	t.Helper()
	opts.Conn = noCore{t}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestFrontAnswersItself(t *testing.T) {
	srv := newFront(t, Options{})
	tests := []struct {
		name    string
		method  string
		path    string
		headers map[string]string
		status  int
		code    string
		problem bool
	}{
		{name: "no key", method: "POST", path: "/v1/chat/completions", status: 401, code: "invalid_api_key"},
		{name: "compressed body", method: "POST", path: "/v1/chat/completions", headers: map[string]string{"Authorization": "Bearer k", "Content-Encoding": "gzip"}, status: 400, code: "invalid_request"},
		{name: "unknown v1 path", method: "GET", path: "/v1/nope", status: 404, code: "not_found"},
		{name: "wrong method", method: "GET", path: "/v1/chat/completions", status: 405, code: "invalid_request"},
		{name: "unknown path is a problem", method: "GET", path: "/nope", status: 404, problem: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(`{}`))
			for k, v := range tt.headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %v", resp.StatusCode, tt.status, body)
			}
			if id := resp.Header.Get("X-Request-Id"); !strings.HasPrefix(id, "req_") {
				t.Fatalf("X-Request-Id = %q", id)
			}
			if tt.problem {
				if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" || body["status"] != float64(tt.status) {
					t.Fatalf("not a problem: %s %v", ct, body)
				}
				return
			}
			e, _ := body["error"].(map[string]any)
			if e["code"] != tt.code {
				t.Fatalf("code %v, want %s: %v", e["code"], tt.code, body)
			}
		})
	}
}

func TestCallerRequestIDKept(t *testing.T) {
	srv := newFront(t, Options{})
	req, _ := http.NewRequest("GET", srv.URL+"/v1/nope", nil)
	req.Header.Set("X-Request-Id", "trace-42")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Request-Id"); got != "trace-42" {
		t.Fatalf("X-Request-Id = %q", got)
	}
}

// TestSlowBodyRefused sends headers and part of a body, then stalls: the
// front answers 400 once the body read timeout passes instead of holding
// the connection.
func TestSlowBodyRefused(t *testing.T) {
	srv := newFront(t, Options{BodyReadTimeout: 200 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Length: 100\r\n\r\n{\"mo")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(b), "did not arrive within") {
		t.Fatalf("status %d body %s", resp.StatusCode, b)
	}
}

// TestStalledBodyOnRefusedRequest: a request the front refuses without
// reading its body (no key, unknown path, wrong method) is answered at
// once even when its body stalls; the server's discard of the unread body
// is bounded by unreadBodyGrace.
func TestStalledBodyOnRefusedRequest(t *testing.T) {
	srv := newFront(t, Options{BodyReadTimeout: time.Minute})
	for _, path := range []string{"/v1/chat/completions", "/healthz", "/nope", "/v1/models"} {
		t.Run(path, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mo", path)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode < 400 || resp.StatusCode >= 500 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("answered after %v", d)
			}
		})
	}
}

// TestAnswerSentBeforeLogging: a whole answer (one with a Content-Length)
// reaches the caller before the request is measured and logged, which the
// caller need not wait for: here the measuring blocks until the caller has
// read the answer.
func TestAnswerSentBeforeLogging(t *testing.T) {
	release := make(chan struct{})
	observed := make(chan int, 1)
	srv := newFront(t, Options{Observe: func(_ *http.Request, status int, _ time.Duration) {
		<-release
		observed <- status
	}})
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		close(release)
		t.Fatalf("the answer did not arrive while the request was being measured: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	close(release)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || resp.ContentLength != int64(len(body)) || !strings.Contains(string(body), "invalid_api_key") {
		t.Fatalf("status %d, Content-Length %d, %d bytes (%v): %s", resp.StatusCode, resp.ContentLength, len(body), err, body)
	}
	if got := <-observed; got != http.StatusUnauthorized {
		t.Fatalf("observed status %d", got)
	}
}
