package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

const (
	// holdModeArg, as the first argument, runs this binary as the memory
	// phase's bare net/http server instead of the harness:
	//
	//	flexway-load -hold-mode LISTEN
	//
	// It is for the harness only, which starts its own executable so; it is
	// not a flag and the usage does not list it.
	holdModeArg = "-hold-mode"
	// holdStartTimeout bounds how long the hold server may take to accept a
	// connection after it has been started.
	holdStartTimeout = 5 * time.Second
	// holdWarmups is how many streams are opened and closed on the hold
	// server before its idle reading.
	holdWarmups = 50
)

// holdEvent is the one event the hold server sends on every stream.
const holdEvent = "data: {}\n\n"

// holdMain is main in hold mode; args are what follows holdModeArg. It does
// not return: the server runs until it is killed, and a listen failure
// exits 1.
func holdMain(args []string) {
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "usage: flexway-load %s LISTEN\n", holdModeArg)
		os.Exit(2)
	}
	err := holdServe(args[0])
	fmt.Fprintln(os.Stderr, "flexway-load hold:", err)
	os.Exit(1)
}

// holdServe serves holdStream on listenAddr with an http.Server configured
// as Flexway's HTTP front is (net/http's buffers and defaults, the same
// header and idle timeouts), so that the memory it holds per open stream is
// the floor of any HTTP/1.1 front on net/http. It returns only when it
// cannot listen or serve, with that error; it prints nothing while it works
// (net/http logs its own connection errors, if any, on stderr).
func holdServe(listenAddr string) error {
	l, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return err
	}
	return newHoldServer(http.HandlerFunc(holdStream)).Serve(l)
}

// newHoldServer is the hold server with handler h: net/http's defaults and
// buffers, with the read-header and idle timeouts of Flexway's front.
func newHoldServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
}

// holdStream answers any request as the start of an SSE stream and holds
// it open: it reads and discards the request body, sends one event
// (holdEvent), flushes it, and returns once the request's context is done,
// that is when the client has closed the connection (net/http's background
// read on the connection notices) or the server is shutting down. Nothing
// stays behind once it has returned.
func holdStream(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if _, err := io.WriteString(w, holdEvent); err != nil {
		return
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		return
	}
	<-r.Context().Done()
}

// startHold starts this executable in hold mode, in its own process group,
// on a free loopback port, and waits until it accepts a connection.
func startHold(ctx context.Context, dir, name string) (*modeProc, error) {
	return startMode(ctx, dir, name, holdStartTimeout, holdModeArg)
}

// holdMemory is the memory phase's floor: the same openStreamCount streams,
// opened the same way, held open by a bare net/http server (hold mode) with
// no upstream connection. It starts the server, warms it up with
// holdWarmups streams opened and closed one at a time, measures its RSS
// idle and with the streams open as streamMemory measures the gateway's,
// and stops it before it returns.
func (b *bench) holdMemory(ctx context.Context, dir string) error {
	b.logf("memory floor: %d open streams held by a bare net/http server (%s)", openStreamCount, holdModeArg)
	h, err := startHold(ctx, dir, "hold")
	if err != nil {
		return fmt.Errorf("hold memory: %w", err)
	}
	defer h.stop()
	l := b.memoryLoad()
	defer l.client.CloseIdleConnections()
	p := path{name: "hold", url: "http://" + h.addr + "/v1/chat/completions"}

	// Warm the server's pools and code paths up before the idle reading:
	// open a stream, wait for its first byte, close it.
	for range holdWarmups {
		if _, err := l.openStreams(ctx, p, 1, 1, func(int) error { return nil }); err != nil {
			return fmt.Errorf("hold memory warm-up: %w", err)
		}
	}
	m, err := measureOpenStreams(ctx, l, p, h.rssKiB)
	if err != nil {
		return fmt.Errorf("hold memory: %w", err)
	}
	if h.exited() {
		return fmt.Errorf("hold memory: the hold server exited during the run: %s", h.logTail())
	}
	b.rep.HoldMemory = &m
	return nil
}
