package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for flexway-load in relay mode and
// in hold mode, so that TestStartRelay and TestStartHold can start
// os.Executable() as the harness does.
func TestMain(m *testing.M) {
	runMode(os.Args)
	os.Exit(m.Run())
}

// echoServer listens on a free loopback port and echoes back what each
// connection sends until it reads the end of it; it then closes the
// connection and sends on ended.
func echoServer(t *testing.T) (addr string, ended <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ch := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				ch <- struct{}{}
			}()
		}
	}()
	return l.Addr().String(), ch
}

// startTestRelay runs relay in a goroutine on a free port in front of
// target and waits until it accepts connections. The goroutine runs until
// the test binary exits.
func startTestRelay(t *testing.T, target string) string {
	t.Helper()
	addr, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	go func() { failed <- relay(addr, target) }()
	if err := waitDial(t.Context(), addr, 5*time.Second, nil); err != nil {
		select {
		case err := <-failed:
			t.Fatalf("relay(%s, %s): %v", addr, target, err)
		default:
		}
		t.Fatal(err)
	}
	return addr
}

// wait fails the test unless ch receives within a few seconds.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not within 5s", what)
	}
}

func TestRelay(t *testing.T) {
	t.Parallel()
	echo, ended := echoServer(t)
	addr := startTestRelay(t, echo)
	wait(t, ended, "the readiness dial's upstream connection ended")

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := make([]byte, 1<<20) // many reads and writes each way
	_, _ = rand.Read(sent)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(sent)
		wrote <- err
	}()
	got := make([]byte, len(sent))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("writing: %v", err)
	}
	if !bytes.Equal(got, sent) {
		t.Fatal("the bytes came back changed")
	}

	select {
	case <-ended:
		t.Fatal("the upstream connection ended while the client was open")
	default:
	}
	c.Close()
	wait(t, ended, "closing the client closes the upstream side")
}

func TestRelayHalfClose(t *testing.T) {
	t.Parallel()
	echo, ended := echoServer(t)
	addr := startTestRelay(t, echo)
	wait(t, ended, "the readiness dial's upstream connection ended")

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := []byte("hello through the relay")
	if _, err := c.Write(sent); err != nil {
		t.Fatal(err)
	}
	// The client's end of stream reaches the upstream, which then closes;
	// that end comes back to the client after the echoed bytes.
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading to the end: %v", err)
	}
	if !bytes.Equal(got, sent) {
		t.Fatalf("got %q, want %q", got, sent)
	}
	wait(t, ended, "the upstream saw the client's end of stream")
}

func TestRelayListenFailure(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() { done <- relay(l.Addr().String(), "127.0.0.1:1") }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("relay on an address in use returned nil")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("relay on an address in use did not fail")
	}
}

func TestStartRelay(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "through "+r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	rly, err := startRelay(ctx, t.TempDir(), "relay", hostPort(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer rly.stop()

	client := newClient(1)
	defer client.CloseIdleConnections()
	for range 3 { // the second and third reuse the relayed connection
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+rly.addr+"/", nil)
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
		if err != nil || string(body) != "through Bearer k" {
			t.Fatalf("body %q, %v; want %q", body, err, "through Bearer k")
		}
	}
	rly.stop()
	if !rly.exited() {
		t.Error("the relay is still running after stop")
	}
	if log := rly.logTail(); log != "" {
		t.Errorf("the relay printed %q; want nothing", log)
	}
}
