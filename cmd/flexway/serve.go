package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/flexway/flexway/cmd/flexway/gateway"
	"github.com/flexway/flexway/server/config"
)

// listening is told the bound addresses once the gateway is built and
// both listeners are open.
type listening func(httpAddr, grpcAddr string)

// serveEnv is what a test gives serve; run gives the zero value.
type serveEnv struct {
	// GRPC and HTTP are listeners the caller opened; nil: serve listens
	// on server.grpc and server.http.
	GRPC, HTTP net.Listener
	// Ready, when set, is told the addresses before serving starts.
	Ready listening
}

// tuneOptions, when a test sets it, adjusts the gateway's options before
// it is built (a test's span exporter, reservation lease); production
// binaries leave it nil.
var tuneOptions func(*gateway.Options)

// loadConfig loads path; each problem of an invalid configuration is
// printed to stderr, "error: file:line: path: message", and errSilent
// returned.
func loadConfig(path string, stderr io.Writer) (*config.Config, config.Problems, error) {
	cfg, warnings, err := config.Load(path)
	if ps, ok := err.(config.Problems); ok {
		for _, p := range ps {
			fmt.Fprintln(stderr, "error:", p.Error())
		}
		return nil, warnings, errSilent
	}
	return cfg, warnings, err
}

// serve runs the gateway until ctx is done, then stops accepting and lets
// open calls and streams finish for up to gateway.ShutdownGrace. It fails
// (exit status 1) when audit lines accepted could not be written by then.
func serve(ctx context.Context, path string, stdout, stderr io.Writer, env serveEnv) (retErr error) {
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	closeAll := func() {
		for _, l := range []net.Listener{env.GRPC, env.HTTP} {
			if l != nil {
				l.Close()
			}
		}
	}
	cfg, warnings, err := loadConfig(path, stderr)
	for _, w := range warnings {
		log.Warn("configuration", "warning", w.Error())
	}
	if err != nil {
		closeAll()
		return err
	}
	o := gateway.Options{Config: cfg, Logger: log, Version: version}
	if tuneOptions != nil {
		tuneOptions(&o)
	}
	gw, err := gateway.New(o)
	if err != nil {
		closeAll()
		return err
	}
	// Closed after the listeners stopped and every call ended: it writes
	// every accepted audit line. Lines it could not write make serve
	// fail; the error is in the log, not printed again.
	defer func() {
		if gw.Close() != nil && retErr == nil {
			retErr = errSilent
		}
	}()
	if env.GRPC == nil {
		var lc net.ListenConfig
		if env.GRPC, err = lc.Listen(ctx, "tcp", cfg.Server.GRPC); err != nil {
			closeAll()
			return fmt.Errorf("server.grpc: %w", err)
		}
	}
	if env.HTTP == nil {
		var lc net.ListenConfig
		if env.HTTP, err = lc.Listen(ctx, "tcp", cfg.Server.HTTP); err != nil {
			closeAll()
			return fmt.Errorf("server.http: %w", err)
		}
	}
	defer startPprof(log)()
	scheme, grpcMode := "http", "plaintext"
	if cfg.Server.TLS.Enabled() {
		scheme, grpcMode = "https", "TLS"
	}
	fmt.Fprintf(stdout, "flexway: serving OpenAI API on %s://%s/v1 and gRPC (%s) on %s\n", scheme, env.HTTP.Addr(), grpcMode, env.GRPC.Addr())
	if env.Ready != nil {
		env.Ready(env.HTTP.Addr().String(), env.GRPC.Addr().String())
	}
	return gw.Serve(ctx, env.GRPC, env.HTTP)
}
