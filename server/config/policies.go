package config

import "slices"

// Policy is one entry of ai.policies: rules for the calls its Match
// selects. Every matching policy applies (deny anywhere wins); their levels
// ([PolicyMatch.Level]) order them, most specific first, in the admin view
// and in refusals.
type Policy struct {
	// Name names the policy in refusals, the audit's would_deny, metrics
	// and the admin view; required and unique.
	Name string `yaml:"name"`
	// Match selects the calls; the zero Match (absent) selects every call
	// (the global level).
	Match PolicyMatch `yaml:"match"`
	// Governance, when set, restricts the models and the backends of the
	// calls.
	Governance *Governance `yaml:"governance"`
	// Budget, when set, adds caps every matching call is held to, besides
	// its tenant's and agent's own.
	Budget *PolicyBudget `yaml:"budget"`
	// Guardrails, when set, checks the prompt before the call and the
	// answer on its way back (stages 5 and 13 of the AI pipeline).
	Guardrails *Guardrails `yaml:"guardrails"`
	// PromptLogging, when set and enabled, writes what went upstream and
	// what went back of each call to the policy's own file (stage 15).
	PromptLogging *PromptLogging `yaml:"prompt_logging"`
	// Cache, when set, decides whether the calls' answers are cached
	// (stages 6 and 15); the most specific policy with one decides.
	Cache *PolicyCache `yaml:"cache"`
}

// PolicyMatch selects calls (ai.policies[].match). An empty field matches
// every value; the fields set must all match.
type PolicyMatch struct {
	// Listener is http (the OpenAI front) or grpc (the gRPC listener).
	Listener string `yaml:"listener"`
	// Operation is ai.chatCompletions, ai.embeddings, ai.listModels or a
	// gRPC service's full name (acme.ocr.v1.OcrService).
	Operation string `yaml:"operation"`
	// Model is the requested model or alias, exactly as the caller sends
	// it.
	Model string `yaml:"model"`
	// Tenant and Agent are the caller's tenant and agent names.
	Tenant string `yaml:"tenant"`
	Agent  string `yaml:"agent"`
}

// The listeners a policy may match.
const (
	ListenerHTTP = "http"
	ListenerGRPC = "grpc"
)

// The operations of Flexway's own inference services a policy may match
// (the flexway.v1.operation option's names); any other operation is a
// gRPC service's full name.
const (
	OperationChatCompletions = "ai.chatCompletions"
	OperationEmbeddings      = "ai.embeddings"
	OperationListModels      = "ai.listModels"
)

// PolicyLevel is how specific a policy's match is. Smaller is more
// specific: LevelAgent < LevelTenant < LevelRoute < LevelService <
// LevelListener < LevelGlobal.
type PolicyLevel int

// The levels, most specific first.
const (
	// LevelAgent: the match names an agent ("consumer" level).
	LevelAgent PolicyLevel = iota
	// LevelTenant: the match names a tenant and no agent ("consumer").
	LevelTenant
	// LevelRoute: the match names a model, and no tenant or agent.
	LevelRoute
	// LevelService: the match names an operation, and none of the above.
	LevelService
	// LevelListener: the match names only a listener.
	LevelListener
	// LevelGlobal: no match.
	LevelGlobal
)

// String is the level's name in the admin view: agent, tenant, route,
// service, listener or global.
func (l PolicyLevel) String() string {
	switch l {
	case LevelAgent:
		return "agent"
	case LevelTenant:
		return "tenant"
	case LevelRoute:
		return "route"
	case LevelService:
		return "service"
	case LevelListener:
		return "listener"
	}
	return "global"
}

// Level is the level of a policy with this match: its most specific key.
func (m PolicyMatch) Level() PolicyLevel {
	switch {
	case m.Agent != "":
		return LevelAgent
	case m.Tenant != "":
		return LevelTenant
	case m.Model != "":
		return LevelRoute
	case m.Operation != "":
		return LevelService
	case m.Listener != "":
		return LevelListener
	}
	return LevelGlobal
}

// Governance restricts the models and backends of a policy's calls
// (ai.policies[].governance).
type Governance struct {
	// Models, when not nil, lists the requested models and aliases the
	// calls may name: "*" allows every one, an empty list none. Nil (the
	// key absent) sets no model rule.
	Models []string `yaml:"models"`
	// Backends, when not nil, lists the only backends that may serve the
	// calls: every other one leaves the plan (alias targets, the soft
	// backend, capability overrides and fallbacks included). Nil sets no
	// backend rule.
	Backends []string `yaml:"backends"`
	// Mode is enforce (the default: refuse) or shadow (audit what would be
	// refused, refuse nothing).
	Mode GovernanceMode `yaml:"mode"`
}

// GovernanceMode is enforce or shadow (ai.policies[].governance.mode).
type GovernanceMode string

// The governance modes.
const (
	// GovernanceEnforce refuses: 403 model_not_allowed or
	// backend_not_allowed.
	GovernanceEnforce GovernanceMode = "enforce"
	// GovernanceShadow refuses nothing: where the policy would refuse, the
	// audit line carries would_deny and flexway_policy_would_deny_total
	// counts it.
	GovernanceShadow GovernanceMode = "shadow"
)

// PolicyBudget is a policy's own caps (ai.policies[].budget): every cap
// of [Caps], counted in buckets of the tenant (the default), of the agent,
// or of the policy itself (one bucket for every call it matches).
type PolicyBudget struct {
	Caps `yaml:",inline"`
	// Per is tenant (the default), agent or policy.
	Per PolicyPer `yaml:"per"`
}

// PolicyPer is whose bucket a policy's caps count in
// (ai.policies[].budget.per).
type PolicyPer string

// The bucket owners of a policy's caps.
const (
	// PerTenant: one bucket per tenant (the default).
	PerTenant PolicyPer = "tenant"
	// PerAgent: one bucket per agent of a tenant (a tenant's own calls,
	// without an agent, share the tenant's).
	PerAgent PolicyPer = "agent"
	// PerPolicy: one bucket for every call the policy matches.
	PerPolicy PolicyPer = "policy"
)

// Valid reports whether m is enforce or shadow.
func (m GovernanceMode) Valid() bool { return m == GovernanceEnforce || m == GovernanceShadow }

// Valid reports whether p is tenant, agent or policy.
func (p PolicyPer) Valid() bool { return p == PerTenant || p == PerAgent || p == PerPolicy }

// MaxPolicyNameBytes bounds a policy's name, in bytes: it is written in
// refusals, the audit line and metric labels.
const MaxPolicyNameBytes = 64

// setDefaults sets mode enforce.
func (g *Governance) setDefaults() { setZero(&g.Mode, GovernanceEnforce) }

// setDefaults sets per tenant.
func (b *PolicyBudget) setDefaults() { setZero(&b.Per, PerTenant) }

// applyPolicyDefaults is [Config.ApplyDefaults] for ai.policies: mode
// enforce, per tenant, cache similarity 0.95 and ttl 1h.
func (ai *AI) applyPolicyDefaults() {
	for i := range ai.Policies {
		p := &ai.Policies[i]
		if p.Governance != nil {
			g := *p.Governance
			g.setDefaults()
			p.Governance = &g
		}
		if p.Budget != nil {
			b := *p.Budget
			b.setDefaults()
			p.Budget = &b
		}
		if p.Cache != nil {
			c := *p.Cache
			c.setDefaults()
			p.Cache = &c
		}
	}
}

// deriveGuardrailDefaults sets the defaults of guardrail rules that
// depend on their type ([GuardrailRule.setDefaults]), on copies of the
// sections.
func (ai *AI) deriveGuardrailDefaults() {
	for i := range ai.Policies {
		p := &ai.Policies[i]
		if p.Guardrails == nil {
			continue
		}
		g := Guardrails{
			Prompt:   slices.Clone(p.Guardrails.Prompt),
			Response: slices.Clone(p.Guardrails.Response),
		}
		for _, rs := range [][]GuardrailRule{g.Prompt, g.Response} {
			for i := range rs {
				rs[i].setDefaults()
			}
		}
		p.Guardrails = &g
	}
}

// setDefaults sets a json_schema or webhook rule's action deny, and a
// webhook's timeout 1s and on_error deny.
func (r *GuardrailRule) setDefaults() {
	switch r.Type {
	case GuardrailJSONSchema:
		setZero(&r.Action, GuardrailDeny)
	case GuardrailWebhook:
		setZero(&r.Action, GuardrailDeny)
		setZero(&r.Timeout, DefaultWebhookTimeout)
		setZero(&r.OnError, GuardrailDeny)
	}
}

// resolvePaths makes the prompt log's path and schema files absolute
// with abs (relative to the configuration file's directory), on copies of
// the sections.
func (p *Policy) resolvePaths(abs func(*string)) {
	if l := p.PromptLogging; l != nil {
		c := *l
		abs(&c.Path)
		p.PromptLogging = &c
	}
	if g := p.Guardrails; g != nil {
		c := Guardrails{Prompt: slices.Clone(g.Prompt), Response: slices.Clone(g.Response)}
		for _, rs := range [][]GuardrailRule{c.Prompt, c.Response} {
			for i := range rs {
				if s := rs[i].Schema; s != nil && s.File != "" {
					sc := *s
					abs(&sc.File)
					rs[i].Schema = &sc
				}
			}
		}
		p.Guardrails = &c
	}
}
