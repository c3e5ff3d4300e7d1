package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// demoKey is the API key of tenant "acme", agent "bot" in test configs.
const demoKey = "sk-test-acme"

// seen is one request an upstream received.
type seen struct {
	Method, Path string
	Header       http.Header
	Body         map[string]any
	Raw          []byte
}

// fakeUpstream is an OpenAI-compatible upstream scripted per test: handle
// answers each request; every request is recorded.
type fakeUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newUpstream(t testing.TB, handle http.HandlerFunc) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		s := seen{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Raw: raw}
		_ = json.Unmarshal(raw, &s.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, s)
		u.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(raw))
		handle(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *fakeUpstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.reqs...)
}

// testGW is a running `flexway serve` for a test.
type testGW struct {
	HTTP string // base URL, e.g. http://127.0.0.1:1234
	GRPC string // host:port
	stop context.CancelFunc
	done chan error
}

// handedOut holds the addresses freePort returned, so that it never returns
// one twice: the kernel may hand a port just closed out again, which gave
// server.http and server.grpc the same address.
var handedOut struct {
	sync.Mutex
	addrs map[string]bool
}

// freePort returns a loopback address that was free a moment ago, never
// one it returned before.
func freePort(t testing.TB) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if !handedOut.addrs[addr] {
			if handedOut.addrs == nil {
				handedOut.addrs = map[string]bool{}
			}
			handedOut.addrs[addr] = true
			return addr
		}
	}
	t.Fatal("no loopback port not handed out before")
	return ""
}

// startGateway writes cfg to a temporary file and runs serve on it until
// the test ends.
func startGateway(t testing.TB, cfg string) *testGW {
	t.Helper()
	return startGatewayLog(t, cfg, &syncBuffer{})
}

// startGatewayLog is startGateway with serve's log written to stderr.
func startGatewayLog(t testing.TB, cfg string, stderr *syncBuffer) *testGW {
	t.Helper()
	t.Setenv("FLEXWAY_TEST_KEY", demoKey)
	t.Setenv("FLEXWAY_TEST_UPSTREAM_TOKEN", "upstream-secret-token")
	dir := t.TempDir()
	path := filepath.Join(dir, "flexway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// The test's own listeners, bound before serve starts: no port is
	// guessed, and the addresses are known before the gateway is built.
	grpcLis, httpLis := listen(t), listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	g := &testGW{stop: cancel, done: make(chan error, 1), HTTP: "http://" + httpLis.Addr().String(), GRPC: grpcLis.Addr().String()}
	ready := make(chan struct{})
	go func() {
		g.done <- serve(ctx, path, io.Discard, stderr, serveEnv{GRPC: grpcLis, HTTP: httpLis, Ready: func(string, string) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-g.done:
		t.Fatalf("serve exited: %v\n%s", err, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not start")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-g.done:
		case <-time.After(10 * time.Second):
			t.Error("serve did not stop")
		}
		if strings.Contains(stderr.String(), "upstream-secret-token") || strings.Contains(stderr.String(), demoKey) {
			t.Error("a secret reached the log")
		}
	})
	return g
}

// listen opens a loopback listener on a port the kernel picks; serve
// closes it, and so does the test's end if serve never ran.
func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// post sends a JSON body to the gateway with the demo key.
func post(t testing.TB, g *testGW, path, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", g.HTTP+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+demoKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// readJSON decodes a response body.
func readJSON(t testing.TB, r *http.Response) map[string]any {
	t.Helper()
	var m map[string]any
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, b)
	}
	return m
}

// completion is a canned upstream chat completion.
const completion = `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m-large","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from upstream"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":4,"total_tokens":15},"system_fingerprint":"fp_1"}`

func jsonHandler(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// send sends a request to the gateway: the demo key unless headers set
// Authorization (an empty value sends none), Content-Type
// application/json unless headers set it.
func send(t testing.TB, g *testGW, method, path string, body io.Reader, headers map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, g.HTTP+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+demoKey)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// sseEvents splits a raw SSE body into the data of its events, in order.
func sseEvents(raw []byte) []string {
	var out []string
	for _, ev := range strings.Split(strings.ReplaceAll(string(raw), "\r\n", "\n"), "\n\n") {
		var data []string
		for _, line := range strings.Split(ev, "\n") {
			if v, ok := strings.CutPrefix(line, "data:"); ok {
				data = append(data, strings.TrimPrefix(v, " "))
			}
		}
		if len(data) > 0 {
			out = append(out, strings.Join(data, "\n"))
		}
	}
	return out
}

// sseUpstream answers every request with the given events as a stream, each
// flushed, then `data: [DONE]`.
func sseUpstream(events ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for _, e := range events {
			fmt.Fprintf(w, "data: %s\n\n", e)
			f.Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}
}

// chunk is a canned chat.completion.chunk with the given choices JSON
// (an array) and, when usage is not empty, a usage member.
func chunk(choices, usage string) string {
	s := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m-large","choices":` + choices
	if usage != "" {
		s += `,"usage":` + usage
	}
	return s + "}"
}

// wait waits for serve to return and gives its error back to the cleanup
// of startGateway.
func (g *testGW) wait(t testing.TB, d time.Duration) error {
	t.Helper()
	select {
	case err := <-g.done:
		g.done <- err
		return err
	case <-time.After(d):
		t.Fatalf("serve did not return within %s", d)
		return nil
	}
}

// soak reports whether the long versions of tests run (FLEXWAY_SOAK=1,
// `make soak`); make test runs the short ones.
func soak() bool { return os.Getenv("FLEXWAY_SOAK") == "1" }

// wantMetrics fails t unless /metrics holds each series line of wants.
func wantMetrics(t testing.TB, g *testGW, wants ...string) {
	t.Helper()
	raw, _ := io.ReadAll(send(t, g, "GET", "/metrics", nil, nil).Body)
	for _, want := range wants {
		if !strings.Contains(string(raw), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// stoppedAudit stops g, waits for it, and returns the audit lines at path.
func stoppedAudit(t *testing.T, g *testGW, path string) []map[string]any {
	t.Helper()
	g.stop()
	_ = g.wait(t, 10*time.Second)
	return auditLines(t, path)
}
