package gateway

import (
	"github.com/flexway/flexway/interceptors/governance"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/grpcproxy"
	"github.com/flexway/flexway/server/policy"
	"github.com/flexway/flexway/server/routing"
	"github.com/flexway/flexway/server/routing/alias"
)

// policyTable compiles ai.policies, which cfg's validation accepted; its
// error names a guardrail rule that does not compile.
func policyTable(cfg *config.Config) (*policy.Table, error) {
	return policy.Compile(cfg.AI.Policies)
}

// governing is the governance interceptor's configuration over the
// compiled policies: a proxied method's backend is the one its service is
// routed to (ai.grpc.services), which its policies' backend rules must
// allow.
func governing(cfg *config.Config, t *policy.Table, p *grpcproxy.Proxy, routes *routing.Table, aliases *alias.Table) *governance.Config {
	c := &governance.Config{Policies: t, ServedModel: servedModel(cfg, routes, aliases)}
	if p != nil {
		c.ProxiedBackend = func(fullMethod string) (string, bool) {
			m, ok := p.Lookup(fullMethod)
			return m.Backend, ok
		}
	}
	return c
}

// servedModel is [governance.Config.ServedModel] over cfg: a model no
// alias names is served, by the first backend of the call's plan (as
// routing plans it before the budget: tenant, agent, capability,
// sensitivity), as itself when that backend lists it or lists no models,
// else as its default_model (server/backends/upstream's mapping).
func servedModel(cfg *config.Config, routes *routing.Table, aliases *alias.Table) func(*call.State, string) string {
	listed := make(map[string]map[string]bool, len(cfg.AI.Backends))
	for name, b := range cfg.AI.Backends {
		if len(b.Models) == 0 {
			continue
		}
		m := make(map[string]bool, len(b.Models))
		for _, id := range b.Models {
			m[id] = true
		}
		listed[name] = m
	}
	// everywhere holds the models every backend with a models list lists:
	// whichever backend is first, such a model is served as itself, so the
	// common call needs no plan here.
	everywhere := map[string]bool{}
	first := true
	for _, m := range listed {
		for id := range m {
			if first || everywhere[id] {
				everywhere[id] = true
			}
		}
		for id := range everywhere {
			if !m[id] {
				delete(everywhere, id)
			}
		}
		first = false
	}
	return func(st *call.State, model string) string {
		if everywhere[model] || len(listed) == 0 || (aliases != nil && aliases.Has(model)) {
			return model
		}
		capability := st.Capability
		if capability == "" {
			capability = call.Chat
		}
		p, err := routes.Plan(routing.Request{Tenant: st.Tenant, Agent: st.Agent, Capability: capability, Sensitive: st.Sensitive, Soft: st.Soft})
		if err != nil || len(p.Backends) == 0 {
			return model
		}
		b := p.Backends[0]
		if m, ok := listed[b]; !ok || m[model] {
			return model
		}
		if d := cfg.AI.Backends[b].DefaultModel; d != "" {
			return d
		}
		return model
	}
}
