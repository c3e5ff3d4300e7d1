package upstream

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// h1Server is a plain HTTP/1.1 server counting the connections it accepted.
func h1Server(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	return h1ServerIdle(t, h, 0)
}

// h1ServerIdle is h1Server closing connections idle for idle (0: never).
func h1ServerIdle(t *testing.T, h http.HandlerFunc, idle time.Duration) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.IdleTimeout = idle
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func h1Get(t *testing.T, tr *h1Transport, ctx context.Context, url string, readAll bool) (string, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"a":1}`))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if !readAll {
		buf := make([]byte, 4)
		n, err := resp.Body.Read(buf)
		return string(buf[:n]), err
	}
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestH1TransportReusesConnections(t *testing.T) {
	srv, conns := h1Server(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Query().Get("chunked") != "" {
			w.(http.Flusher).Flush() // no Content-Length: chunked
		}
		_, _ = w.Write(b)
	})
	tr := newH1Transport(strings.TrimPrefix(srv.URL, "http://"))
	for i, path := range []string{"/", "/?chunked=1", "/", "/?chunked=1", "/"} {
		got, err := h1Get(t, tr, context.Background(), srv.URL+path, true)
		if err != nil || got != `{"a":1}` {
			t.Fatalf("call %d: %q, %v", i, got, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 5 sequential calls, want 1", n)
	}
}

func TestH1TransportSkipsConnectionsThePeerClosed(t *testing.T) {
	// The upstream's keep-alive timeout is 50ms.
	srv, conns := h1ServerIdle(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }, 50*time.Millisecond)
	tr := newH1Transport(strings.TrimPrefix(srv.URL, "http://"))
	if got, err := h1Get(t, tr, context.Background(), srv.URL, true); err != nil || got != "ok" {
		t.Fatalf("first call: %q, %v", got, err)
	}
	time.Sleep(300 * time.Millisecond) // the upstream closes the idle connection
	if got, err := h1Get(t, tr, context.Background(), srv.URL, true); err != nil || got != "ok" {
		t.Fatalf("call after the upstream closed the idle connection: %q, %v", got, err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the closed one is not reused)", n)
	}
}

func TestH1TransportClosesUnfinishedBodies(t *testing.T) {
	srv, conns := h1Server(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", 64<<10))
	})
	tr := newH1Transport(strings.TrimPrefix(srv.URL, "http://"))
	for range 2 {
		if got, err := h1Get(t, tr, context.Background(), srv.URL, false); err != nil || got != "xxxx" {
			t.Fatalf("%q, %v", got, err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2: a body closed before its end closes its connection", n)
	}
}

func TestH1TransportCancelUnblocksABodyRead(t *testing.T) {
	release := make(chan struct{})
	srv, _ := h1Server(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first")
		w.(http.Flusher).Flush()
		<-release
	})
	defer close(release)
	tr := newH1Transport(strings.TrimPrefix(srv.URL, "http://"))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{}`))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first" {
		t.Fatalf("%q, %v", buf, err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err = resp.Body.Read(buf)
	if err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("read after cancel: %v after %v, want an error at once", err, time.Since(start))
	}
}

func TestH1TransportRefusesHugeHeaders(t *testing.T) {
	srv, _ := h1Server(t, func(w http.ResponseWriter, r *http.Request) {
		for i := range 40 {
			w.Header().Set("X-Big-"+strings.Repeat("a", i), strings.Repeat("v", 32<<10))
		}
	})
	tr := newH1Transport(strings.TrimPrefix(srv.URL, "http://"))
	if _, err := h1Get(t, tr, context.Background(), srv.URL, true); err == nil {
		t.Error("headers over 1 MiB were accepted")
	}
}
