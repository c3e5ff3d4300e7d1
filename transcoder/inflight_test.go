package transcoder

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/transcoder/inproc"
)

// okCore answers every unary call with an empty message.
type okCore struct{}

var _ Core = okCore{}

func (okCore) ServerStream(context.Context, string, any, inproc.Sink) (metadata.MD, error) {
	return nil, nil
}
func (okCore) Invoke(context.Context, string, any, any, ...grpc.CallOption) error { return nil }
func (okCore) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, nil
}

// inflightFront serves a front over okCore with the given bounds.
func inflightFront(t *testing.T, maxBody, maxInflight int64) (*front, *httptest.Server) {
	t.Helper()
	f, h, err := build(Options{Conn: okCore{}, MaxBodyBytes: maxBody, MaxInflightBodyBytes: maxInflight})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return f, srv
}

// chatOf is a valid chat request of exactly n bytes.
func chatOf(n int) string {
	head, tail := `{"model":"m","messages":[{"role":"user","content":"`, `"}]}`
	return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
}

// TestInflightBodiesBounded: many concurrent large bodies, with and
// without a Content-Length, over the bound: some are refused with 503
// unavailable and Retry-After, none gets a 500, every other one is served,
// the bytes held never passed the bound, and all are given back.
func TestInflightBodiesBounded(t *testing.T) {
	const body, bound, callers = 1 << 20, 3 << 20, 16
	f, srv := inflightFront(t, body, bound)
	payload := chatOf(body)
	gate := make(chan struct{}) // the second half of every body waits here
	var wg sync.WaitGroup
	statuses := make(chan string, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr, pw := io.Pipe()
			go func() {
				_, _ = io.WriteString(pw, payload[:body/2])
				<-gate
				_, _ = io.WriteString(pw, payload[body/2:])
				pw.Close()
			}()
			req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", pr)
			req.Header.Set("Authorization", "Bearer k")
			if i%2 == 0 {
				req.ContentLength = body // else chunked
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				// A refused body's connection is closed while it is
				// still being sent: the client may see that instead.
				statuses <- "closed"
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			s := fmt.Sprint(resp.StatusCode)
			if resp.StatusCode == 503 {
				if resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), `"code":"unavailable"`) || !resp.Close {
					s = fmt.Sprintf("bad 503: Retry-After %q close %v %s", resp.Header.Get("Retry-After"), resp.Close, b)
				}
			}
			statuses <- s
		}()
	}
	// Let every caller reach the front with half its body, then release.
	time.Sleep(500 * time.Millisecond)
	close(gate)
	wg.Wait()
	close(statuses)
	count := map[string]int{}
	for s := range statuses {
		count[s]++
	}
	if count["503"]+count["closed"] == 0 || count["200"] == 0 || count["200"]+count["503"]+count["closed"] != callers {
		t.Fatalf("answers %v: want some 200, some 503, nothing else", count)
	}
	if p := f.bodies.peak.Load(); p > bound || p < body {
		t.Fatalf("peak bytes held %d, bound %d", p, bound)
	}
	if u := f.bodies.used.Load(); u != 0 {
		t.Fatalf("%d bytes still held after every request ended", u)
	}
}

// TestInflightRefusedBeforeReading: while another body holds the bound, a
// request declaring a Content-Length that does not fit is answered 503 at
// once, before a byte of its body is sent; once the first is parsed, the
// same request is served.
func TestInflightRefusedBeforeReading(t *testing.T) {
	const body = 64 << 10
	f, srv := inflightFront(t, body, body)
	addr := strings.TrimPrefix(srv.URL, "http://")
	payload := chatOf(body)
	head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", body)

	holder := holdBound(t, f, addr, head+payload[:100], body)

	second, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	_, _ = io.WriteString(second, head) // headers only, no body
	_ = second.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(second), nil)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), `"code":"unavailable"`) || !strings.Contains(string(b), "max_inflight_body_bytes") {
		t.Fatalf("%d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}

	_, _ = io.WriteString(holder, payload[100:])
	_ = holder.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(holder), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the first request: %v %v", resp, err)
	}
	resp.Body.Close()
	if u := f.bodies.used.Load(); u != 0 {
		t.Fatalf("%d bytes held after the first body was parsed", u)
	}
	r, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 401 { // no key: answered unread, nothing held
		t.Fatalf("status %d", r.StatusCode)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(payload))
	req.Header.Set("Authorization", "Bearer k")
	if r, err = http.DefaultClient.Do(req); err != nil || r.StatusCode != 200 {
		t.Fatalf("the same request once the bound is free: %v %v", r, err)
	}
	r.Body.Close()
}

// TestInflightRefusalReachesAnUploadingClient: a client that sends its
// whole body before it reads the answer, as Python's http.client and the
// OpenAI SDKs do, gets the 503 and its Retry-After when its body does not
// fit, not a connection reset under its upload (the body is 8 MiB, far
// more than the sockets' buffers hold).
func TestInflightRefusalReachesAnUploadingClient(t *testing.T) {
	const body = 8 << 20
	f, srv := inflightFront(t, body, body)
	addr := strings.TrimPrefix(srv.URL, "http://")
	payload := chatOf(body)
	head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", body)

	holdBound(t, f, addr, head+payload[:100], body) // the whole bound, half sent

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head+payload); err != nil {
		t.Fatalf("the upload was cut: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer after the whole body was sent: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), `"code":"unavailable"`) {
		t.Fatalf("%d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if u := f.bodies.used.Load(); u != body {
		t.Fatalf("%d bytes held, want only the first body's %d: a drained body holds none", u, body)
	}
}

// holdBound sends start (a request head and the first bytes of its
// body) on a new connection and waits until the front holds want bytes
// for it; the connection is closed at the test's end.
func holdBound(t *testing.T, f *front, addr, start string, want int64) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_, _ = io.WriteString(c, start)
	for deadline := time.Now().Add(5 * time.Second); f.bodies.used.Load() != want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first body holds %d bytes, want %d", f.bodies.used.Load(), want)
		}
	}
	return c
}
