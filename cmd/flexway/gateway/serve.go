package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/transcoder"
)

// ShutdownGrace bounds how long open calls and streams may run, once
// [Gateway.Serve]'s context is done, before they are cut.
const ShutdownGrace = 30 * time.Second

// Serve serves the gRPC surface (server.grpc) on grpcLis and the HTTP
// surface (server.http) on httpLis, both opened by the caller, plain TCP:
// with server.tls, Serve wraps them in TLS itself (gRPC offers h2 only).
// It returns when ctx is done, or when a listener fails (with its error),
// after a graceful shutdown: the health service reports NOT_SERVING, both
// listeners stop accepting at once, and open calls and streams may finish
// for up to [ShutdownGrace] before they are cut. HTTP calls in flight
// still reach the core through the in-process channel, which has no
// listener to close. Serve closes both listeners; call [Gateway.Close]
// after it to write the last audit lines. Serve is called once.
func (g *Gateway) Serve(ctx context.Context, grpcLis, httpLis net.Listener) error {
	if g.tls != nil {
		// gRPC speaks HTTP/2 only: "h2" is the one protocol its listener
		// offers, as grpc-go's own TLS credentials do (its clients require
		// it). The handshake runs in the connection's goroutine, on its
		// first read, within the server's connection timeout.
		t := g.tls.Clone()
		t.NextProtos = []string{"h2"}
		grpcLis = tls.NewListener(grpcLis, t)
	} else {
		// net/http's own refusals (bad framing) in the surface's format;
		// under TLS net/http needs its *tls.Conn and they stand.
		httpLis = transcoder.FramingListener(httpLis)
	}
	hs := &http.Server{
		Handler:           g.http,
		ConnContext:       transcoder.FramingConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		// ServeTLS adds h2 and http/1.1 to a clone's NextProtos.
		TLSConfig: g.tls,
	}
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errc <- g.grpc.Serve(grpcLis) }()
	go func() {
		defer wg.Done()
		var err error
		if g.tls != nil {
			err = hs.ServeTLS(httpLis, "", "") // the certificate is in TLSConfig
		} else {
			err = hs.Serve(httpLis)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	g.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	g.log.Info("flexway serving", "http", httpLis.Addr().String(), "grpc", grpcLis.Addr().String(),
		"tls", g.tls != nil, "client_certificates", g.tls != nil && g.tls.ClientAuth == tls.RequireAndVerifyClientCert, "version", g.version)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	g.log.Info("flexway stopping: no new calls; open calls may finish", "grace", ShutdownGrace.String())
	g.health.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	done := make(chan struct{})
	go func() {
		var stop sync.WaitGroup
		stop.Add(2)
		go func() { defer stop.Done(); _ = hs.Shutdown(sctx) }()
		go func() { defer stop.Done(); g.grpc.GracefulStop() }()
		stop.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-sctx.Done():
		g.log.Warn("shutdown grace elapsed: closing open calls")
		_ = hs.Close()
		g.grpc.Stop()
	}
	wg.Wait()
	g.log.Info("flexway stopped")
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
