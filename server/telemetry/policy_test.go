package telemetry

import "testing"

// TestPolicyWouldDeny: each would-be refusal counts once under its policy
// and reason, with Prometheus's name.
func TestPolicyWouldDeny(t *testing.T) {
	m := newTest(t, Options{})
	m.PolicyWouldDeny("acme-dry-run", "model_not_allowed")
	m.PolicyWouldDeny("acme-dry-run", "model_not_allowed")
	m.PolicyWouldDeny("eu-only", "backend_not_allowed")
	_, series := scrape(t, m)
	only(t, series, "flexway_policy_would_deny_total",
		`flexway_policy_would_deny_total{policy="acme-dry-run",reason="model_not_allowed"} 2`,
		`flexway_policy_would_deny_total{policy="eu-only",reason="backend_not_allowed"} 1`)
	if n := testing.AllocsPerRun(100, func() { m.PolicyWouldDeny("eu-only", "backend_not_allowed") }); n > 1 {
		t.Errorf("%v allocations per repeated series, want at most the SDK's options slice", n)
	}
}
