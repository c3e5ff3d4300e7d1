package gateway

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc/stats"

	"github.com/flexway/flexway/server/auditlog"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/breaker"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/grpcproxy"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/telemetry"
)

// newMetrics builds the gateway's metrics; label values are the
// configuration's names only (tenants, agents, backends, models, the
// proxied methods and their features), so that a caller cannot mint a
// series.
func newMetrics(cfg *config.Config, p *grpcproxy.Proxy) (*telemetry.Metrics, error) {
	o := telemetry.Options{Prometheus: cfg.Telemetry.PrometheusEnabled()}
	o.Operations, o.Features = proxiedLabels(p)
	readers, err := otlpMetricReaders(cfg)
	if err != nil {
		return nil, err
	}
	o.Readers = readers
	o.Views = boundedServerMetrics()
	acc := newAccounts(cfg)
	for tenant, agents := range acc {
		o.Tenants = append(o.Tenants, tenant)
		for a := range agents {
			o.Agents = append(o.Agents, a)
		}
	}
	for name, b := range cfg.AI.Backends {
		o.Backends = append(o.Backends, name)
		o.Models = append(o.Models, b.Models...)
		if b.DefaultModel != "" {
			o.Models = append(o.Models, b.DefaultModel)
		}
	}
	o.Arms = []string{"below", "above"}
	for name, a := range cfg.AI.Aliases {
		// An alias is a model name a caller may request.
		o.Models = append(o.Models, name)
		o.Aliases = append(o.Aliases, name)
		// A target's model id is what the upstream serves.
		o.Models = append(o.Models, a.Below.Model, a.Above.Model)
		for i, t := range a.Targets {
			o.Models = append(o.Models, t.Model)
			o.Arms = append(o.Arms, strconv.Itoa(i))
			if t.Arm != "" {
				o.Arms = append(o.Arms, t.Arm)
			}
		}
	}
	for _, l := range [][]string{o.Tenants, o.Agents, o.Backends, o.Models} {
		sort.Strings(l)
	}
	return telemetry.New(o)
}

// proxiedLabels are the proxied methods' full names and features.
func proxiedLabels(p *grpcproxy.Proxy) (ops, features []string) {
	if p == nil {
		return nil, nil
	}
	for _, m := range p.Methods() {
		ops = append(ops, m.FullMethod)
		if m.Feature != "" && !slices.Contains(features, m.Feature) {
			features = append(features, m.Feature)
		}
	}
	return ops, features
}

// recordLine turns an audit line into the call's metrics (the guardrail
// verdicts included: without an audit log they are not counted either). An agent the
// line's tenant does not declare (a relay may pass any name) is labelled
// telemetry.Other, even when another tenant declares the name.
func recordLine(m *telemetry.Metrics, accts accounts) func(ctx context.Context, l *auditlog.Line) {
	return func(ctx context.Context, l *auditlog.Line) {
		model := l.ModelServed
		if model == "" {
			model = l.ModelRequested
		}
		agent := l.Agent
		if agent != "" && !accts.Known(l.Tenant, agent) {
			agent = telemetry.Other
		}
		m.RecordCall(ctx, telemetry.Call{
			Operation: l.Operation, Tenant: l.Tenant, Agent: agent, Backend: l.Backend, Model: model,
			Capability: l.Capability, MeteredBy: l.MeteredBy, Feature: l.Feature, Outcome: l.Outcome, Alias: l.Alias, Arm: l.Arm,
			InputTokens: l.InputTokens, OutputTokens: l.OutputTokens, CostNanoEUR: l.CostNanoEUR,
			CacheReadTokens: l.CacheReadTokens, CacheWriteTokens: l.CacheWriteTokens,
		})
		if d := l.WouldDeny; d.Policy != "" {
			m.PolicyWouldDeny(d.Policy, d.Reason)
		}
		// Both phases' verdicts, counted once each, here where the call
		// has ended: the response phase records its own in the core.
		for _, v := range l.Guardrails {
			m.GuardrailMatch(v.Policy, v.Rule, v.Phase, v.Action)
		}
	}
}

// observe registers the budget and circuit gauges.
func observe(m *telemetry.Metrics, cfg *config.Config, led *ledger.Ledger, bs map[string]backends.Backend) error {
	acc := newAccounts(cfg)
	if led != nil {
		err := m.ObserveBudgets(func(ctx context.Context) []telemetry.BudgetReading {
			var out []telemetry.BudgetReading
			read := func(a ledger.Account) {
				caps, err := led.Usage(ctx, a)
				if err != nil {
					return
				}
				for _, c := range caps {
					out = append(out, telemetry.BudgetReading{Tenant: a.Tenant, Agent: a.Agent, Cap: string(c.Cap), Unit: string(c.Unit),
						Limit: c.Limit, Committed: c.Committed, Reserved: c.Reserved})
				}
			}
			for tenant, agents := range acc {
				read(ledger.Account{Tenant: tenant})
				for a := range agents {
					read(ledger.Account{Tenant: tenant, Agent: a})
				}
			}
			return out
		})
		if err != nil {
			return err
		}
	}
	return m.ObserveCircuits(func() map[string]string {
		out := map[string]string{}
		for name, b := range bs {
			if w, ok := b.(*breaker.Backend); ok {
				out[name] = w.State()
			}
		}
		return out
	})
}

// boundedServerMetrics keeps, of otelgrpc's server metrics, only
// attributes whose values the gateway bounds: the gRPC service, method and
// status code (otelgrpc instruments only the gateway's own and routed
// methods, see knownMethod). The HTTP server metric is Flexway's own
// (telemetry.Metrics.ObserveHTTP), bounded at the source; otelhttp, when
// tracing is on, records no metrics.
func boundedServerMetrics() []sdkmetric.View {
	grpcKeys := attribute.NewAllowKeysFilter("rpc.system", "rpc.service", "rpc.method", "rpc.grpc.status_code")
	return []sdkmetric.View{
		sdkmetric.NewView(sdkmetric.Instrument{Scope: instrumentation.Scope{Name: "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"}},
			sdkmetric.Stream{AttributeFilter: grpcKeys}),
	}
}

// knownMethod is otelgrpc's filter: only the gateway's services and the
// proxied, routed methods are instrumented, so that calls to invented
// methods (UNIMPLEMENTED) make no series.
func knownMethod(p *grpcproxy.Proxy) func(*stats.RPCTagInfo) bool {
	return func(info *stats.RPCTagInfo) bool {
		m := info.FullMethodName
		if strings.HasPrefix(m, "/flexway.v1.") || strings.HasPrefix(m, "/grpc.health.v1.") {
			return true
		}
		if p != nil {
			_, ok := p.Lookup(m)
			return ok
		}
		return false
	}
}
