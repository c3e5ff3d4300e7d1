// Package policy compiles ai.policies into a [Table] that resolves, once
// per call, the policies whose match selects the call ([Table.Resolve]),
// and answers governance's questions over them: may the call name this
// model ([Set.CheckModel]), may this backend serve it
// ([Set.AllowBackend]), which policies' budgets hold it
// ([Set.BudgetNames]).
//
// Composition: every matching policy applies; a model or backend rule
// denies when any enforced policy with a list denies (deny anywhere wins).
// A shadow policy never refuses: its would-be refusal is reported as a
// [Denial] with Shadow set, for the audit line and metrics.
//
// The package reads config types and depends on nothing else in Flexway.
package policy

import "github.com/flexway/flexway/server/config"

// Key is what a call is matched on. Empty fields are values like any
// other (a call with no agent has Agent ""), except in [Table.PreBody],
// where the model is not known yet.
type Key struct {
	// Listener is config.ListenerHTTP or config.ListenerGRPC.
	Listener string
	// Operation is the method's operation name (ai.chatCompletions,
	// ai.embeddings, ai.listModels) or, for a proxied gRPC method, its
	// service's full name (acme.ocr.v1.OcrService).
	Operation string
	// Model is the requested model or alias, as the caller sent it.
	Model string
	// Tenant and Agent are the caller's.
	Tenant, Agent string
}

// Policy is one compiled policy. It is shared by every call it matches:
// read-only.
type Policy struct {
	// Name is the policy's name.
	Name string
	// Index is its position in ai.policies.
	Index int
	// Level is its match's level.
	Level config.PolicyLevel
	// Match is its match as declared.
	Match config.PolicyMatch
	// Shadow is set for governance.mode shadow.
	Shadow bool
	// Budget is set when the policy has a budget section (its caps are in
	// the ledger under Name).
	Budget bool

	models   map[string]struct{} // nil: no model rule
	allModel bool                // "*" listed
	backends map[string]struct{} // nil: no backend rule
}

// HasModelRule reports whether the policy lists governance.models.
func (p *Policy) HasModelRule() bool { return p.models != nil || p.allModel }

// HasBackendRule reports whether the policy lists governance.backends.
func (p *Policy) HasBackendRule() bool { return p.backends != nil }

// AllowsModel reports whether the policy's model rule allows model (true
// when it has none).
func (p *Policy) AllowsModel(model string) bool {
	panic("policy: not implemented")
}

// AllowsBackend reports whether the policy's backend rule allows backend
// (true when it has none).
func (p *Policy) AllowsBackend(backend string) bool {
	panic("policy: not implemented")
}

// Reasons a governance rule refuses with: Flexway's fault reasons
// (server/faults) of the same names.
const (
	ReasonModelNotAllowed   = "model_not_allowed"
	ReasonBackendNotAllowed = "backend_not_allowed"
)

// Denial is one policy's refusal of a call, or, with Shadow set, the
// refusal a shadow policy would have made.
type Denial struct {
	// Policy is the refusing policy's name.
	Policy string
	// Reason is ReasonModelNotAllowed or ReasonBackendNotAllowed.
	Reason string
	// Shadow is set when the policy is in shadow mode: nothing was
	// refused.
	Shadow bool
}

// Set is the policies that apply to one call, most specific first (by
// Level, then by declaration order). The zero Set holds none and allows
// everything. It is a value: holding it costs the call no allocation
// beyond the slice, which may be shared between calls (read-only).
type Set struct {
	Policies []*Policy
}

// CheckModel applies the model rules to model: deny is the most specific
// enforced policy that refuses it (nil when none does), and shadow the
// most specific shadow policy that would have (nil when none would). No
// allocation.
func (s Set) CheckModel(model string) (deny, shadow *Denial) {
	panic("policy: not implemented")
}

// AllowBackend reports whether every enforced backend rule of the set
// allows backend.
func (s Set) AllowBackend(backend string) bool {
	panic("policy: not implemented")
}

// ShadowBackends reports the most specific shadow policy whose backend
// rule would leave none of plan (nil when none would).
func (s Set) ShadowBackends(plan []string) *Denial {
	panic("policy: not implemented")
}

// BackendDenial is the enforced policy to name in a backend_not_allowed
// refusal of plan (every backend of plan refused by some enforced rule):
// the most specific enforced policy with a backend rule that refuses
// plan's first backend.
func (s Set) BackendDenial(plan []string) *Denial {
	panic("policy: not implemented")
}

// BudgetNames returns the names of the policies of the set with a
// budget, for ledger.Account.Policies; nil when none has.
func (s Set) BudgetNames() []string {
	panic("policy: not implemented")
}

// Table is the compiled ai.policies. It is read-only after [Compile] and
// safe for concurrent use.
type Table struct{}

// Compile compiles ps, which [config.Config.Validate] accepted (names
// unique). Compile does not fail on a valid configuration.
func Compile(ps []config.Policy) *Table {
	panic("policy: not implemented")
}

// Resolve returns the policies whose match selects k, most specific
// first. Its cost does not grow with the number of policies: a few map
// lookups (one per distinct shape of match declared), at most one
// allocation.
func (t *Table) Resolve(k Key) Set {
	panic("policy: not implemented")
}

// PreBody returns the policies that select k whatever the model — those
// whose match names no model — for the check made before a request body
// is read (k.Model is ignored).
func (t *Table) PreBody(k Key) Set {
	panic("policy: not implemented")
}

// Empty reports whether the table holds no policy (then every Resolve is
// the zero Set).
func (t *Table) Empty() bool {
	panic("policy: not implemented")
}

// Policies returns every compiled policy in declaration order.
func (t *Table) Policies() []*Policy {
	panic("policy: not implemented")
}
