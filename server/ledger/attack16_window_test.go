package ledger

import (
	"math"
	"testing"
	"time"
)

// TestAttack16WindowSaturationUndercounts: a call committed with a huge
// usage (an upstream reporting absurd usage, committed past its
// reservation) saturates the window's running sum (money.AddSat); when
// that slot ages out, w.sum -= slot.amount leaves a sum below what the
// live slots hold, so the tokens of a later second stop counting and the
// tenant is admitted past tokens_per_minute.
func TestAttack16WindowSaturationUndercounts(t *testing.T) {
	clk := newClock(t0)
	l := newLedger(t, embeddedKind(), Policy{Default: Limits{TokensPerMinute: i64(100)}}, Options{Now: clk.Now})

	r1 := mustReserve(t, l, acme, Amount{Tokens: 1}) // slot t0
	clk.Add(time.Second)
	r2 := mustReserve(t, l, acme, Amount{Tokens: 99}) // slot t0+1
	mustCommit(t, l, r1, Amount{Tokens: math.MaxInt64 - 1})
	mustCommit(t, l, r2, Amount{Tokens: 99})

	clk.Set(t0.Add(61 * time.Second)) // t0's slot aged out; t0+1's 99 tokens count until t0+62
	if _, err := l.Reserve(ctx, acme, Amount{Tokens: 99}); err == nil {
		t.Fatal("99 tokens admitted at t0+61s although 99 of the 100-token cap were committed at t0+1s (window sum corrupted by saturation)")
	}
}

// TestAttack16RequestsPerMinuteZero: requests_per_minute: 0 refuses every
// call, on both stores (RetryAfter is 0 by design: it never fits).
func TestAttack16RequestsPerMinuteZero(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		clk := newClock(t0)
		l := newLedger(t, k, Policy{Default: Limits{RequestsPerMinute: i64(0)}}, Options{Now: clk.Now})
		_, err := l.Reserve(ctx, acme, Amount{Tokens: 1})
		e := refused(t, err)
		if e.Cap != RequestsPerMinute {
			t.Errorf("refusal %+v, want requests_per_minute", e)
		}
		if _, err := l.Check(ctx, acme); err == nil {
			t.Error("Check admits under requests_per_minute: 0")
		}
	})
}

// TestAttack16PolicyPerAgentNoAgent: a policy per: agent counts the
// tenant's own calls (no agent) in one bucket of the tenant: its cap holds
// them too.
func TestAttack16PolicyPerAgentNoAgent(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		clk := newClock(t0)
		l := newLedger(t, k, Policy{Policies: map[string]PolicyLimits{
			"p": {Limits: Limits{RequestsPerMinute: i64(1)}, Per: PerAgent},
		}}, Options{Now: clk.Now})
		a := Account{Tenant: "acme", Policies: []string{"p", "p"}}
		mustCommit(t, l, mustReserve(t, l, a, Amount{Tokens: 1}), Amount{Tokens: 1})
		if _, err := l.Reserve(ctx, a, Amount{Tokens: 1}); err == nil {
			t.Error("second call in the minute admitted under a per-agent policy of 1 rpm (no agent)")
		}
		other := Account{Tenant: "other", Policies: []string{"p"}}
		mustCommit(t, l, mustReserve(t, l, other, Amount{Tokens: 1}), Amount{Tokens: 1})
	})
}
