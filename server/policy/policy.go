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
// Guardrails: [Set.Scanner] and [Set.WholeRules] give a phase's rules of
// every policy of the set (any deny wins), joined once per distinct set;
// [Set.Logging] the prompt_logging of the most specific policy with one.
//
// The package reads config types and the guardrail engines
// (server/guardrail and its jsonschema and webhook rules).
package policy

import (
	"slices"

	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/guardrail"
)

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

	decl config.Policy // as declared, for Models, Backends and Caps

	modelDenial   Denial // this policy's model_not_allowed
	backendDenial Denial // this policy's backend_not_allowed

	guards *guards // nil: no guardrails, no prompt_logging
}

// HasModelRule reports whether the policy lists governance.models.
func (p *Policy) HasModelRule() bool { return p.models != nil || p.allModel }

// HasBackendRule reports whether the policy lists governance.backends.
func (p *Policy) HasBackendRule() bool { return p.backends != nil }

// AllowsModel reports whether the policy's model rule allows model (true
// when it has none).
func (p *Policy) AllowsModel(model string) bool {
	if p.models == nil || p.allModel {
		return true
	}
	_, ok := p.models[model]
	return ok
}

// AllowsBackend reports whether the policy's backend rule allows backend
// (true when it has none).
func (p *Policy) AllowsBackend(backend string) bool {
	if p.backends == nil {
		return true
	}
	_, ok := p.backends[backend]
	return ok
}

// Models returns governance.models as declared: nil when the policy has
// no model rule, empty when it allows none. Read-only.
func (p *Policy) Models() []string {
	if p.decl.Governance == nil {
		return nil
	}
	return p.decl.Governance.Models
}

// Backends returns governance.backends as declared: nil when the policy
// has no backend rule. Read-only.
func (p *Policy) Backends() []string {
	if p.decl.Governance == nil {
		return nil
	}
	return p.decl.Governance.Backends
}

// Caps returns the policy's budget section as declared (its caps and
// whose bucket they count in), nil when it sets no cap ([Policy.Budget]
// unset).
func (p *Policy) Caps() *config.PolicyBudget {
	if !p.Budget {
		return nil
	}
	b := *p.decl.Budget
	if b.Per == "" {
		b.Per = config.PerTenant
	}
	return &b
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
//
// A Set built by hand (Set{Policies: ps}) is valid: its methods work out
// what [Table.Resolve] precomputes.
type Set struct {
	Policies []*Policy

	// budgets is BudgetNames' answer when known (budgetsKnown).
	budgets      []string
	budgetsKnown bool
	// guards is the joined guardrails and logging when known
	// (guardsKnown); nil: none.
	guards      *guards
	guardsKnown bool
}

// joined returns the set's guards: precomputed, or joined now for a Set
// built by hand (costly: tens of milliseconds when rules are joined).
func (s Set) joined() *guards {
	if s.guardsKnown {
		return s.guards
	}
	return joinGuards(s.Policies)
}

// CheckModel applies the model rules to model: deny is the most specific
// enforced policy that refuses it (nil when none does), and shadow the
// most specific shadow policy that would have (nil when none would). No
// allocation.
func (s Set) CheckModel(model string) (deny, shadow *Denial) {
	for _, p := range s.Policies {
		if p.AllowsModel(model) {
			continue
		}
		if p.Shadow {
			if shadow == nil {
				shadow = &p.modelDenial
			}
		} else if deny == nil {
			deny = &p.modelDenial
		}
		if deny != nil && shadow != nil {
			break
		}
	}
	return deny, shadow
}

// AllowBackend reports whether every enforced backend rule of the set
// allows backend.
func (s Set) AllowBackend(backend string) bool {
	for _, p := range s.Policies {
		if !p.Shadow && !p.AllowsBackend(backend) {
			return false
		}
	}
	return true
}

// ShadowBackends reports the most specific shadow policy whose backend
// rule would leave none of plan (nil when none would, and for an empty
// plan: there is nothing left to take away).
func (s Set) ShadowBackends(plan []string) *Denial {
	if len(plan) == 0 {
		return nil
	}
next:
	for _, p := range s.Policies {
		if !p.Shadow || p.backends == nil {
			continue
		}
		for _, b := range plan {
			if p.AllowsBackend(b) {
				continue next
			}
		}
		return &p.backendDenial
	}
	return nil
}

// BackendDenial is the enforced policy to name in a backend_not_allowed
// refusal of plan (every backend of plan refused by some enforced rule):
// the most specific enforced policy with a backend rule that refuses
// plan's first backend. For an empty plan, it is the most specific
// enforced policy with a backend rule; nil when the set has none.
func (s Set) BackendDenial(plan []string) *Denial {
	var first *Policy
	for _, p := range s.Policies {
		if p.Shadow || p.backends == nil {
			continue
		}
		if len(plan) == 0 || !p.AllowsBackend(plan[0]) {
			return &p.backendDenial
		}
		if first == nil {
			first = p
		}
	}
	if first != nil {
		// plan[0] is allowed by every enforced rule: the caller's premise
		// does not hold; name the most specific rule rather than none.
		return &first.backendDenial
	}
	return nil
}

// Scanner returns the text rules (pii, secrets, injection, banned, regex)
// of the set's policies for phase, joined into one scanner
// ([guardrail.Join]); nil when no policy of the set has one, and then the
// phase checks nothing and a stream is held back by nothing. Rules of a
// shadow policy are in it, marked Shadow. For a Set from [Table.Resolve]
// it costs no allocation: the join is made once per distinct set.
func (s Set) Scanner(phase guardrail.Phase) *guardrail.Scanner {
	return s.joined().scanner(phase)
}

// WholeRules returns the json_schema and webhook rules of the set's
// policies for phase, most specific policy first; nil when none has one.
// Read-only.
func (s Set) WholeRules(phase guardrail.Phase) []*WholeRule {
	return s.joined().whole(phase)
}

// Guarded reports whether any policy of the set has a rule for phase.
func (s Set) Guarded(phase guardrail.Phase) bool {
	g := s.joined()
	return g.scanner(phase) != nil || len(g.whole(phase)) > 0
}

// Logging returns the prompt_logging section of the most specific policy
// of the set that has one, whether enabled or not (a more specific policy
// may turn off what a broader one turns on); nil when none has one.
func (s Set) Logging() *Logging {
	if g := s.joined(); g != nil {
		return g.logging
	}
	return nil
}

// BudgetNames returns the names of the policies of the set with a
// budget, for ledger.Account.Policies; nil when none has. The slice is
// read-only: for a Set that [Table.Resolve] returned it is precomputed
// (or built once, when the call's policies come from more than one match
// shape and one has a budget).
func (s Set) BudgetNames() []string {
	if s.budgetsKnown {
		return s.budgets
	}
	return budgetNames(s.Policies)
}

func budgetNames(ps []*Policy) []string {
	var names []string
	for _, p := range ps {
		if p.Budget {
			names = append(names, p.Name)
		}
	}
	return names
}

// Match shapes: which of the five match fields a policy sets.
const (
	fieldListener = 1 << iota
	fieldOperation
	fieldModel
	fieldTenant
	fieldAgent
)

// groupKey is the values of a shape's fields ("" for the fields the
// shape does not set).
type groupKey struct {
	listener, operation, model, tenant, agent string
}

// group is the policies of one shape that share the values of its
// fields, in declaration order, with what a Set of them alone answers.
type group struct {
	set Set
	// hasBudget is set when one of the policies has a budget.
	hasBudget bool
	// hasGuards is set when one of the policies has guardrails or
	// prompt_logging.
	hasGuards bool
}

// shape is every group of one match shape.
type shape struct {
	mask   int
	groups map[groupKey]*group
}

func (sh *shape) key(k Key) groupKey {
	var g groupKey
	if sh.mask&fieldListener != 0 {
		g.listener = k.Listener
	}
	if sh.mask&fieldOperation != 0 {
		g.operation = k.Operation
	}
	if sh.mask&fieldModel != 0 {
		g.model = k.Model
	}
	if sh.mask&fieldTenant != 0 {
		g.tenant = k.Tenant
	}
	if sh.mask&fieldAgent != 0 {
		g.agent = k.Agent
	}
	return g
}

func maskOf(m config.PolicyMatch) int {
	mask := 0
	if m.Listener != "" {
		mask |= fieldListener
	}
	if m.Operation != "" {
		mask |= fieldOperation
	}
	if m.Model != "" {
		mask |= fieldModel
	}
	if m.Tenant != "" {
		mask |= fieldTenant
	}
	if m.Agent != "" {
		mask |= fieldAgent
	}
	return mask
}

// maxShapes is the number of match shapes: 2⁵.
const maxShapes = 1 << 5

// Table is the compiled ai.policies. It is read-only after [Compile] and
// safe for concurrent use.
type Table struct {
	joins    joinCache // guards of sets merged from more than one group
	policies []*Policy
	// shapes holds the declared shapes; preBody those whose match names
	// no model.
	shapes, preBody []*shape
	// modelLogs is set when a policy that names a model turns prompt
	// logging on (see MayLog).
	modelLogs bool
}

// Compile compiles ps, which [config.Config.Validate] accepted (names
// unique). Its error, naming the rule's key path, is a guardrail that
// validation cannot judge without compiling it: a schema file's schema
// that does not compile, or a text rule the engine refuses. A nil Table is
// not valid; Compile(nil) is the empty one.
func Compile(ps []config.Policy) (*Table, error) {
	t := &Table{}
	var byMask [maxShapes]*shape
	for i, cp := range ps {
		p := &Policy{
			Name:  cp.Name,
			Index: i,
			Level: cp.Match.Level(),
			Match: cp.Match,
			decl:  cp,
		}
		if g := cp.Governance; g != nil {
			p.Shadow = g.Mode == config.GovernanceShadow
			if g.Models != nil {
				p.models = make(map[string]struct{}, len(g.Models))
				for _, m := range g.Models {
					if m == "*" {
						p.allModel = true
					}
					p.models[m] = struct{}{}
				}
			}
			if g.Backends != nil {
				p.backends = make(map[string]struct{}, len(g.Backends))
				for _, b := range g.Backends {
					p.backends[b] = struct{}{}
				}
			}
		}
		p.Budget = cp.Budget != nil && !cp.Budget.Caps.IsZero()
		pg, err := compileGuards(i, cp, p.Shadow)
		if err != nil {
			return nil, err
		}
		p.guards = pg
		t.modelLogs = t.modelLogs || (cp.Match.Model != "" && p.logs())
		p.modelDenial = Denial{Policy: p.Name, Reason: ReasonModelNotAllowed, Shadow: p.Shadow}
		p.backendDenial = Denial{Policy: p.Name, Reason: ReasonBackendNotAllowed, Shadow: p.Shadow}
		t.policies = append(t.policies, p)

		mask := maskOf(cp.Match)
		sh := byMask[mask]
		if sh == nil {
			sh = &shape{mask: mask, groups: map[groupKey]*group{}}
			byMask[mask] = sh
		}
		gk := sh.key(Key{
			Listener: cp.Match.Listener, Operation: cp.Match.Operation,
			Model: cp.Match.Model, Tenant: cp.Match.Tenant, Agent: cp.Match.Agent,
		})
		g := sh.groups[gk]
		if g == nil {
			g = &group{}
			sh.groups[gk] = g
		}
		// Declaration order within a group; one shape has one level.
		g.set.Policies = append(g.set.Policies, p)
		g.hasBudget = g.hasBudget || p.Budget
	}
	// Shapes most specific first, so that a merge rarely reorders.
	for lvl := config.LevelAgent; lvl <= config.LevelGlobal; lvl++ {
		for mask, sh := range byMask {
			if sh == nil || levelOfMask(mask) != lvl {
				continue
			}
			for _, g := range sh.groups {
				g.set.budgets = budgetNames(g.set.Policies)
				g.set.budgetsKnown = true
				g.set.guards = joinGuards(g.set.Policies)
				g.set.guardsKnown = true
				g.hasGuards = g.set.guards != nil
			}
			t.shapes = append(t.shapes, sh)
			if mask&fieldModel == 0 {
				t.preBody = append(t.preBody, sh)
			}
		}
	}
	return t, nil
}

func levelOfMask(mask int) config.PolicyLevel {
	return config.PolicyMatch{
		Listener:  flag(mask, fieldListener),
		Operation: flag(mask, fieldOperation),
		Model:     flag(mask, fieldModel),
		Tenant:    flag(mask, fieldTenant),
		Agent:     flag(mask, fieldAgent),
	}.Level()
}

func flag(mask, f int) string {
	if mask&f != 0 {
		return "x"
	}
	return ""
}

// Resolve returns the policies whose match selects k, most specific
// first. Its cost does not grow with the number of policies: a few map
// lookups (one per distinct shape of match declared), at most one
// allocation (none when the policies found share one match shape and
// values: the Set is then shared with every such call).
func (t *Table) Resolve(k Key) Set {
	return t.resolve(t.shapes, k)
}

// PreBody returns the policies that select k whatever the model — those
// whose match names no model — for the check made before a request body
// is read (k.Model is ignored). It costs what [Table.Resolve] does.
func (t *Table) PreBody(k Key) Set {
	return t.resolve(t.preBody, k)
}

func (t *Table) resolve(shapes []*shape, k Key) Set {
	var found [maxShapes]*group
	n, total, budgets, guarded := 0, 0, false, false
	for _, sh := range shapes {
		if g := sh.groups[sh.key(k)]; g != nil {
			found[n] = g
			n++
			total += len(g.set.Policies)
			budgets = budgets || g.hasBudget
			guarded = guarded || g.hasGuards
		}
	}
	switch n {
	case 0:
		return Set{}
	case 1:
		return found[0].set
	}
	// Merge by (Level, Index): each group is sorted already.
	out := make([]*Policy, 0, total)
	var at [maxShapes]int
	for len(out) < total {
		best := -1
		var bp *Policy
		for i := 0; i < n; i++ {
			ps := found[i].set.Policies
			if at[i] == len(ps) {
				continue
			}
			p := ps[at[i]]
			if bp == nil || p.Level < bp.Level || (p.Level == bp.Level && p.Index < bp.Index) {
				best, bp = i, p
			}
		}
		out = append(out, bp)
		at[best]++
	}
	s := Set{Policies: out, guardsKnown: true}
	if !budgets {
		s.budgetsKnown = true
	}
	if guarded {
		s.guards = t.joins.get(out)
	}
	return s
}

// Empty reports whether the table holds no policy (then every Resolve is
// the zero Set).
func (t *Table) Empty() bool {
	return len(t.policies) == 0
}

// Policies returns every compiled policy in declaration order. The slice
// is the table's: read-only.
func (t *Table) Policies() []*Policy {
	return t.policies
}

// Consumer returns the policies that may apply to the calls of a
// consumer for operation, whatever their listener and model: those whose
// match's operation, tenant and agent are each absent or equal to
// operation, tenant and agent (agent "" for a tenant's own calls); most
// specific first. A policy that names a listener or a model applies only
// to the calls that condition still selects. A scan of every policy, for
// the admin view: not for a call's path.
func (t *Table) Consumer(operation, tenant, agent string) []*Policy {
	var out []*Policy
	for _, p := range t.policies {
		m := p.Match
		if (m.Operation == "" || m.Operation == operation) &&
			(m.Tenant == "" || m.Tenant == tenant) &&
			(m.Agent == "" || m.Agent == agent) {
			out = append(out, p)
		}
	}
	// Declaration order already: a stable sort by level is (Level, Index).
	slices.SortStableFunc(out, func(a, b *Policy) int { return int(a.Level) - int(b.Level) })
	return out
}
