package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingBody counts the bytes read from a request body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// holdServer runs the hold server in-process on a free loopback port with
// holdStream wrapped so that the test sees each call return (on returned,
// with the number of body bytes it read) and each connection close.
type holdServer struct {
	addr     string
	returned chan int64 // a handler call's body bytes, when it has returned
	mu       sync.Mutex
	conns    map[net.Conn]http.ConnState
}

func startHoldServer(t *testing.T) *holdServer {
	t.Helper()
	// Listen on port 0 and keep the listener: a port found free and
	// listened on again later can be taken by another test in between.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &holdServer{addr: l.Addr().String(), returned: make(chan int64, 16), conns: map[net.Conn]http.ConnState{}}
	srv := newHoldServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n atomic.Int64
		r.Body = countingBody{ReadCloser: r.Body, n: &n}
		holdStream(w, r)
		hs.returned <- n.Load()
	}))
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		hs.mu.Lock()
		defer hs.mu.Unlock()
		hs.conns[c] = s
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return hs
}

// open returns how many of the connections the server has accepted are not
// closed yet.
func (hs *holdServer) open() int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	n := 0
	for _, s := range hs.conns {
		if s != http.StateClosed && s != http.StateHijacked {
			n++
		}
	}
	return n
}

// openHold opens a stream on the hold server as the memory phase does and
// reads its first event.
func openHold(t *testing.T, ctx context.Context, client *http.Client, addr string) *http.Response {
	t.Helper()
	l := &load{client: client, key: "k"}
	req, err := l.newRequest(ctx, path{name: "hold", url: "http://" + addr + "/v1/chat/completions"}, streamBody)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q, want text/event-stream", ct)
	}
	r := bufio.NewReader(resp.Body)
	var event bytes.Buffer
	for !bytes.HasSuffix(event.Bytes(), []byte("\n\n")) {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("reading the first event: %v (got %q)", err, event.Bytes())
		}
		event.WriteByte(b)
	}
	if event.String() != holdEvent {
		t.Fatalf("first event %q, want %q", event.String(), holdEvent)
	}
	return resp
}

func TestHoldStream(t *testing.T) {
	t.Parallel()
	hs := startHoldServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	client := newClient(4)
	defer client.CloseIdleConnections()

	const streams = 3
	var resps []*http.Response
	for range streams {
		resps = append(resps, openHold(t, ctx, client, hs.addr))
	}
	// Every stream is held: no handler returns while its client is open.
	select {
	case <-hs.returned:
		t.Fatal("a handler returned while its client was open")
	case <-time.After(200 * time.Millisecond):
	}
	if n := hs.open(); n != streams {
		t.Fatalf("%d connections open on the server, want %d", n, streams)
	}

	for i, resp := range resps {
		resp.Body.Close() // before EOF: the client closes the connection
		select {
		case n := <-hs.returned:
			if n != int64(len(streamBody)) {
				t.Errorf("stream %d: the handler read %d body bytes, want %d", i, n, len(streamBody))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("stream %d: the handler did not return within 5s of the client closing", i)
		}
	}
	// And net/http's connections (their goroutines) end with them.
	deadline := time.Now().Add(5 * time.Second)
	for hs.open() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open on the server 5s after the clients closed", hs.open())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHoldListenFailure(t *testing.T) {
	t.Parallel()
	addr, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() { done <- holdServe(addr) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("holdServe on an address in use returned nil")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("holdServe on an address in use did not fail")
	}
}

// TestStartHold starts the test binary in hold mode as the memory phase
// does, and opens, holds and closes streams on it with openStreams.
func TestStartHold(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	h, err := startHold(ctx, t.TempDir(), "hold")
	if err != nil {
		t.Fatal(err)
	}
	defer h.stop()

	l := &load{client: newClient(20), key: "k"}
	defer l.client.CloseIdleConnections()
	p := path{name: "hold", url: "http://" + h.addr + "/v1/chat/completions"}
	for round := range 2 { // the second round after the first's have closed
		var rss int64
		open, err := l.openStreams(ctx, p, 10, 4, func(int) error {
			var err error
			rss, err = h.rssKiB()
			return err
		})
		if err != nil || open != 10 {
			t.Fatalf("round %d: openStreams: %d open, %v; want 10, nil", round, open, err)
		}
		if rss <= 0 {
			t.Errorf("round %d: VmRSS %d KiB with the streams open", round, rss)
		}
	}
	h.stop()
	if !h.exited() {
		t.Error("the hold server is still running after stop")
	}
	if log := h.logTail(); log != "" {
		t.Errorf("the hold server printed %q; want nothing", log)
	}
}
