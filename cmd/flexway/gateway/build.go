package gateway

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/interceptors"
	"github.com/flexway/flexway/interceptors/audit"
	"github.com/flexway/flexway/interceptors/identity"
	"github.com/flexway/flexway/interceptors/wirenull"
	"github.com/flexway/flexway/server"
	"github.com/flexway/flexway/server/admin"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/grpccodec"
	"github.com/flexway/flexway/server/grpcproxy"
	"github.com/flexway/flexway/server/imagecheck"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/metering"
	"github.com/flexway/flexway/server/policy"
	"github.com/flexway/flexway/server/routing"
	"github.com/flexway/flexway/server/routing/alias"
	"github.com/flexway/flexway/server/telemetry"
	"github.com/flexway/flexway/transcoder"
	"github.com/flexway/flexway/transcoder/console"
	"github.com/flexway/flexway/transcoder/inproc"
)

// build wires g from its configuration, its ledger and its audit log
// (either may be nil: the gateway then meters, or audits, nothing).
func (g *Gateway) build(o Options) error {
	cfg, log, led := g.cfg, g.log, g.led
	credMeter := &credentialMeter{}
	bs, models, err := buildBackends(cfg, log, credMeter)
	if err != nil {
		return err
	}
	// Checked before the breakers wrap the backends: a breaker.Backend
	// has no CheckChat of its own, and the check sends nothing.
	check := checkChat(bs)
	pools := credentialPools(bs)
	withBreakers(cfg, bs, nil)
	maxMsg := int(cfg.AI.Vision.MaxBodyBytes) + 1<<20
	if g.proxy, err = buildProxy(cfg, maxMsg); err != nil {
		return err
	}
	if g.metrics, err = newMetrics(cfg, g.proxy); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	credMeter.m.Store(g.metrics)
	tp, stopTracing, err := newTracing(cfg, o.SpanExporter, g.version)
	if err != nil {
		return err
	}
	g.stopTracing = stopTracing
	tracer := tp.Tracer("github.com/flexway/flexway")
	if err := observe(g.metrics, cfg, led, bs); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	if err := g.prompts.observe(g.metrics); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	var keys identity.Keyring = newKeyring(cfg)
	if o.wrapKeys != nil {
		keys = o.wrapKeys(keys)
	}
	routes := routingTable(cfg)
	accts := newAccounts(cfg)
	aliases, err := alias.Compile(cfg)
	if err != nil {
		return fmt.Errorf("ai.aliases: %w", err)
	}
	policies, err := policyTable(cfg)
	if err != nil {
		return err
	}
	if g.cache, err = openCache(cfg, log); err != nil {
		return err
	}
	core := server.New(server.Options{Backends: bs, Models: models, Aliases: aliases.Names(), Routes: routes, Policies: policies, Logger: log, Tracer: tracer,
		MaxAnswerBytes: int64(cfg.AI.Vision.MaxBodyBytes), Cache: g.cache.options(cfg)})
	var lookup func(context.Context, *call.State, any, func() error) (int64, bool, error)
	if g.cache != nil {
		lookup = core.CacheLookup
	}
	meter := newMeter(cfg, led, routes, accts, policies, check, pinEmbeddings(cfg, aliasResolver(aliases, routes)), lookup, g.proxy, tracer, log)
	adminSum, err := adminKeySum(cfg)
	if err != nil {
		return err
	}
	images, err := imagecheck.New(imagecheck.Policy{
		MaxImageBytes:  int64(cfg.AI.Vision.MaxImageBytes),
		AllowDataURIs:  cfg.AI.Vision.DataURIsAllowed(),
		AllowedOrigins: cfg.AI.Vision.AllowedOrigins,
	})
	if err != nil {
		return fmt.Errorf("ai.vision: %w", err)
	}
	chain, err := interceptors.New(interceptors.Config{
		Audit:           g.auditing(accts),
		Governance:      governing(cfg, policies, g.proxy, routes, aliases),
		Vision:          images,
		Keys:            keys,
		OperationNamer:  newOperationNamer(),
		Sensitivity:     sensitivePolicy{cfg},
		SensitiveHeader: cfg.AI.SensitiveHeader,
		Budget:          meter,
		PromptLog:       g.prompts.interceptor(policies),
		AdminKeySum:     adminSum,
		Logger:          log,
	})
	if err != nil {
		return err
	}
	g.grpc = newGRPCServer(cfg, chain, g.proxy, g.metrics, tp, maxMsg)
	// Every service is registered through grpccodec, so that a unary
	// request that does not unmarshal is INVALID_ARGUMENT, not INTERNAL.
	gs := grpccodec.Registrar(g.grpc)
	g.inproc = inproc.New(chain.UnaryInterceptor(), chain.StreamInterceptor())
	core.Register(gs)
	core.Register(g.inproc)
	g.cache.serve(flexwayv1.NewEmbeddingsServiceClient(g.inproc), core)
	if led != nil {
		as := admin.New(led, accts, func() []*flexwayv1.BackendState { return backendStates(cfg, routes, bs, pools) },
			policies, slices.Collect(maps.Keys(cfg.AI.GRPC.Services)))
		flexwayv1.RegisterAdminServiceServer(gs, as)
		flexwayv1.RegisterAdminServiceServer(g.inproc, as)
	}
	g.health = health.NewServer()
	healthpb.RegisterHealthServer(gs, g.health)
	grpcproxy.RegisterReflection(gs, g.proxy)

	// The HTTP front's check before the body: the caller it identifies
	// travels in the admission (an in-process context value), so that
	// the identity interceptor does not look the key up again.
	var admit func(context.Context, string) (context.Context, error)
	if led != nil {
		admit = func(ctx context.Context, operation string) (context.Context, error) {
			md, _ := metadata.FromOutgoingContext(ctx)
			id, err := identity.Identify(keys, md)
			if err != nil {
				return ctx, err
			}
			return meter.Admit(ctx, id, operation)
		}
	}
	g.http, err = newHTTPFront(cfg, g.inproc, g.metrics, adminSum, admit, readiness(led, g.audit), tp, g.cache.keyerOf(), log)
	return err
}

// newMeter is the metering policy over the ledger. Without a ledger
// (flexway validate, the no-ledger benchmark) it plans calls and meters
// none: every call leaves the chain with its plan. The estimate's knobs are the configuration's
// (ai.budget.reserve_output_tokens and max_output_tokens,
// ai.vision.reserve_tokens_per_image, each backend's price and
// prompt_overhead_tokens); proxied methods are metered as the proxy's
// table says; check is the meter's check of a chat request against each
// planned backend ([checkChat]); policies are the compiled ai.policies,
// whose budgets the pre-body check holds; lookup, when set, is the
// response cache's lookup (a hit is charged its hit_price only). The
// budget wiring is this one function.
func newMeter(cfg *config.Config, led *ledger.Ledger, routes *routing.Table, accts accounts, policies *policy.Table,
	check func(string, *flexwayv1.CreateChatCompletionRequest) error,
	resolveAlias func(context.Context, *call.State, any) *routing.AliasRoute,
	lookup func(context.Context, *call.State, any, func() error) (int64, bool, error),
	p *grpcproxy.Proxy, tracer trace.Tracer, log *slog.Logger) *metering.Meter {
	proxied, frameSize := proxiedMetering(p)
	return metering.New(metering.Config{
		Ledger:                led,
		Routes:                routes,
		Prices:                prices(cfg),
		Check:                 check,
		ResolveAlias:          resolveAlias,
		Cache:                 lookup,
		ReserveOutputTokens:   cfg.AI.Budget.ReserveOutputTokens,
		ReserveTokensPerImage: cfg.AI.Vision.ReserveTokensPerImage,
		MaxOutputTokens:       cfg.AI.Budget.MaxOutputTokens,
		PromptOverheadTokens:  promptOverheads(cfg),
		BackendOutputTokens:   backendOutputTokens(cfg),
		Known:                 accts.Known,
		Proxied:               proxied,
		FrameSize:             frameSize,
		Policies:              policies,
		Tracer:                tracer,
		Logger:                log,
	})
}

// checkChat is the meter's [metering.Config.Check] over the built
// backends bs, before the breakers wrap them: a backend that implements backends.Checker (the anthropic,
// gemini and a2a kinds) is asked whether its wire format can express the
// request; any other, and a name bs does not hold (a grpc backend, which
// serves no chat), can express every request. Nil when no backend of bs
// checks, so that the meter asks nothing.
func checkChat(bs map[string]backends.Backend) func(string, *flexwayv1.CreateChatCompletionRequest) error {
	checkers := map[string]backends.Checker{}
	for name, b := range bs {
		if c, ok := b.(backends.Checker); ok {
			checkers[name] = c
		}
	}
	if len(checkers) == 0 {
		return nil
	}
	return func(name string, req *flexwayv1.CreateChatCompletionRequest) error {
		if c, ok := checkers[name]; ok {
			return c.CheckChat(req)
		}
		return nil
	}
}

// auditing is the audit interceptor's configuration, nil without an
// audit log. A model no backend declares is recorded as "other", as the
// metrics label it: a caller's model is not written whole. A backend's
// metered_by is its ai.backends.NAME.metering, "local" when unset.
func (g *Gateway) auditing(accts accounts) *audit.Config {
	if g.audit == nil {
		return nil
	}
	cfg, proxy := g.cfg, g.proxy
	return &audit.Config{
		Writer: g.audit,
		Proxied: func(fullMethod string) (string, bool) {
			if proxy == nil {
				return "", false
			}
			m, ok := proxy.Lookup(fullMethod)
			return m.Feature, ok
		},
		Record:         recordLine(g.metrics, accts),
		ModelRequested: g.metrics.Model,
		MeteredBy: func(backend string) string {
			if b, ok := cfg.AI.Backends[backend]; ok && b.Metering != "" {
				return string(b.Metering)
			}
			return "local"
		},
	}
}

// newGRPCServer is the gRPC server with the chain. grpccodec's stream
// check comes first: no interceptor sees a streamed message that did not
// unmarshal. Then the gRPC listener alone drops the upstream's JSON nulls
// from the answers' extra_fields, outside the shared chain: the HTTP
// front, on the in-process channel, writes them back as the upstream sent
// them. Messages are bounded at maxMsg received (the body bound plus
// 1 MiB of framing) and 64 MiB sent. With no metrics reader and no trace
// exporter, otelgrpc would measure for nobody: it is left out of the
// call's path.
func newGRPCServer(cfg *config.Config, chain *interceptors.Chain, proxy *grpcproxy.Proxy, metrics *telemetry.Metrics, tp trace.TracerProvider, maxMsg int) *grpc.Server {
	opts := append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(wirenull.UnaryServerInterceptor),
		grpc.ChainStreamInterceptor(grpccodec.StreamServerInterceptor(), wirenull.StreamServerInterceptor),
	}, chain.ServerOptions()...)
	opts = append(opts, grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(64<<20))
	if metrics.Exporting() || traced(tp) {
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
	return grpc.NewServer(opts...)
}

// newHTTPFront is the HTTP handler: the OpenAI /v1/* front on the
// in-process channel, with /metrics, admin REST and the console behind it.
// The headers forwarded to the core are ai.sensitive_header, every
// relay's identity_headers and the headers A/B aliases are sticky on. Each backend's stream idle timeout is its
// ai.backends.NAME.idle_timeout. With tracing on, otelhttp adds spans
// only: the HTTP server metric is the front's access hook, which costs a
// fraction of otelhttp's. keyer, when set, keys chat bodies for the
// response cache.
func newHTTPFront(cfg *config.Config, local *inproc.Channel, metrics *telemetry.Metrics, adminSum *[sha256.Size]byte,
	admit func(context.Context, string) (context.Context, error), ready func() error, tp trace.TracerProvider, keyer *cache.Keyer, log *slog.Logger) (http.Handler, error) {
	forward := []string{cfg.AI.SensitiveHeader}
	for _, r := range cfg.Identity.Relays {
		h := r.IdentityHeaders
		forward = append(forward, h.Tenant, h.Agent, h.Sensitive)
	}
	for _, a := range cfg.AI.Aliases {
		// An A/B alias sticky on a header reads it from the call's
		// metadata.
		if subject, name, _ := a.StickySubject(); subject == "header" && name != "" {
			forward = append(forward, name)
		}
	}
	adminHTTP, err := transcoder.NewAdmin(local)
	if err != nil {
		return nil, err
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
	h, err := transcoder.New(transcoder.Options{
		Ready:                ready,
		Fallback:             rest,
		Admit:                admit,
		Conn:                 local,
		MaxBodyBytes:         int64(cfg.AI.Vision.MaxBodyBytes),
		MaxInflightBodyBytes: int64(cfg.Server.MaxInflightBodyBytes),
		StreamIdleTimeout: func(backend string) time.Duration {
			return cfg.AI.Backends[backend].IdleTimeout.Std()
		},
		ForwardHeaders: forward,
		Logger:         log,
		Observe:        observeHTTP,
		CacheKeyer:     keyer,
	})
	if err != nil {
		return nil, err
	}
	if traced(tp) {
		h = otelhttp.NewHandler(h, "flexway.http", otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()))
	}
	return h, nil
}
