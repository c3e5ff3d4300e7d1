package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/interceptors"
	"github.com/flexway/flexway/interceptors/audit"
	"github.com/flexway/flexway/interceptors/identity"
	"github.com/flexway/flexway/interceptors/wirenull"
	"github.com/flexway/flexway/server"
	"github.com/flexway/flexway/server/admin"
	"github.com/flexway/flexway/server/auditlog"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/openai"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/grpccodec"
	"github.com/flexway/flexway/server/grpcproxy"
	"github.com/flexway/flexway/server/imagecheck"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/metering"
	"github.com/flexway/flexway/server/routing"
	"github.com/flexway/flexway/server/telemetry"
	"github.com/flexway/flexway/transcoder"
	"github.com/flexway/flexway/transcoder/console"
	"github.com/flexway/flexway/transcoder/inproc"
)

// gateway is a built Flexway: the gRPC server with its chain and services,
// the in-process channel the HTTP front calls the same core through (with
// the same chain), and the HTTP handler. Nothing listens until serve starts
// it.
//
// The in-process channel (transcoder/inproc) runs the services in the
// HTTP handler's goroutine — no HTTP/2 framing, no serialisation, no copy —
// and has no listener to close: an HTTP call in flight when shutdown begins
// still reaches the core after the gRPC listener stopped taking new calls.
type gateway struct {
	cfg     *config.Config
	grpc    *grpc.Server // serves server.grpc, with health and reflection
	health  *health.Server
	inproc  *inproc.Channel // for the HTTP front
	http    http.Handler
	proxy   *grpcproxy.Proxy // nil when no specialised-model service is routed
	metrics *telemetry.Metrics
	// stopTracing flushes and stops the tracer provider.
	stopTracing func(context.Context) error
	closeMu     sync.Once
}

// build wires a gateway from a loaded configuration: the same path for
// serve and validate. led, the budget ledger, and aw, the audit log, are
// nil for validate, which opens neither; the gateway then meters and
// audits nothing.
func build(cfg *config.Config, log *slog.Logger, led *ledger.Ledger, aw *auditlog.Writer) (*gateway, error) {
	bs, models, err := buildBackends(cfg)
	if err != nil {
		return nil, err
	}
	withBreakers(cfg, bs, nil)
	maxMsg := int(cfg.AI.Vision.MaxBodyBytes) + 1<<20
	proxy, err := buildProxy(cfg, maxMsg)
	if err != nil {
		return nil, err
	}
	proxied, frameSize := proxiedMetering(proxy)
	metrics, err := newMetrics(cfg, proxy)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	tp, stopTracing, err := newTracing(cfg)
	if err != nil {
		return nil, err
	}
	tracer := tp.Tracer("github.com/flexway/flexway")
	if err := observe(metrics, cfg, led, bs); err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	keys := newKeyring(cfg)
	routes := routingTable(cfg)
	accts := newAccounts(cfg)
	// Without a ledger (flexway validate) the meter plans calls and
	// meters none.
	meter := metering.New(metering.Config{
		Ledger:                led,
		Routes:                routes,
		Prices:                prices(cfg),
		ReserveOutputTokens:   cfg.AI.Budget.ReserveOutputTokens,
		ReserveTokensPerImage: cfg.AI.Vision.ReserveTokensPerImage,
		MaxOutputTokens:       cfg.AI.Budget.MaxOutputTokens,
		PromptOverheadTokens:  promptOverheads(cfg),
		Known:                 accts.Known,
		Proxied:               proxied,
		FrameSize:             frameSize,
		Tracer:                tracer,
		Logger:                log,
	})
	var adminSum *[sha256.Size]byte
	if !cfg.Server.AdminKey.IsZero() {
		v, err := cfg.Server.AdminKey.Resolve()
		if err != nil {
			return nil, fmt.Errorf("server.admin_key: %w", err)
		}
		sum := sha256.Sum256([]byte(v))
		adminSum = &sum
	}
	images, err := imagecheck.New(imagecheck.Policy{
		MaxImageBytes:  int64(cfg.AI.Vision.MaxImageBytes),
		AllowDataURIs:  cfg.AI.Vision.DataURIsAllowed(),
		AllowedOrigins: cfg.AI.Vision.AllowedOrigins,
	})
	if err != nil {
		return nil, fmt.Errorf("ai.vision: %w", err)
	}
	var auditing *audit.Config
	if aw != nil {
		auditing = &audit.Config{
			Writer: aw,
			Proxied: func(fullMethod string) (string, bool) {
				if proxy == nil {
					return "", false
				}
				m, ok := proxy.Lookup(fullMethod)
				return m.Feature, ok
			},
			Record: recordLine(metrics, accts),
			// A model no backend declares is recorded as "other", as the
			// metrics label it: a caller's model is not written whole.
			ModelRequested: metrics.Model,
			MeteredBy: func(backend string) string {
				if b, ok := cfg.AI.Backends[backend]; ok && b.Metering != "" {
					return string(b.Metering)
				}
				return "local"
			},
		}
	}
	chain, err := interceptors.New(interceptors.Config{
		Audit:           auditing,
		Vision:          images,
		Keys:            keys,
		OperationNamer:  newOperationNamer(),
		Sensitivity:     sensitivePolicy{cfg},
		SensitiveHeader: cfg.AI.SensitiveHeader,
		Budget:          meter,
		AdminKeySum:     adminSum,
		Logger:          log,
	})
	if err != nil {
		return nil, err
	}
	// With no metrics reader and no trace exporter, otelgrpc would measure
	// for nobody: it is left out of the call's path.
	instrumented := metrics.Exporting() || traced(cfg)
	// grpccodec's stream check first: no interceptor sees a streamed
	// message that did not unmarshal. Then the gRPC listener alone drops
	// the upstream's JSON nulls from the answers' extra_fields, outside the
	// shared chain: the HTTP front, on the in-process channel, writes them
	// back as the upstream sent them.
	opts := append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(wirenull.UnaryServerInterceptor),
		grpc.ChainStreamInterceptor(grpccodec.StreamServerInterceptor(), wirenull.StreamServerInterceptor),
	}, chain.ServerOptions()...)
	opts = append(opts, grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(64<<20))
	if instrumented {
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp),
			otelgrpc.WithMeterProvider(metrics.MeterProvider()), otelgrpc.WithFilter(knownMethod(proxy)))))
	}
	if proxy != nil {
		// Routed specialised-model services are proxied as raw frames,
		// through the same chain; the codec keeps flexway.v1 protobuf.
		opts = append(opts, grpc.ForceServerCodecV2(grpcproxy.Codec()), grpc.UnknownServiceHandler(proxy.Handler()))
	} else {
		opts = append(opts, grpc.ForceServerCodecV2(grpccodec.Codec()))
	}
	srv := grpc.NewServer(opts...)
	// Every service is registered through grpccodec, so that a unary
	// request that does not unmarshal is INVALID_ARGUMENT, not INTERNAL.
	gs := grpccodec.Registrar(srv)
	local := inproc.New(chain.UnaryInterceptor(), chain.StreamInterceptor())
	core := server.New(server.Options{
		Backends: bs,
		Models:   models,
		Routes:   routes,
		Logger:   log,
		Tracer:   tracer,
	})
	core.Register(gs)
	core.Register(local)
	if led != nil {
		as := admin.New(led, accts, func() []*flexwayv1.BackendState { return backendStates(cfg, bs) })
		flexwayv1.RegisterAdminServiceServer(gs, as)
		flexwayv1.RegisterAdminServiceServer(local, as)
	}
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	grpcproxy.RegisterReflection(gs, proxy)

	gw := &gateway{cfg: cfg, grpc: srv, health: hs, inproc: local, proxy: proxy, metrics: metrics}
	forward := []string{cfg.AI.SensitiveHeader}
	for _, r := range cfg.Identity.Relays {
		h := r.IdentityHeaders
		forward = append(forward, h.Tenant, h.Agent, h.Sensitive)
	}
	var admit func(context.Context) (context.Context, error)
	if led != nil {
		admit = func(ctx context.Context) (context.Context, error) {
			md, _ := metadata.FromOutgoingContext(ctx)
			id, err := identity.Identify(keys, md)
			if err != nil {
				return ctx, err
			}
			return meter.Admit(ctx, id.Tenant, id.Agent)
		}
	}
	adminHTTP, err := transcoder.NewAdmin(local)
	if err != nil {
		return nil, err
	}
	var ready func() error
	if led != nil || aw != nil {
		// Not ready while calls would be refused: the Redis ledger is down
		// or lost its marker (metered calls), or the audit log cannot be
		// written (every inference call). The cause is in the logs, not in
		// this unauthenticated answer.
		ready = func() error {
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
	var observeHTTP func(*http.Request, int, time.Duration)
	if metrics.Exporting() {
		observeHTTP = metrics.ObserveHTTP
	}
	rest := http.NewServeMux()
	rest.Handle("GET /metrics", metrics.Handler())
	rest.Handle("/", adminHTTP)
	con := console.Handler(console.Options{AdminKeySum: adminSum, Soft: cfg.AI.Budget.Soft, Upstream: rest})
	rest.Handle("/console", con)
	rest.Handle("/console/", con)
	gw.http, err = transcoder.New(transcoder.Options{
		Ready:        ready,
		Fallback:     rest,
		Admit:        admit,
		Conn:         local,
		MaxBodyBytes: int64(cfg.AI.Vision.MaxBodyBytes),
		// server.max_inflight_body_bytes
		MaxInflightBodyBytes: int64(cfg.Server.MaxInflightBodyBytes),
		StreamIdleTimeout: func(backend string) time.Duration {
			return cfg.AI.Backends[backend].IdleTimeout.Std()
		},
		ForwardHeaders: forward,
		Logger:         log,
		Observe:        observeHTTP,
	})
	if err != nil {
		return nil, err
	}
	if traced(cfg) {
		// Spans only: the HTTP server metric is recorded by the front's
		// access hook (Observe above), which costs a fraction of otelhttp's.
		gw.http = otelhttp.NewHandler(gw.http, "flexway.http", otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()))
	}
	gw.stopTracing = stopTracing
	return gw, nil
}

// close stops the gRPC server at once.
func (g *gateway) close() {
	g.closeMu.Do(func() {
		g.grpc.Stop()
		if g.proxy != nil {
			_ = g.proxy.Close()
		}
		_ = g.metrics.Shutdown(context.Background())
		_ = g.stopTracing(context.Background())
	})
}

// buildBackends builds every kind: openai and kind: relay backend (a relay
// speaks the same API). kind: grpc backends are proxied, not built here.
func buildBackends(cfg *config.Config) (map[string]backends.Backend, map[string][]string, error) {
	bs := map[string]backends.Backend{}
	models := map[string][]string{}
	names := make([]string, 0, len(cfg.AI.Backends))
	for n := range cfg.AI.Backends {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		b := cfg.AI.Backends[name]
		if b.Kind == config.KindGRPC {
			continue
		}
		auth := openai.Auth{Type: string(b.Auth.Type), Header: b.Auth.Name, TokenFile: b.Auth.Path}
		if !b.Auth.Secret.IsZero() {
			v, err := b.Auth.Secret.Resolve()
			if err != nil {
				return nil, nil, fmt.Errorf("ai.backends.%s.auth.secret: %w", name, err)
			}
			auth.Secret = v
		}
		o := openai.Options{
			Name:         name,
			URL:          b.URL,
			Auth:         auth,
			TLS:          openai.TLS{CAFile: b.TLS.CAFile, CertFile: b.TLS.CertFile, KeyFile: b.TLS.KeyFile},
			Models:       b.Models,
			DefaultModel: b.DefaultModel,
			Timeout:      b.Timeout.Std(),
			IdleTimeout:  b.IdleTimeout.Std(),
			MeteredBy:    string(b.Metering),
		}
		if b.Kind == config.KindRelay {
			// Only a relay passes the caller's identity, from the call
			// state, under the names it declares.
			h := b.IdentityHeaders
			o.IdentityHeaders = openai.IdentityHeaders{Tenant: h.Tenant, Agent: h.Agent, Sensitive: h.Sensitive}
		}
		ob, err := openai.New(o)
		if err != nil {
			return nil, nil, fmt.Errorf("ai.backends.%s: %w", name, err)
		}
		bs[name] = ob
		models[name] = b.Models
	}
	return bs, models, nil
}

// routingTable is the routing part of cfg.
func routingTable(cfg *config.Config) *routing.Table {
	t := &routing.Table{
		Default:          cfg.AI.Backend,
		SensitiveBackend: cfg.AI.SensitiveBackend,
		SoftBackend:      cfg.AI.Budget.SoftBackend,
		Tenants:          map[string]routing.Tenant{},
		Capabilities:     map[call.Capability]string{},
		Backends:         map[string]routing.Backend{},
	}
	for c, b := range cfg.AI.Capabilities {
		t.Capabilities[call.Capability(c)] = b
	}
	for name, tc := range cfg.AI.Tenants {
		rt := routing.Tenant{Backend: tc.Backend, Agents: map[string]string{}}
		for a, ac := range tc.Agents {
			rt.Agents[a] = ac.Backend
		}
		t.Tenants[name] = rt
	}
	for name, b := range cfg.AI.Backends {
		// A relay that cannot pass the sensitive flag on is external for
		// routing: the peer could send a sensitive call outside.
		external := b.IsExternal() || (b.Kind == config.KindRelay && b.IdentityHeaders.Sensitive == "")
		rb := routing.Backend{External: external, Fallback: b.Fallback}
		for _, c := range b.Capabilities {
			rb.Capabilities = append(rb.Capabilities, call.Capability(c))
		}
		t.Backends[name] = rb
	}
	return t
}

// sensitivePolicy reads ai.tenants.T.sensitive and
// ai.tenants.T.agents.A.sensitive.
type sensitivePolicy struct{ cfg *config.Config }

// Sensitive implements [sensitivity.Policy.Sensitive].
func (p sensitivePolicy) Sensitive(tenant, agent string) bool {
	t, ok := p.cfg.AI.Tenants[tenant]
	if !ok {
		return false
	}
	return t.Sensitive || (agent != "" && t.Agents[agent].Sensitive)
}

// accounts are the tenants and agents that exist: declared in ai.tenants,
// or named by an API key.
type accounts map[string]map[string]bool // tenant → its agents

func newAccounts(cfg *config.Config) accounts {
	a := accounts{}
	add := func(tenant, agent string) {
		if a[tenant] == nil {
			a[tenant] = map[string]bool{}
		}
		if agent != "" {
			a[tenant][agent] = true
		}
	}
	for name, t := range cfg.AI.Tenants {
		add(name, "")
		for agent := range t.Agents {
			add(name, agent)
		}
	}
	for _, k := range cfg.Identity.APIKeys {
		add(k.Tenant, k.Agent)
	}
	return a
}

// List implements [admin.Accounts.List].
func (a accounts) List() []ledger.Account {
	var out []ledger.Account
	for tenant, agents := range a {
		out = append(out, ledger.Account{Tenant: tenant})
		for agent := range agents {
			out = append(out, ledger.Account{Tenant: tenant, Agent: agent})
		}
	}
	slices.SortFunc(out, func(x, y ledger.Account) int {
		if c := strings.Compare(x.Tenant, y.Tenant); c != 0 {
			return c
		}
		return strings.Compare(x.Agent, y.Agent)
	})
	return out
}

// Known implements [admin.Accounts.Known].
func (a accounts) Known(tenant, agent string) bool {
	agents, ok := a[tenant]
	return ok && (agent == "" || agents[agent])
}

// keyring resolves API keys and relay keys by their SHA-256.
type keyring map[[sha256.Size]byte]identity.Key

var _ identity.Keyring = keyring(nil)

// Lookup implements [identity.Keyring.Lookup].
func (k keyring) Lookup(sum [sha256.Size]byte) (identity.Key, bool) {
	key, ok := k[sum]
	return key, ok
}

func newKeyring(cfg *config.Config) keyring {
	k := keyring{}
	for _, a := range cfg.Identity.APIKeys {
		k[a.Hash()] = identity.Key{Name: a.Name, Tenant: a.Tenant, Agent: a.Agent}
	}
	for _, r := range cfg.Identity.Relays {
		h := r.IdentityHeaders
		k[r.Hash()] = identity.Key{Name: r.Name, Relay: &identity.RelayHeaders{
			Tenant: strings.ToLower(h.Tenant), Agent: strings.ToLower(h.Agent), Sensitive: strings.ToLower(h.Sensitive),
		}}
	}
	return k
}

// newOperationNamer names a method by its (flexway.v1.operation).name
// option, else its full method name; names are cached, so the descriptor
// registry is read once per method.
func newOperationNamer() identity.OperationNamer {
	var cache sync.Map // full method → name
	return func(fullMethod string) string {
		if v, ok := cache.Load(fullMethod); ok {
			return v.(string)
		}
		name := operationName(fullMethod)
		cache.Store(fullMethod, name)
		return name
	}
}

// operationName reads the method's (flexway.v1.operation).name.
func operationName(fullMethod string) string {
	name := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(fullMethod, "/"), "/", "."))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return fullMethod
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return fullMethod
	}
	op, _ := proto.GetExtension(md.Options(), flexwayv1.E_Operation).(*flexwayv1.Operation)
	if op.GetName() != "" {
		return op.GetName()
	}
	return fullMethod
}
