package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

const (
	// relayModeArg, as the first argument, runs this binary as the relay
	// path's TCP relay instead of the harness:
	//
	//	flexway-load -relay-mode LISTEN TARGET
	//
	// It is for the harness only, which starts its own executable so; it is
	// not a flag and the usage does not list it.
	relayModeArg = "-relay-mode"
	// relayStartTimeout bounds how long the relay may take to accept a
	// connection after it has been started.
	relayStartTimeout = 5 * time.Second
	// relayDialTimeout bounds the relay's dial to its target.
	relayDialTimeout = 5 * time.Second
)

// relayMain is main in relay mode; args are what follows relayModeArg. It
// does not return: the relay runs until it is killed, and a listen failure
// exits 1.
func relayMain(args []string) {
	if len(args) != 2 {
		fmt.Fprintf(os.Stderr, "usage: flexway-load %s LISTEN TARGET\n", relayModeArg)
		os.Exit(2)
	}
	err := relay(args[0], args[1])
	fmt.Fprintln(os.Stderr, "flexway-load relay:", err)
	os.Exit(1)
}

// relay listens on listenAddr and relays every connection it accepts, byte
// for byte, to a new connection to targetAddr. It understands nothing of
// what it forwards: it is the smallest process that can stand between the
// harness and the sample, and the relay path measures what such a process
// costs on this machine. It returns only when it cannot listen or its
// listener has been closed, with that error; it prints nothing while it
// works, only the dials to the target that fail, on stderr.
func relay(listenAddr, targetAddr string) error {
	l, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return err
	}
	defer l.Close()
	for {
		c, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return err
		}
		if err != nil {
			// Out of file descriptors, say: back off a moment and go on
			// once some have been closed.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		go relayConn(c, targetAddr)
	}
}

// relayConn dials targetAddr and copies bytes both ways between it and
// client until both directions have ended. A direction that ends (EOF from
// its source) is half-closed on its destination, so that the other side sees
// the same end of stream it would have seen without the relay; when both
// have ended, both connections are closed.
func relayConn(client net.Conn, targetAddr string) {
	defer client.Close()
	upstream, err := net.DialTimeout("tcp", targetAddr, relayDialTimeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "flexway-load relay:", err)
		return
	}
	defer upstream.Close()
	back := make(chan struct{})
	go func() {
		defer close(back)
		_, _ = io.Copy(client, upstream)
		closeWrite(client)
	}()
	_, _ = io.Copy(upstream, client)
	closeWrite(upstream)
	<-back
}

// closeWrite half-closes c when it can, and closes it otherwise.
func closeWrite(c net.Conn) {
	if hc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
		return
	}
	_ = c.Close()
}

// modeProc is this executable running in one of its modes (relay, hold,
// Go floor), or another server the harness started and dials (nginx).
type modeProc struct {
	*proc
	addr string // where it listens, e.g. 127.0.0.1:1234
}

// startRelay starts this executable in relay mode, in its own process group,
// on a free loopback port in front of target (host:port), and waits until
// it accepts a connection.
func startRelay(ctx context.Context, dir, name, target string) (*modeProc, error) {
	return startMode(ctx, dir, name, relayStartTimeout, relayModeArg, target)
}

// startMode starts this executable with mode, a free loopback address to
// listen on and args, in its own process group, and waits up to timeout
// until it accepts a connection.
func startMode(ctx context.Context, dir, name string, timeout time.Duration, mode string, args ...string) (*modeProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	p, _, err := startProc(ctx, name, exe, dir, append([]string{mode, addr}, args...), os.Environ(), false)
	if err != nil {
		return nil, err
	}
	if err := waitDial(ctx, addr, timeout, p.exited); err != nil {
		p.stop()
		return nil, fmt.Errorf("%s: %w\n%s", name, err, p.logTail())
	}
	return &modeProc{proc: p, addr: addr}, nil
}

// runMode runs this executable as the mode args[1] names, when it names
// one (relayModeArg, holdModeArg, goproxyModeArg), and does not return
// then; otherwise it returns at once.
func runMode(args []string) {
	if len(args) < 2 {
		return
	}
	switch args[1] {
	case relayModeArg:
		relayMain(args[2:])
	case holdModeArg:
		holdMain(args[2:])
	case goproxyModeArg:
		goproxyMain(args[2:])
	}
}

// waitDial dials addr until a TCP connection succeeds, the timeout passes,
// ctx ends or exited (when not nil) reports that the listener's process has
// gone.
func waitDial(ctx context.Context, addr string, timeout time.Duration, exited func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	for {
		attempt, stop := context.WithTimeout(ctx, 250*time.Millisecond)
		c, err := d.DialContext(attempt, "tcp", addr)
		stop()
		if err == nil {
			c.Close()
			return nil
		}
		if exited != nil && exited() {
			return fmt.Errorf("exited before accepting connections on %s", addr)
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("no connection to %s within %s: %w", addr, timeout, err)
			}
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// hostPort is the host:port of an http:// base URL.
func hostPort(base string) string {
	return strings.TrimPrefix(base, "http://")
}
