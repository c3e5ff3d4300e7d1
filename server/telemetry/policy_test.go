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

// TestGuardrailMatch: each verdict counts under its policy, rule, phase
// and action, with Prometheus's name.
func TestGuardrailMatch(t *testing.T) {
	m := newTest(t, Options{})
	m.GuardrailMatch("cards", "pii", "prompt", "redact")
	m.GuardrailMatch("cards", "pii", "prompt", "redact")
	m.GuardrailMatch("dry", "secrets", "response", "would_deny")
	_, series := scrape(t, m)
	only(t, series, "flexway_guardrail_matches_total",
		`flexway_guardrail_matches_total{action="redact",phase="prompt",policy="cards",rule="pii"} 2`,
		`flexway_guardrail_matches_total{action="would_deny",phase="response",policy="dry",rule="secrets"} 1`)
	if n := testing.AllocsPerRun(100, func() { m.GuardrailMatch("dry", "secrets", "response", "would_deny") }); n > 1 {
		t.Errorf("%v allocations per repeated series, want at most the SDK's options slice", n)
	}
}
