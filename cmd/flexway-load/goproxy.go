package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"
)

const (
	// goproxyModeArg, as the first argument, runs this binary as the Go
	// floor instead of the harness: a reverse proxy from the standard
	// library that does nothing but forward,
	//
	//	flexway-load -goproxy-mode LISTEN TARGET
	//
	// where TARGET is the upstream's base URL (http://HOST:PORT). It is for
	// the harness only, which starts its own executable so; it is not a flag
	// and the usage does not list it.
	goproxyModeArg = "-goproxy-mode"
	// goproxyStartTimeout bounds how long the Go floor may take to accept a
	// connection after it has been started.
	goproxyStartTimeout = 5 * time.Second
	// goproxyIdleConns is the Go floor's keep-alive pool to its one
	// upstream: room for every request the open-loop phases keep in flight
	// (maxInFlight) and for every stream of the memory phase with those
	// being opened, so that no phase makes it dial again for a connection
	// it just let go.
	goproxyIdleConns = maxInFlight + openStreamCount + openingAtOnce
)

// goproxyMain is main in Go-floor mode; args are what follows
// goproxyModeArg. It does not return: the proxy runs until it is killed,
// and a listen failure or a bad target exits 1.
func goproxyMain(args []string) {
	if len(args) != 2 {
		fmt.Fprintf(os.Stderr, "usage: flexway-load %s LISTEN TARGET\n", goproxyModeArg)
		os.Exit(2)
	}
	err := goproxyServe(args[0], args[1])
	fmt.Fprintln(os.Stderr, "flexway-load goproxy:", err)
	os.Exit(1)
}

// goproxyServe serves newGoProxy(target) on listenAddr with the hold
// server's http.Server settings (net/http's defaults, the read-header and
// idle timeouts of Flexway's front). It returns only when the target is
// not a URL or it cannot listen or serve, with that error; it prints
// nothing while it works (the proxy logs the upstream errors it answers
// 502 for, on stderr).
func goproxyServe(listenAddr, target string) error {
	u, err := url.Parse(target)
	if err != nil {
		return err
	}
	if u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("target %q: want http://HOST:PORT", target)
	}
	l, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return err
	}
	return newHoldServer(newGoProxy(u)).Serve(l)
}

// newGoProxy is the Go floor: an httputil.ReverseProxy to target that
// rewrites nothing but the URL (no X-Forwarded-* headers, the caller's
// Host sent on), keeps up to goproxyIdleConns connections to its one
// upstream alive, and flushes every write at once (FlushInterval -1) so
// that a stream's chunks pass one by one. It is what any Go gateway
// starts from, before it checks, meters or logs anything.
func newGoProxy(target *url.URL) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		FlushInterval: -1,
		Transport: &http.Transport{
			Proxy:               nil, // loopback only; never an environment proxy
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        goproxyIdleConns,
			MaxIdleConnsPerHost: goproxyIdleConns,
			IdleConnTimeout:     2 * time.Minute,
			DisableCompression:  true, // forward the caller's Accept-Encoding, add none
		},
	}
}

// startGoProxy starts this executable in Go-floor mode, in its own process
// group, on a free loopback port in front of upstream (a base URL such as
// http://127.0.0.1:1234), and waits until it accepts a connection.
func startGoProxy(ctx context.Context, dir, name, upstream string) (*modeProc, error) {
	return startMode(ctx, dir, name, goproxyStartTimeout, goproxyModeArg, upstream)
}
