package server

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/routing"
)

// Header metadata keys the services set; the HTTP front writes them as
// response headers.
const (
	// HeaderDegraded is set to "backend-fallback" when a fallback served.
	HeaderDegraded = "flexway-degraded"
)

// Options configures a [Core].
type Options struct {
	// Backends by name; every name the routing table can plan must be here.
	Backends map[string]backends.Backend
	// Models lists each backend's configured models, for ListModels.
	Models map[string][]string
	// Routes plans every call.
	Routes *routing.Table
	// Logger receives one line per failed upstream attempt (never content);
	// nil discards.
	Logger *slog.Logger
	// Started is the Unix time reported as each model's `created`.
	Started time.Time
	// Tracer records a span per upstream attempt (fallbacks show as
	// further attempts); nil records none.
	Tracer trace.Tracer
}

// Core implements flexwayv1.ChatServiceServer, EmbeddingsServiceServer and
// ModelsServiceServer. It is safe for concurrent use.
type Core struct {
	flexwayv1.UnimplementedChatServiceServer
	flexwayv1.UnimplementedEmbeddingsServiceServer
	flexwayv1.UnimplementedModelsServiceServer

	opts Options
	log  *slog.Logger
}

// New returns a core over opts.
func New(opts Options) *Core {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Started.IsZero() {
		opts.Started = time.Now()
	}
	if opts.Tracer == nil {
		opts.Tracer = noop.NewTracerProvider().Tracer("")
	}
	return &Core{opts: opts, log: log}
}

// Register registers the core's services on s.
func (c *Core) Register(s grpc.ServiceRegistrar) {
	flexwayv1.RegisterChatServiceServer(s, c)
	flexwayv1.RegisterEmbeddingsServiceServer(s, c)
	flexwayv1.RegisterModelsServiceServer(s, c)
}

// state returns the call's state; a call that bypassed the identity
// interceptor is refused.
func state(ctx context.Context) (*call.State, error) {
	st := call.FromContext(ctx)
	if st == nil {
		return nil, faults.New(faults.InvalidAPIKey, "missing API key")
	}
	return st, nil
}

// plan returns the backends to try for the call: the plan the budget
// interceptor priced the call at, else the routing table's.
func (c *Core) plan(st *call.State, capability call.Capability) ([]string, error) {
	if st.Plan != nil {
		return st.Plan, nil
	}
	p, err := c.opts.Routes.Plan(routing.Request{
		Tenant: st.Tenant, Agent: st.Agent, Capability: capability, Sensitive: st.Sensitive, Soft: st.Soft,
	})
	if err != nil {
		return nil, err
	}
	return p.Backends, nil
}

// canFallBack reports whether a failed attempt may be followed by the next
// backend: connection errors, 5xx, timeouts and open circuits, never a 4xx
// (an upstream 401 or 403, [backends.ErrUpstreamAuth], included, although
// it is reported as an upstream error) or a cancellation.
func canFallBack(err error) bool { return backends.Unavailable(err) }

// attempt logs a failed attempt with its cause; the cause never reaches the
// client.
func (c *Core) attempt(ctx context.Context, st *call.State, backend string, err error) {
	fe := faults.As(err)
	attrs := []any{"request_id", st.RequestID, "backend", backend, "reason", string(fe.Reason)}
	if fe.Err != nil {
		attrs = append(attrs, "cause", fe.Err.Error())
	}
	if fe.Reason == faults.Canceled {
		// The caller went away: not the backend's failure.
		c.log.InfoContext(ctx, "call canceled by the caller", attrs...)
		return
	}
	c.log.WarnContext(ctx, "upstream attempt failed", attrs...)
}

// startAttempt starts the span of the call's attempt number i (from 0)
// on backend name.
func (c *Core) startAttempt(ctx context.Context, name string, i int) (context.Context, trace.Span) {
	return c.opts.Tracer.Start(ctx, "flexway.upstream_attempt", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("flexway.backend", name), attribute.Int("flexway.attempt", i+1), attribute.Bool("flexway.fallback", i > 0)))
}

// endAttempt ends an attempt's span with its error, if any: its reason,
// never its message.
func endAttempt(span trace.Span, err error) {
	if err != nil {
		reason := string(faults.As(err).Reason)
		span.SetAttributes(attribute.String("flexway.reason", reason))
		span.SetStatus(codes.Error, reason)
	}
	span.End()
}

// setServedHeaders sends the header metadata of a served call.
func setServedHeaders(ctx context.Context, fallback bool) {
	if fallback {
		_ = grpc.SetHeader(ctx, metadata.Pairs(HeaderDegraded, "backend-fallback"))
	}
}

// ListModels implements [flexwayv1.ModelsServiceServer.ListModels]: the
// models of every backend the caller's chat and embeddings calls can be
// planned on, sorted by id, each owned by the first backend listing it.
func (c *Core) ListModels(ctx context.Context, _ *flexwayv1.ListModelsRequest) (*flexwayv1.ListModelsResponse, error) {
	st, err := state(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, capability := range []call.Capability{call.Chat, call.Embeddings} {
		plan, err := c.plan(st, capability)
		if err != nil {
			continue
		}
		for _, n := range plan {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	seen := map[string]bool{}
	resp := &flexwayv1.ListModelsResponse{Object: "list"}
	for _, n := range names {
		for _, m := range c.opts.Models[n] {
			if seen[m] {
				continue
			}
			seen[m] = true
			resp.Data = append(resp.Data, &flexwayv1.Model{Id: m, Object: "model", Created: c.opts.Started.Unix(), OwnedBy: n})
		}
	}
	sort.Slice(resp.Data, func(i, j int) bool { return resp.Data[i].Id < resp.Data[j].Id })
	return resp, nil
}
