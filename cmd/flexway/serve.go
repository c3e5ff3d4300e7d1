package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/telemetry"
	"github.com/flexway/flexway/transcoder"
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
// open calls and streams finish for up to shutdownGrace. It fails (exit
// status 1) when audit lines accepted could not be written by then.
func serve(ctx context.Context, path string, stdout, stderr io.Writer, ready listening) (retErr error) {
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	cfg, warnings, err := loadConfig(path, stderr)
	for _, w := range warnings {
		log.Warn("configuration", "warning", w.Error())
	}
	if err != nil {
		return err
	}
	led, err := openLedger(ctx, cfg, log)
	if err != nil {
		return err
	}
	// Closed last, after every call committed: the embedded store is
	// synced to disk on close.
	defer func() {
		// The embedded ledger's last checkpoint: what it could not write
		// stays in its journal, replayed at the next start.
		if err := led.Close(); err != nil {
			log.Error("budget ledger", "error", err.Error())
		}
	}()
	// The audit's failures are counted in the metrics, which the gateway
	// builds after the audit is open.
	var metrics atomic.Pointer[telemetry.Metrics]
	aw, err := openAudit(cfg, log, func(reason string) {
		if m := metrics.Load(); m != nil {
			m.AuditFailure(reason)
		}
	})
	if err != nil {
		return err
	}
	// Closed after the listeners stopped and every call ended: it writes
	// every accepted line. Lines it could not write make serve fail, after
	// the rest of the shutdown (the ledger is closed after it); the error
	// is in the log, not printed again.
	defer func() {
		if err := aw.Close(); err != nil {
			log.Error("audit log", "error", err.Error())
			if retErr == nil {
				retErr = errSilent
			}
		}
	}()
	gw, err := build(cfg, log, led, aw)
	if err != nil {
		return err
	}
	metrics.Store(gw.metrics)
	for _, p := range notYetEnforced(cfg) {
		log.Warn("configuration", "note", p)
	}
	defer gw.close()

	tlsConf, err := serverTLS(cfg.Server.TLS)
	if err != nil {
		return err
	}

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
	scheme, grpcMode := "http", "plaintext"
	if tlsConf != nil {
		// gRPC speaks HTTP/2 only: "h2" is the one protocol its listener
		// offers, as grpc-go's own TLS credentials do (its clients require
		// it). The handshake runs in the connection's goroutine, on its
		// first read, within the server's connection timeout.
		g := tlsConf.Clone()
		g.NextProtos = []string{"h2"}
		grpcLis = tls.NewListener(grpcLis, g)
		scheme, grpcMode = "https", "TLS"
	}
	if tlsConf == nil {
		// net/http's own refusals (bad framing) in the surface's format;
		// under TLS net/http needs its *tls.Conn and they stand.
		httpLis = transcoder.FramingListener(httpLis)
	}
	defer startPprof(log)()
	hs := &http.Server{
		Handler:           gw.http,
		ConnContext:       transcoder.FramingConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// ServeTLS adds h2 and http/1.1 to a clone's NextProtos.
		TLSConfig: tlsConf,
	}
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errc <- gw.grpc.Serve(grpcLis) }()
	go func() {
		defer wg.Done()
		var err error
		if tlsConf != nil {
			err = hs.ServeTLS(httpLis, "", "") // the certificate is in TLSConfig
		} else {
			err = hs.Serve(httpLis)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	gw.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	log.Info("flexway serving", "http", httpLis.Addr().String(), "grpc", grpcLis.Addr().String(),
		"tls", tlsConf != nil, "client_certificates", tlsConf != nil && tlsConf.ClientAuth == tls.RequireAndVerifyClientCert, "version", version)
	fmt.Fprintf(stdout, "flexway: serving OpenAI API on %s://%s/v1 and gRPC (%s) on %s\n", scheme, httpLis.Addr(), grpcMode, grpcLis.Addr())
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

// serverTLS loads server.tls: nil when it is not enabled, else a TLS 1.2+
// configuration with the certificate chain and key, and, with
// client_ca_file, client certificates required and verified against it.
// The files are read once, here; errors name the key path and the file.
func serverTLS(t config.ServerTLS) (*tls.Config, error) {
	if !t.Enabled() {
		return nil, nil
	}
	certPEM, err := os.ReadFile(t.CertFile)
	if err != nil {
		return nil, fmt.Errorf("server.tls.cert_file: %w", err)
	}
	keyPEM, err := os.ReadFile(t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("server.tls.key_file: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("server.tls.cert_file: %s with key_file %s: %w", t.CertFile, t.KeyFile, err)
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if t.ClientCAFile != "" {
		caPEM, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("server.tls.client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("server.tls.client_ca_file: %s: no PEM certificate in it", t.ClientCAFile)
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return conf, nil
}
