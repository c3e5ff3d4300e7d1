package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/flexway/flexway/server/config"
)

// shutdownGrace bounds how long open calls and streams may run after
// SIGTERM before they are cut.
const shutdownGrace = 30 * time.Second

// listening is told the bound addresses once both listeners accept.
type listening func(httpAddr, grpcAddr string)

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
// open calls and streams finish for up to shutdownGrace.
func serve(ctx context.Context, path string, stdout, stderr io.Writer, ready listening) error {
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	cfg, warnings, err := loadConfig(path, stderr)
	for _, w := range warnings {
		log.Warn("configuration", "warning", w.Error())
	}
	if err != nil {
		return err
	}
	led, err := openLedger(ctx, cfg, func(msg string) { log.Warn("budget ledger", "warning", msg) })
	if err != nil {
		return err
	}
	// Closed last, after every call committed: the embedded store is
	// synced to disk on close.
	defer led.Close()
	gw, err := build(cfg, log, led)
	if err != nil {
		return err
	}
	for _, p := range notYetEnforced(cfg) {
		log.Warn("configuration", "note", p)
	}
	defer gw.close()

	var lc net.ListenConfig
	grpcLis, err := lc.Listen(ctx, "tcp", cfg.Server.GRPC)
	if err != nil {
		return fmt.Errorf("server.grpc: %w", err)
	}
	httpLis, err := lc.Listen(ctx, "tcp", cfg.Server.HTTP)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("server.http: %w", err)
	}
	defer startPprof(log)()
	hs := &http.Server{
		Handler:           gw.http,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errc <- gw.grpc.Serve(grpcLis) }()
	go func() {
		defer wg.Done()
		if err := hs.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	gw.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	log.Info("flexway serving", "http", httpLis.Addr().String(), "grpc", grpcLis.Addr().String(), "version", version)
	fmt.Fprintf(stdout, "flexway: serving OpenAI API on http://%s/v1 and gRPC on %s\n", httpLis.Addr(), grpcLis.Addr())
	if ready != nil {
		ready(httpLis.Addr().String(), grpcLis.Addr().String())
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	log.Info("flexway stopping: no new calls; open calls may finish", "grace", shutdownGrace.String())
	gw.health.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	done := make(chan struct{})
	go func() {
		// Both listeners stop accepting at once; HTTP calls in flight
		// still reach the core through the in-process channel, which has
		// no listener to close.
		var stop sync.WaitGroup
		stop.Add(2)
		go func() { defer stop.Done(); _ = hs.Shutdown(sctx) }()
		go func() { defer stop.Done(); gw.grpc.GracefulStop() }()
		stop.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-sctx.Done():
		log.Warn("shutdown grace elapsed: closing open calls")
		_ = hs.Close()
	}
	gw.close()
	wg.Wait()
	log.Info("flexway stopped")
	return runErr
}
