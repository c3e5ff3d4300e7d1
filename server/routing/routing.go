// Package routing plans which backends serve a call. Planning is a pure
// function of the configuration ([Table]) and the call's identity,
// sensitivity and capability: neither latency, nor content, nor the
// requested model chooses the backend, and no network is involved.
package routing

import (
	"slices"
	"sync"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
)

// Table is the routing part of the configuration, built once at load and
// read-only after; safe for concurrent use.
type Table struct {
	// Default is ai.backend.
	Default string
	// Tenants holds ai.tenants.T.backend and the agents' overrides.
	Tenants map[string]Tenant
	// Capabilities is ai.capabilities: capability → the backend that
	// serves it when the chosen backend cannot.
	Capabilities map[call.Capability]string
	// SensitiveBackend is ai.sensitive_backend (internal), or empty.
	SensitiveBackend string
	// SoftBackend is ai.budget.soft_backend, or empty: it serves a call
	// whose caller is past the soft mark of a cap ([Request.Soft]).
	SoftBackend string
	// Backends describes every backend by name.
	Backends map[string]Backend

	once  sync.Once
	plans map[planKey]Plan // successful plans, computed at the first Plan
}

// Tenant is a tenant's routing override.
type Tenant struct {
	// Backend overrides ai.backend for the tenant; empty keeps it.
	Backend string
	// Agents maps an agent to its backend override; empty keeps the
	// tenant's.
	Agents map[string]string
}

// Backend is what routing needs to know of a backend.
type Backend struct {
	// Capabilities the backend has.
	Capabilities []call.Capability
	// External backends never serve a sensitive call: see [External].
	External bool
	// Fallback is the ordered fallback list.
	Fallback []string
}

// Has reports whether b has capability c.
func (b Backend) Has(c call.Capability) bool { return slices.Contains(b.Capabilities, c) }

// Plan is the ordered list of backends to try: the chosen one first, then
// its fallbacks that may serve the call. It is never empty.
type Plan struct {
	// Backends, in order; each appears once.
	Backends []string
	// Models, set for a plan made from an alias route, is parallel to
	// Backends: the model id sent to each backend as is, or "" for a
	// backend not taken from the alias (it maps the requested model by
	// its own models and default_model).
	Models []string
	// Arms, set with Models, is each backend's alias arm ("" for one not
	// taken from the alias): what Flexway-Route names.
	Arms []string
}

// AliasRoute is the route a requested model's alias resolved to (package
// server/routing/alias): its targets in order, the first serving and the
// rest its failover, replacing that backend's own fallback list.
type AliasRoute struct {
	// Name is the alias.
	Name string
	// Targets, in order; never empty.
	Targets []AliasTarget
}

// AliasTarget is one target of an [AliasRoute].
type AliasTarget struct {
	// Backend is the backend's name; Model the model id sent as is; Arm
	// the target's arm name (else its index).
	Backend, Model, Arm string
}

// Request is what a plan depends on.
type Request struct {
	Tenant, Agent string
	Capability    call.Capability
	Sensitive     bool
	// Soft is set when the caller is at or past the soft mark of one of
	// its caps: the call goes to [Table.SoftBackend] if it has the
	// capability.
	Soft bool
	// Alias, when set, is the call's default route, from the requested
	// model's alias; a tenant's or agent's backend override replaces it.
	Alias *AliasRoute
	// Allow, when set, says which backends may serve the call (the
	// enforced governance.backends rules of the call's ai.policies): the
	// plan drops every backend it refuses, after every other step, so
	// that no alias target, override, soft backend, capability override,
	// sensitivity pin or fallback brings one back. Nil allows every
	// backend.
	Allow BackendFilter
}

// BackendFilter says whether a backend may serve a call;
// *policy.Set implements it.
type BackendFilter interface {
	// AllowBackend reports whether the backend named backend may serve
	// the call.
	AllowBackend(backend string) bool
}

// NoBackendAllowedError is [Table.Plan]'s error when [Request.Allow]
// refuses every backend of the plan. Plan is the plan before the filter
// (shared: read-only), for the refusal to name the rule that refused it.
type NoBackendAllowedError struct {
	Plan []string
}

// Error says that no backend of the plan may serve the call.
func (e *NoBackendAllowedError) Error() string {
	return "no backend that could serve this call is allowed for this caller"
}

// Plan returns the call's plan: ai.backend → tenant override → agent
// override → soft backend (past a soft cap) → capability override →
// sensitivity pin (so a soft backend never widens a sensitive call), then the chosen
// backend's fallbacks filtered to backends with the capability (and, for a
// sensitive call, internal ones); last, the governance filter
// ([Request.Allow]) drops the backends the call's policies refuse.
//
// Errors: faults.CapabilityUnavailable when nothing declared serves the
// capability; faults.SensitiveNoInternalBackend when a sensitive call has no
// internal backend able to serve it; *[NoBackendAllowedError] when
// Request.Allow refuses every backend of the plan.
//
// Successful plans are computed once per (backend chosen by tenant and
// agent, capability, sensitivity, soft) and shared: callers must not modify
// Plan.Backends. The Table must not change after its first Plan. The
// filter allocates only when it drops a backend.
func (t *Table) Plan(r Request) (Plan, error) {
	name, override := t.chosen(r.Tenant, r.Agent)
	t.once.Do(t.compile)
	var p Plan
	var err error
	if r.Alias != nil && len(r.Alias.Targets) > 0 && !override {
		p, err = t.planAlias(r)
	} else if cached, ok := t.plans[planKey{name, r.Capability, r.Sensitive, r.Soft}]; ok {
		p = cached
	} else {
		p, err = t.plan(name, r.Capability, r.Sensitive, r.Soft)
	}
	if err != nil || r.Allow == nil {
		return p, err
	}
	return filter(p, r.Allow)
}

// filter returns p without the backends allow refuses: p itself when it
// refuses none (no allocation), else new slices (p is shared: never
// modified).
func filter(p Plan, allow BackendFilter) (Plan, error) {
	first := -1
	for i, b := range p.Backends {
		if !allow.AllowBackend(b) {
			first = i
			break
		}
	}
	if first < 0 {
		return p, nil
	}
	var out Plan
	alias := len(p.Models) == len(p.Backends) && len(p.Models) > 0
	for i, b := range p.Backends {
		if i < first || (i > first && allow.AllowBackend(b)) {
			out.Backends = append(out.Backends, b)
			if alias {
				out.Models = append(out.Models, p.Models[i])
				out.Arms = append(out.Arms, p.Arms[i])
			}
		}
	}
	if len(out.Backends) == 0 {
		return Plan{}, &NoBackendAllowedError{Plan: p.Backends}
	}
	return out, nil
}

// planKey is what a plan depends on once the tenant and agent overrides
// chose a backend.
type planKey struct {
	chosen     string
	capability call.Capability
	sensitive  bool
	soft       bool
}

// compile precomputes every successful plan for the backends the table
// names and the capabilities they declare.
func (t *Table) compile() {
	t.plans = map[planKey]Plan{}
	caps := map[call.Capability]bool{call.Chat: true, call.Vision: true, call.Embeddings: true}
	for _, b := range t.Backends {
		for _, c := range b.Capabilities {
			caps[c] = true
		}
	}
	names := []string{t.Default}
	for n := range t.Backends {
		names = append(names, n)
	}
	for _, n := range names {
		for c := range caps {
			for _, sensitive := range []bool{false, true} {
				for _, soft := range []bool{false, true} {
					if p, err := t.plan(n, c, sensitive, soft); err == nil {
						t.plans[planKey{n, c, sensitive, soft}] = p
					}
				}
			}
		}
	}
}

// plan computes the plan of a call whose tenant and agent chose name.
func (t *Table) plan(name string, capability call.Capability, sensitive, soft bool) (Plan, error) {
	// The soft backend serves the call only if it may: an external one
	// never takes a sensitive call, which keeps its own route instead.
	if sb, ok := t.Backends[t.SoftBackend]; soft && ok && sb.Has(capability) && !(sensitive && sb.External) {
		name = t.SoftBackend
	}
	if !t.Backends[name].Has(capability) {
		alt, ok := t.Capabilities[capability]
		if !ok || !t.Backends[alt].Has(capability) {
			return Plan{}, faults.New(faults.CapabilityUnavailable, "no backend serves %s for this caller", capability)
		}
		name = alt
	}
	if sensitive && t.Backends[name].External {
		s := t.SensitiveBackend
		if s == "" || t.Backends[s].External || !t.Backends[s].Has(capability) {
			return Plan{}, faults.New(faults.SensitiveNoInternalBackend, "sensitive call: no internal backend serves %s", capability)
		}
		name = s
	}
	p := Plan{Backends: []string{name}}
	for _, f := range t.Backends[name].Fallback {
		b, ok := t.Backends[f]
		if !ok || !b.Has(capability) || (sensitive && b.External) || slices.Contains(p.Backends, f) {
			continue
		}
		p.Backends = append(p.Backends, f)
	}
	return p, nil
}

// Overridden reports whether a tenant's or agent's backend override
// chooses the backend of tenant and agent's calls: an alias's route then
// does not apply (so an alias's classifier need not be asked).
func (t *Table) Overridden(tenant, agent string) bool {
	_, o := t.chosen(tenant, agent)
	return o
}

// chosen is the backend ai.backend and the tenant and agent overrides
// choose, and whether an override chose it.
func (t *Table) chosen(tenant, agent string) (name string, override bool) {
	name = t.Default
	if ten, ok := t.Tenants[tenant]; ok {
		if ten.Backend != "" {
			name, override = ten.Backend, true
		}
		if a := ten.Agents[agent]; agent != "" && a != "" {
			name, override = a, true
		}
	}
	return name, override
}

// planAlias plans a call whose default route is its alias's: the first
// target, then the soft backend, the capability override and the
// sensitivity pin as for any call; when the first target still serves,
// the other targets able to serve the call (capability; internal for a
// sensitive call) are its fallbacks, in order, each with its model and
// arm; when another backend took its place, that backend's own plan
// applies and the alias is left.
func (t *Table) planAlias(r Request) (Plan, error) {
	first := r.Alias.Targets[0]
	p, err := t.plan(first.Backend, r.Capability, r.Sensitive, r.Soft)
	if err != nil || p.Backends[0] != first.Backend {
		return p, err
	}
	out := Plan{Backends: []string{first.Backend}, Models: []string{first.Model}, Arms: []string{first.Arm}}
	for _, tg := range r.Alias.Targets[1:] {
		b, ok := t.Backends[tg.Backend]
		if !ok || !b.Has(r.Capability) || (r.Sensitive && b.External) || slices.Contains(out.Backends, tg.Backend) {
			continue
		}
		out.Backends = append(out.Backends, tg.Backend)
		out.Models = append(out.Models, tg.Model)
		out.Arms = append(out.Arms, tg.Arm)
	}
	return out, nil
}
