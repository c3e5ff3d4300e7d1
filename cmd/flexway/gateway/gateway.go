package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/flexway/flexway/interceptors/identity"
	"github.com/flexway/flexway/server/auditlog"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/grpcproxy"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/telemetry"
	"github.com/flexway/flexway/transcoder/inproc"
)

// Options are what [New] builds a gateway from.
type Options struct {
	// Config is the loaded configuration (config.Load); required.
	Config *config.Config
	// Logger receives the gateway's log; nil discards it.
	Logger *slog.Logger
	// Version is the build's version, in the log and in exported
	// telemetry's service.version; empty is "dev".
	Version string

	// SkipLedger builds the gateway without opening ai.budget.store: it
	// meters nothing and has no admin service. SkipAudit builds it
	// without opening audit.path and the policies' prompt logs
	// (prompt_logging.path): it audits and logs nothing. flexway validate sets
	// both (it must not take the embedded ledger's file from a running
	// gateway); benchmarks set them to measure the path without them.
	SkipLedger, SkipAudit bool

	// SpanExporter, when set (tests), receives every span, synchronously,
	// in place of telemetry.otlp_endpoint's exporter.
	SpanExporter sdktrace.SpanExporter
	// LedgerClock, when set (tests), is the ledger's clock.
	LedgerClock func() time.Time
	// ReservationTTL, when not zero (tests), is the reservations' lease;
	// zero is ledger.LeaseTTL.
	ReservationTTL time.Duration

	// wrapKeys, when set (this package's tests), wraps the keyring built
	// from identity.api_keys and identity.relays.
	wrapKeys func(identity.Keyring) identity.Keyring
}

// Gateway is a built Flexway: the gRPC server with its chain and services,
// the in-process channel the HTTP front calls the same core through (with
// the same chain), and the HTTP handler. Nothing listens until
// [Gateway.Serve] is called; [Gateway.Close] releases what [New] opened.
//
// The in-process channel (transcoder/inproc) runs the services in the
// HTTP handler's goroutine — no HTTP/2 framing, no serialisation, no copy —
// and has no listener to close: an HTTP call in flight when shutdown begins
// still reaches the core after the gRPC listener stopped taking new calls.
type Gateway struct {
	cfg     *config.Config
	log     *slog.Logger
	version string
	tls     *tls.Config // server.tls; nil: plaintext
	grpc    *grpc.Server
	health  *health.Server
	inproc  *inproc.Channel
	http    http.Handler
	proxy   *grpcproxy.Proxy // nil when no specialised-model service is routed
	metrics *telemetry.Metrics
	led     *ledger.Ledger   // nil with SkipLedger
	audit   *auditlog.Writer // nil with SkipAudit
	// prompts are the prompt logs; nil with SkipAudit, and when no
	// policy turns prompt_logging on.
	prompts *promptLogs
	// cache is the response cache; nil when no policy turns it on.
	cache *responseCache
	// stopTracing flushes and stops the tracer provider.
	stopTracing func(context.Context) error
	closeOnce   sync.Once
	closeErr    error
}

// New builds a gateway from o: the same path for flexway serve and
// flexway validate. It opens the budget ledger (which, after a crash,
// appends to the audit file the lines of committed calls it lacks, before
// the audit is opened), then the audit log, then builds the rest, and reads
// server.tls's files. Errors name the configuration key at fault; on error
// nothing stays open.
func New(o Options) (*Gateway, error) {
	cfg := o.Config
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	version := o.Version
	if version == "" {
		version = "dev"
	}
	g := &Gateway{cfg: cfg, log: log, version: version, stopTracing: func(context.Context) error { return nil }}
	ok := false
	defer func() {
		if !ok {
			_ = g.Close()
		}
	}()
	var err error
	if !o.SkipLedger {
		if g.led, err = openLedger(context.Background(), cfg, log, ledger.Options{Now: o.LedgerClock, ReservationTTL: o.ReservationTTL}); err != nil {
			return nil, err
		}
	}
	// The audit's failures are counted in the metrics, which are built
	// after the audit is open.
	var metrics atomic.Pointer[telemetry.Metrics]
	if !o.SkipAudit {
		g.audit, err = openAudit(cfg, log, func(reason string) {
			if m := metrics.Load(); m != nil {
				m.AuditFailure(reason)
			}
		})
		if err != nil {
			return nil, err
		}
		if g.prompts, err = openPromptLogs(cfg, log); err != nil {
			return nil, err
		}
	}
	if err := g.build(o); err != nil {
		return nil, err
	}
	metrics.Store(g.metrics)
	// The listeners' certificate and key are read once, here.
	if g.tls, err = serverTLS(cfg.Server.TLS); err != nil {
		return nil, err
	}
	ok = true
	return g, nil
}

// Handler is the gateway's HTTP front (/v1/*, admin REST, /metrics,
// /console, /healthz, /readyz), for callers that serve it themselves
// (benchmarks call it without a listener).
func (g *Gateway) Handler() http.Handler { return g.http }

// Metrics are the gateway's metrics.
func (g *Gateway) Metrics() *telemetry.Metrics { return g.metrics }

// Close stops the gRPC server at once (open calls are cut: [Gateway.Serve]
// drains them first), the proxy's upstream connections, metrics and
// tracing (flushed), then closes the audit log, which writes every line
// it accepted, the prompt logs (likewise: no call is left to log), and
// last the budget ledger (the embedded store's last
// checkpoint). It returns the audit log's error when lines it accepted
// could not be written (logged too); the ledger's error is logged only: what
// it could not write stays in its journal, replayed at the next start.
// Close is idempotent.
func (g *Gateway) Close() error {
	g.closeOnce.Do(func() {
		if g.grpc != nil {
			g.grpc.Stop()
		}
		if g.proxy != nil {
			_ = g.proxy.Close()
		}
		if g.metrics != nil {
			_ = g.metrics.Shutdown(context.Background())
		}
		_ = g.stopTracing(context.Background())
		if g.audit != nil {
			if err := g.audit.Close(); err != nil {
				g.log.Error("audit log", "error", err.Error())
				g.closeErr = err
			}
		}
		if err := g.prompts.close(); err != nil {
			g.log.Error("prompt log", "error", err.Error())
		}
		g.cache.close()
		if g.led != nil {
			if err := g.led.Close(); err != nil {
				g.log.Error("budget ledger", "error", err.Error())
			}
		}
	})
	return g.closeErr
}

// adminKeySum is the SHA-256 of server.admin_key, nil when it is not set
// (the admin service and the console's writes are then turned away).
func adminKeySum(cfg *config.Config) (*[sha256.Size]byte, error) {
	if cfg.Server.AdminKey.IsZero() {
		return nil, nil
	}
	v, err := cfg.Server.AdminKey.Resolve()
	if err != nil {
		return nil, fmt.Errorf("server.admin_key: %w", err)
	}
	sum := sha256.Sum256([]byte(v))
	return &sum, nil
}

// readiness is /readyz's check: not ready while calls would be refused —
// the Redis ledger is down or lost its marker (metered calls), or the
// audit log cannot be written (every inference call). The cause is in the
// logs, not in this unauthenticated answer. nil (always ready) when the
// gateway has neither.
func readiness(led *ledger.Ledger, aw *auditlog.Writer) func() error {
	if led == nil && aw == nil {
		return nil
	}
	return func() error {
		if led != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if led.Ping(ctx) != nil {
				return errors.New("the budget ledger is unavailable: metered calls are refused")
			}
		}
		if aw != nil && aw.Healthy() != nil {
			return errors.New("the audit log cannot be written: inference calls are refused")
		}
		return nil
	}
}
