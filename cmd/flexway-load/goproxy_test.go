package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// goproxyUpstream answers POST /json with a JSON body and the request's
// Authorization header, and GET /stream with an SSE stream of three
// events, each sent and flushed only once the test has received the one
// before it (on next), so that the stream can only pass through a proxy
// that forwards it chunk by chunk.
func goproxyUpstream(t *testing.T, next <-chan struct{}) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/json":
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"got":"`+string(body)+`","auth":"`+r.Header.Get("Authorization")+`"}`)
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			for i, ev := range []string{"one", "two", "three"} {
				if i > 0 {
					select {
					case <-next:
					case <-r.Context().Done():
						return
					case <-time.After(5 * time.Second):
						return // the proxy held the previous event back
					}
				}
				_, _ = io.WriteString(w, "data: "+ev+"\n\n")
				_ = http.NewResponseController(w).Flush()
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// checkGoProxy sends a JSON call and a stream through the proxy at base
// and checks both came back as the upstream sent them, the stream's events
// one at a time.
func checkGoProxy(t *testing.T, ctx context.Context, base string, next chan<- struct{}) {
	t.Helper()
	client := newClient(1)
	defer client.CloseIdleConnections()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/json", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer k")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `{"got":"hello","auth":"Bearer k"}`; err != nil || string(body) != want {
		t.Fatalf("JSON answer %q, %v; want %q", body, err, want)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}

	req, err = http.NewRequestWithContext(ctx, http.MethodGet, base+"/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for i, want := range []string{"one", "two", "three"} {
		if i > 0 {
			next <- struct{}{} // the upstream sends the next event only now
		}
		line, err := r.ReadString('\n')
		if err != nil || line != "data: "+want+"\n" {
			t.Fatalf("event %d: %q, %v; want %q", i, line, err, "data: "+want)
		}
		if blank, err := r.ReadString('\n'); err != nil || blank != "\n" {
			t.Fatalf("event %d: %q, %v after the data line; want a blank line", i, blank, err)
		}
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Errorf("after the stream: %q, %v; want its end", rest, err)
	}
}

func TestGoProxy(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	up := goproxyUpstream(t, next)
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(newGoProxy(u))
	defer proxy.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	checkGoProxy(t, ctx, proxy.URL, next)
}

func TestStartGoProxy(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	up := goproxyUpstream(t, next)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	gp, err := startGoProxy(ctx, t.TempDir(), "goproxy", up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer gp.stop()
	checkGoProxy(t, ctx, "http://"+gp.addr, next)
	gp.stop()
	if !gp.exited() {
		t.Error("the Go floor is still running after stop")
	}
	if log := gp.logTail(); log != "" {
		t.Errorf("the Go floor printed %q; want nothing", log)
	}
}

func TestGoProxyServeBadTarget(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"127.0.0.1:1", "https://127.0.0.1:1", "http://"} {
		if err := goproxyServe("127.0.0.1:0", target); err == nil {
			t.Errorf("goproxyServe with target %q returned nil", target)
		}
	}
}
