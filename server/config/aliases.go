package config

import (
	"strings"
	"time"
)

// Alias is one model alias (ai.aliases.<name>): a model name a client may
// request that resolves to a route the operator declares. The model of a
// target is sent upstream as is; the backend's models and default_model
// apply only to requests that name no alias. The alias gives the call's
// default route: a tenant's or agent's backend override replaces it, and
// the soft cap, the capability override and the sensitivity pin apply
// after it, as for any call.
//
// Defaults: strategy failover; sticky (ab only) tenant; a target's weight
// 0 (no traffic for canary and ab); classifier external true, timeout
// 150ms, threshold 0.5.
type Alias struct {
	// Strategy is how the route is chosen among Targets (or Below and
	// Above); default failover.
	Strategy AliasStrategy `yaml:"strategy"`
	// Targets are the {backend, model} pairs of every strategy but
	// classifier; direct takes exactly one.
	Targets []AliasTarget `yaml:"targets"`
	// Sticky, for strategy ab only, is the subject hashed into an arm:
	// tenant (the default), agent, user (the OpenAI request's "user"
	// field) or header:NAME (the request header NAME). A call without the
	// subject hashes its tenant. Read it with [Alias.StickySubject].
	Sticky string `yaml:"sticky"`
	// Classifier, for strategy classifier only (and required there), is
	// the scorer that chooses between Below and Above.
	Classifier *Classifier `yaml:"classifier"`
	// Below, for strategy classifier only, serves a call scored under the
	// threshold.
	Below ClassifierTarget `yaml:"below"`
	// Above, for strategy classifier only, serves every other call: scored
	// at or over the threshold, or not scored (timeout, error, garbage, a
	// sensitive call and an external scorer).
	Above ClassifierTarget `yaml:"above"`
}

func (a *Alias) setDefaults() { setZero(&a.Strategy, StrategyFailover) }

// StickySubject splits Sticky into its subject (tenant, agent, user or
// header; tenant when Sticky is empty) and, for header, the header name.
// An unknown subject is returned as is, with ok false.
func (a Alias) StickySubject() (subject, header string, ok bool) {
	s := a.Sticky
	if s == "" {
		return StickyTenant, "", true
	}
	if name, found := strings.CutPrefix(s, StickyHeaderPrefix); found {
		return "header", name, true
	}
	switch s {
	case StickyTenant, StickyAgent, StickyUser:
		return s, "", true
	}
	return s, "", false
}

// The sticky subjects of an ab alias ([Alias.Sticky]).
const (
	// StickyTenant hashes the caller's tenant; the default.
	StickyTenant = "tenant"
	// StickyAgent hashes the caller's agent.
	StickyAgent = "agent"
	// StickyUser hashes the OpenAI request's "user" field.
	StickyUser = "user"
	// StickyHeaderPrefix, followed by a header name, hashes that request
	// header's value.
	StickyHeaderPrefix = "header:"
)

// AliasTarget is one target of an alias (ai.aliases.<name>.targets[i]).
type AliasTarget struct {
	// Backend names the backend that serves the target; required, never
	// kind grpc.
	Backend string `yaml:"backend"`
	// Model is the model id sent upstream as is; required.
	Model string `yaml:"model"`
	// Weight, for canary and ab, is the target's share of the total of the
	// alias's weights; 0 (the default) sends it no traffic (and, for
	// canary, makes it no failover either). Not negative.
	Weight int64 `yaml:"weight"`
	// Arm, optional, names the target in Flexway-Route, the audit line and
	// metrics; absent, the target's index in targets names it. Unique
	// within the alias; letters, digits, '.', '_' and '-'.
	Arm string `yaml:"arm"`
}

// ClassifierTarget is the below or above route of a classifier alias
// (ai.aliases.<name>.below, .above).
type ClassifierTarget struct {
	// Backend names the backend; required, never kind grpc.
	Backend string `yaml:"backend"`
	// Model is the model id sent upstream as is; required.
	Model string `yaml:"model"`
}

// Classifier is the scorer of a classifier alias
// (ai.aliases.<name>.classifier): Flexway POSTs {"text": <the last user
// message's text>, "messages": [{"role", "text"}, ...]} to URL and reads
// {"score": 0..1}.
type Classifier struct {
	// URL is the scorer's http or https endpoint; required, with no user
	// info or credential in its query.
	URL string `yaml:"url"`
	// External, nil meaning true, says the scorer is outside the
	// organisation: a sensitive call's text is never sent to it (the call
	// goes to above). Read it with [Classifier.IsExternal].
	External *bool `yaml:"external"`
	// Timeout bounds the whole scorer call; past it the call goes to
	// above. Positive; default 150ms.
	Timeout Duration `yaml:"timeout"`
	// Threshold is the score, in [0, 1], under which a call goes to below.
	// Default 0.5.
	Threshold float64 `yaml:"threshold"`
}

// The defaults of a classifier.
const (
	defaultClassifierTimeout   = Duration(150 * time.Millisecond)
	defaultClassifierThreshold = 0.5
)

func (c *Classifier) setDefaults() {
	setZero(&c.Timeout, defaultClassifierTimeout)
	setZero(&c.Threshold, defaultClassifierThreshold)
}

// IsExternal reports whether the scorer is outside the organisation
// (external, default true).
func (c Classifier) IsExternal() bool { return c.External == nil || *c.External }

// AliasStrategy is how an alias chooses its route
// (ai.aliases.<name>.strategy).
type AliasStrategy string

// The alias strategies.
const (
	// StrategyDirect: the one target serves, with no failover.
	StrategyDirect AliasStrategy = "direct"
	// StrategyFailover: the targets in order under the fallback rules (this
	// list replaces the backend's own fallback); the default.
	StrategyFailover AliasStrategy = "failover"
	// StrategyCanary: a weighted random draw over [0, total weight); the
	// other targets of positive weight are the drawn one's failover.
	StrategyCanary AliasStrategy = "canary"
	// StrategyAB: a deterministic hash of the alias name and the sticky
	// subject into weighted buckets, the same on every replica and restart.
	StrategyAB AliasStrategy = "ab"
	// StrategyCost: the targets sorted at load by their backend's declared
	// price, input plus output per million tokens, cheapest first.
	StrategyCost AliasStrategy = "cost"
	// StrategyLatency: the targets sorted at load by their backend's
	// expected_latency, fastest first, unset last.
	StrategyLatency AliasStrategy = "latency"
	// StrategyCostLatency: sorted by price, then by expected_latency.
	StrategyCostLatency AliasStrategy = "cost_latency"
	// StrategyClassifier: a scorer chooses between below and above.
	StrategyClassifier AliasStrategy = "classifier"
)

// Valid reports whether s is one of the strategies above.
func (s AliasStrategy) Valid() bool {
	switch s {
	case StrategyDirect, StrategyFailover, StrategyCanary, StrategyAB,
		StrategyCost, StrategyLatency, StrategyCostLatency, StrategyClassifier:
		return true
	}
	return false
}

// Weighted reports whether the strategy reads the targets' weights:
// canary and ab.
func (s AliasStrategy) Weighted() bool { return s == StrategyCanary || s == StrategyAB }

// applyAliasDefaults is [Config.ApplyDefaults] for ai.aliases.
func (ai *AI) applyAliasDefaults() {
	for name, a := range ai.Aliases {
		a.setDefaults()
		if a.Classifier != nil {
			c := *a.Classifier
			c.setDefaults()
			a.Classifier = &c
		}
		ai.Aliases[name] = a
	}
}
