package telemetry

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// wouldDenyKey identifies one series of flexway.policy.would_deny.
type wouldDenyKey struct{ policy, reason string }

// guardrailKey identifies one series of flexway.guardrail.matches.
type guardrailKey struct{ policy, rule, phase, action string }

// counterSets caches the attribute sets of a counter's series by their
// labels (a map under a lock, so that a lookup boxes no key): a repeated
// series builds no attribute set.
type counterSets[K comparable] struct {
	mu   sync.RWMutex
	sets map[K]metric.AddOption
}

// get is k's option, built by attrs the first time k is seen.
func (c *counterSets[K]) get(k K, attrs func() attribute.Set) metric.AddOption {
	c.mu.RLock()
	opt, ok := c.sets[k]
	c.mu.RUnlock()
	if ok {
		return opt
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if opt, ok = c.sets[k]; !ok {
		if c.sets == nil {
			c.sets = map[K]metric.AddOption{}
		}
		s := attrs()
		opt = metric.WithAttributeSet(s)
		c.sets[k] = opt
	}
	return opt
}

func (m *Metrics) policyInstrument() error {
	var err error
	m.wouldDeny, err = m.meter.Int64Counter("flexway.policy.would_deny",
		metric.WithUnit("{call}"),
		metric.WithDescription("Calls a shadow policy (ai.policies, governance.mode shadow) would have refused, by policy and reason (model_not_allowed, backend_not_allowed); the calls went on."))
	if err != nil {
		return err
	}
	m.guardrailMatches, err = m.meter.Int64Counter("flexway.guardrail.matches",
		metric.WithUnit("{verdict}"),
		metric.WithDescription("Guardrail verdicts (ai.policies guardrails), one per call, policy, rule type, phase and action (deny, redact, log; would_deny, would_redact for a shadow policy's rule)."))
	return err
}

// PolicyWouldDeny counts one call that the shadow policy named policy
// would have refused with reason; Prometheus exports it as
// flexway_policy_would_deny_total{policy,reason}. policy is a name of
// ai.policies and reason one of server/policy's Reason* constants, a
// bounded set (the audit line's would_deny, never anything a caller
// sent). Safe for concurrent use; a repeated series builds no attribute
// set (the SDK's Add may still allocate its options slice).
func (m *Metrics) PolicyWouldDeny(policy, reason string) {
	opt := m.wouldDenySets.get(wouldDenyKey{policy, reason}, func() attribute.Set {
		return attribute.NewSet(attribute.String("policy", policy), attribute.String("reason", reason))
	})
	m.wouldDeny.Add(context.Background(), 1, opt)
}

// GuardrailMatch counts one guardrail verdict of a call: the rule of type
// rule (pii, secrets, injection, banned, regex, json_schema, webhook) of
// the policy named policy matched in phase (prompt, response) and did
// action (deny, redact, log, would_deny, would_redact); Prometheus
// exports it as flexway_guardrail_matches_total{policy,rule,phase,action}.
// Every label is a configuration name or one of those fixed words (the
// audit line's guardrails, never a text). Safe for concurrent use; a
// repeated series builds no attribute set.
func (m *Metrics) GuardrailMatch(policy, rule, phase, action string) {
	opt := m.guardrailSets.get(guardrailKey{policy, rule, phase, action}, func() attribute.Set {
		return attribute.NewSet(attribute.String("policy", policy), attribute.String("rule", rule),
			attribute.String("phase", phase), attribute.String("action", action))
	})
	m.guardrailMatches.Add(context.Background(), 1, opt)
}
