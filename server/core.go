package server

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/policy"
	"github.com/flexway/flexway/server/routing"
)

// Options configures a [Core].
type Options struct {
	// Backends by name; every name the routing table can plan must be here.
	Backends map[string]backends.Backend
	// Models lists each backend's configured models, for ListModels.
	Models map[string][]string
	// Aliases are the names of ai.aliases, listed by ListModels beside
	// the models (owned_by "flexway-alias").
	Aliases []string
	// Routes lists, for ListModels, the backends a caller's calls can be
	// planned on; the calls themselves arrive planned (call.State.Plan).
	Routes *routing.Table
	// Policies, when set, hides from ListModels the models and aliases
	// the caller's policies do not allow it to call (governance.models);
	// nil hides none.
	Policies *policy.Table
	// Logger receives one line per failed upstream attempt (never content);
	// nil discards.
	Logger *slog.Logger
	// Started is the Unix time reported as each model's `created`.
	Started time.Time
	// Tracer records a span per upstream attempt (fallbacks show as
	// further attempts); nil records none.
	Tracer trace.Tracer
	// MaxAnswerBytes bounds, in bytes, the streamed answer a response
	// json_schema or webhook rule buffers to judge it whole (the server
	// takes ai.vision.max_body_bytes, the bound of a request body: an
	// answer is held to the size a request may have); past it the stream
	// is refused. ≤ 0 is [DefaultMaxAnswerBytes].
	MaxAnswerBytes int64
	// Cache, when set, is the response cache ([Core.CacheLookup] is the
	// meter's lookup); nil: no call is cached.
	Cache *CacheOptions
}

// Core implements flexwayv1.ChatServiceServer, EmbeddingsServiceServer and
// ModelsServiceServer. It is safe for concurrent use.
type Core struct {
	flexwayv1.UnimplementedChatServiceServer
	flexwayv1.UnimplementedEmbeddingsServiceServer
	flexwayv1.UnimplementedModelsServiceServer

	opts Options
	log  *slog.Logger
	// vectors is the response cache's semantic index, made at the first
	// embedding.
	vectors vectors
	// flights coalesces the response cache's identical concurrent misses.
	flights cache.Flights
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
// interceptor made (server/metering), which the call was priced at. A
// call that reached the service unplanned is refused: the chain was wired
// without its planning step.
func plan(st *call.State) ([]string, error) {
	if len(st.Plan) == 0 {
		return nil, faults.New(faults.Internal, "the call was not planned")
	}
	return st.Plan, nil
}

// ListModels implements [flexwayv1.ModelsServiceServer.ListModels]: the
// models of every backend the caller's chat and embeddings calls can be
// planned on, each owned by the first backend listing it, and the
// aliases (ai.aliases, owned by "flexway-alias"), sorted by id; of them,
// only those the caller may call: a model m is listed iff the model rules
// of the policies of a chat call naming m (its listener, tenant and agent
// are this call's) do not refuse it. A shadow policy hides nothing.
func (c *Core) ListModels(ctx context.Context, _ *flexwayv1.ListModelsRequest) (*flexwayv1.ListModelsResponse, error) {
	st, err := state(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, capability := range []call.Capability{call.Chat, call.Embeddings} {
		p, err := c.opts.Routes.Plan(routing.Request{
			Tenant: st.Tenant, Agent: st.Agent, Capability: capability, Sensitive: st.Sensitive, Soft: st.Soft,
		})
		if err != nil {
			continue
		}
		for _, n := range p.Backends {
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
			if !c.allowed(st, m) {
				continue
			}
			resp.Data = append(resp.Data, &flexwayv1.Model{Id: m, Object: "model", Created: c.opts.Started.Unix(), OwnedBy: n})
		}
	}
	for _, a := range c.opts.Aliases {
		if !seen[a] {
			seen[a] = true
			if !c.allowed(st, a) {
				continue
			}
			resp.Data = append(resp.Data, &flexwayv1.Model{Id: a, Object: "model", Created: c.opts.Started.Unix(), OwnedBy: "flexway-alias"})
		}
	}
	sort.Slice(resp.Data, func(i, j int) bool { return resp.Data[i].Id < resp.Data[j].Id })
	return resp, nil
}

// allowed reports whether the caller of st may name model in a chat call:
// no enforced model rule of the policies such a call resolves refuses it.
func (c *Core) allowed(st *call.State, model string) bool {
	t := c.opts.Policies
	if t == nil || t.Empty() {
		return true
	}
	set := t.Resolve(policy.Key{Listener: st.Listener, Operation: config.OperationChatCompletions, Model: model, Tenant: st.Tenant, Agent: st.Agent})
	deny, _ := set.CheckModel(model)
	return deny == nil
}
