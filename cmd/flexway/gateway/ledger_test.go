package gateway

import (
	"testing"

	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/ledger"
)

// TestLedgerPolicyPerMinute: tokens_per_minute and requests_per_minute of
// ai.budget.default, a tenant and an agent reach the ledger's limits, and
// every ai.policies entry with a budget is a ledger policy by name, its
// per mapped (tenant when unset); a policy without a budget is none.
func TestLedgerPolicyPerMinute(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	cfg := &config.Config{}
	cfg.AI.Budget.Default = config.Caps{TokensPerMinute: n(1000), RequestsPerMinute: n(10)}
	cfg.AI.Tenants = map[string]config.Tenant{"acme": {
		Budget: config.Caps{TokensPerMinute: n(500), TokensPerDay: n(9000)},
		Agents: map[string]config.Agent{"bot": {Budget: config.Caps{RequestsPerMinute: n(3)}}},
	}}
	cfg.AI.Policies = []config.Policy{
		{Name: "chat-rpm", Budget: &config.PolicyBudget{Caps: config.Caps{RequestsPerMinute: n(7)}}},
		{Name: "per-agent", Budget: &config.PolicyBudget{Caps: config.Caps{TokensPerMinute: n(300)}, Per: config.PerAgent}},
		{Name: "shared", Budget: &config.PolicyBudget{Caps: config.Caps{TokensPerDay: n(50)}, Per: config.PerPolicy}},
		{Name: "allowlist", Governance: &config.Governance{Models: []string{"*"}}},
	}
	p, err := ledgerPolicy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	eq := func(name string, got, want *int64) {
		t.Helper()
		switch {
		case want == nil && got != nil:
			t.Errorf("%s: %d, want none", name, *got)
		case want != nil && (got == nil || *got != *want):
			t.Errorf("%s: %v, want %d", name, got, *want)
		}
	}
	eq("default tokens_per_minute", p.Default.TokensPerMinute, n(1000))
	eq("default requests_per_minute", p.Default.RequestsPerMinute, n(10))
	acme := p.Tenants["acme"]
	eq("acme tokens_per_minute", acme.Limits.TokensPerMinute, n(500))
	eq("acme requests_per_minute", acme.Limits.RequestsPerMinute, nil) // inherits Default in the ledger
	eq("acme tokens_per_day", acme.Limits.TokensPerDay, n(9000))
	eq("bot requests_per_minute", acme.Agents["bot"].RequestsPerMinute, n(3))
	eq("bot tokens_per_minute", acme.Agents["bot"].TokensPerMinute, nil)
	if len(p.Policies) != 3 {
		t.Fatalf("policies %v, want chat-rpm, per-agent and shared", p.Policies)
	}
	for name, per := range map[string]ledger.Per{"chat-rpm": ledger.PerTenant, "per-agent": ledger.PerAgent, "shared": ledger.PerPolicy} {
		if got := p.Policies[name].Per; got != per {
			t.Errorf("%s: per %q, want %q", name, got, per)
		}
	}
	eq("chat-rpm requests_per_minute", p.Policies["chat-rpm"].Limits.RequestsPerMinute, n(7))
	eq("per-agent tokens_per_minute", p.Policies["per-agent"].Limits.TokensPerMinute, n(300))
	eq("shared tokens_per_day", p.Policies["shared"].Limits.TokensPerDay, n(50))
}
