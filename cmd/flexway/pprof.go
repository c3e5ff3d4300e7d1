package main

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
)

// pprofEnv names the environment variable that, when set to a loopback
// host:port, serves Go's runtime profiles (net/http/pprof) there: a
// development and diagnosis aid, off by default, never on the public
// listeners.
const pprofEnv = "FLEXWAY_PPROF_ADDR"

// startPprof serves /debug/pprof/ on $FLEXWAY_PPROF_ADDR when it is set to a
// loopback address; it returns a func that stops it.
func startPprof(log *slog.Logger) func() {
	addr := os.Getenv(pprofEnv)
	if addr == "" {
		return func() {}
	}
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
		log.Warn("ignoring "+pprofEnv+": profiles are served on a loopback address only", "addr", addr)
		return func() {}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		log.Warn("pprof listener", "error", err.Error())
		return func() {}
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(lis) }()
	log.Info("serving runtime profiles", "addr", lis.Addr().String())
	return func() { _ = srv.Close() }
}
