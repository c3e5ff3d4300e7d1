package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// wouldDenyKey identifies one series of flexway.policy.would_deny.
type wouldDenyKey struct{ policy, reason string }

func (m *Metrics) policyInstrument() error {
	var err error
	m.wouldDenySets = map[wouldDenyKey]metric.AddOption{}
	m.wouldDeny, err = m.meter.Int64Counter("flexway.policy.would_deny",
		metric.WithUnit("{call}"),
		metric.WithDescription("Calls a shadow policy (ai.policies, governance.mode shadow) would have refused, by policy and reason (model_not_allowed, backend_not_allowed); the calls went on."))
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
	k := wouldDenyKey{policy, reason}
	m.wouldDenyMu.RLock()
	opt, ok := m.wouldDenySets[k]
	m.wouldDenyMu.RUnlock()
	if !ok {
		m.wouldDenyMu.Lock()
		if opt, ok = m.wouldDenySets[k]; !ok {
			opt = metric.WithAttributeSet(attribute.NewSet(attribute.String("policy", policy), attribute.String("reason", reason)))
			m.wouldDenySets[k] = opt
		}
		m.wouldDenyMu.Unlock()
	}
	m.wouldDeny.Add(context.Background(), 1, opt)
}
