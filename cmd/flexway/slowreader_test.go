package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestStreamToClientThatStopsReading: a client that stops reading a
// stream (a real TCP connection with a small receive buffer) against an
// upstream that streams as fast as it can holds the stream no longer than
// the backend's idle_timeout of writes without progress: the upstream's
// connection is closed, the reservation is given back, and the call is
// charged an estimate of what was relayed, as for a client that went
// away.
func TestStreamToClientThatStopsReading(t *testing.T) {
	var chunks atomic.Int64
	upstreamDone := make(chan struct{})
	word := strings.Repeat("x", 2000)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		defer close(upstreamDone)
		w.Header().Set("Content-Type", "text/event-stream")
		content := chunk(`[{"index":0,"delta":{"content":"`+word+`"}}]`, "")
		for range 50_000 { // 100 MB at most
			if _, err := fmt.Fprintf(w, "data: %s\n\n", content); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			chunks.Add(1)
			if r.Context().Err() != nil {
				return
			}
		}
	})
	// idle_timeout 2s (budgetConfig's); a cap far above what is relayed.
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 100000000}"))
	body := `{"model":"m","stream":true,"max_tokens":10000000,"messages":[{"role":"user","content":"Stream a lot."}]}`

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(g.HTTP, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", demoKey, len(body), body)
	br := bufio.NewReaderSize(conn, 1024)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("status line %q: %v", status, err)
	}
	// Then the client reads nothing more.
	start := time.Now()
	select {
	case <-upstreamDone:
	case <-time.After(20 * time.Second):
		t.Fatalf("the upstream still streams %s after the client stopped reading (%d chunks sent)", time.Since(start), chunks.Load())
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("the stream ended %s after the client stopped reading, before idle_timeout (2s)", took)
	}
	var u capState
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		u = usageOf(t, g, "")["tokens_per_day"]
		if u.Reserved == 0 || time.Now().After(deadline) {
			break
		}
	}
	if u.Reserved != 0 || u.Committed == 0 {
		t.Fatalf("after the stream ended: %+v; want the reservation given back and an estimate committed", u)
	}
	t.Logf("upstream sent %d chunks of %d bytes; committed %d tokens", chunks.Load(), len(word), u.Committed)
}
