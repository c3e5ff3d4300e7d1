package metering_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/metering"
	"github.com/flexway/flexway/server/money"
)

// tieredPrice is 3 €/M input, 0.30 €/M cache reads, 3.75 €/M cache
// writes, 15 €/M output and 0.002 € a call.
var tieredPrice = ledger.Price{Input: 3e9, Output: 15e9, CacheRead: 3e8, CacheWrite: 3.75e9, PerCall: 2_000_000}

// cappedMeter is a meter over a fresh ledger where tenant acme has a
// euro cap and a token cap high enough for any test call, so that every
// reservation is held in the store and readable with Usage.
func cappedMeter(t *testing.T, cfg metering.Config) (*metering.Meter, *ledger.Ledger) {
	t.Helper()
	store, err := ledger.OpenEmbedded(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	eur, tok := int64(1_000_000_000_000), int64(1_000_000_000)
	led := ledger.New(ledger.Policy{Tenants: map[string]ledger.TenantPolicy{
		"acme": {Limits: ledger.Limits{NanoEURPerMonth: &eur, TokensPerMonth: &tok}},
	}}, store, ledger.Options{})
	t.Cleanup(func() { _ = led.Close() })
	cfg.Ledger = led
	if cfg.Routes == nil {
		cfg.Routes = routes()
	}
	return metering.New(cfg), led
}

// usage returns acme's tokens_per_month and eur_per_month usage.
func usage(t *testing.T, led *ledger.Ledger) (tokens, nano ledger.CapUsage) {
	t.Helper()
	us, err := led.Usage(context.Background(), ledger.Account{Tenant: "acme"})
	if err != nil || len(us) != 2 {
		t.Fatalf("Usage: %+v, %v", us, err)
	}
	return us[0], us[1]
}

// reserveTiered reserves a chat call of acme on main at tieredPrice; it
// returns the call's state, its reservation, the estimate reserved and
// the ledger.
func reserveTiered(t *testing.T) (*call.State, metering.Reservation, metering.Estimate, *ledger.Ledger) {
	t.Helper()
	m, led := cappedMeter(t, metering.Config{Prices: map[string]ledger.Price{"main": tieredPrice}})
	st := &call.State{Tenant: "acme"}
	req := chatRequest()
	res, err := m.Reserve(context.Background(), st, req)
	if err != nil {
		t.Fatal(err)
	}
	est, _ := m.EstimateFor(req, st.Plan)
	return st, res, est, led
}

// TestSettleChargesCacheTiers: a served call is charged its uncached
// input at input, its cache reads at cache_read, its writes at
// cache_write, its output and the per-call price; the token cap counts
// every input token; the reservation held the input at the dearest tier
// plus the per-call price.
func TestSettleChargesCacheTiers(t *testing.T) {
	st, res, est, led := reserveTiered(t)
	tok, eur := usage(t, led)
	wantReserved := money.AddSat(money.TokenCost(est.Input, 3.75e9, est.Output, 15e9), 2_000_000)
	if eur.Reserved != wantReserved || tok.Reserved != est.Input+est.Output {
		t.Fatalf("reserved %d nano-euros, %d tokens; want %d (input at cache_write, plus per call), %d", eur.Reserved, tok.Reserved, wantReserved, est.Input+est.Output)
	}
	st.SetOutcome(call.Outcome{Backend: "main", Served: true, UsageReported: true,
		InputTokens: 1000, CacheReadTokens: 300, CacheWriteTokens: 100, OutputTokens: 50})
	res.Settle(context.Background())
	// 600 uncached at 3 €/M, 300 read at 0.30, 100 written at 3.75, 50
	// out at 15, and the call.
	const want = 1_800_000 + 90_000 + 375_000 + 750_000 + 2_000_000
	tok, eur = usage(t, led)
	if eur.Committed != want || eur.Reserved != 0 || tok.Committed != 1050 {
		t.Errorf("committed %d nano-euros (reserved %d), %d tokens; want %d, 0, 1050", eur.Committed, eur.Reserved, tok.Committed, want)
	}
	if o := st.Outcome(); o.CostNanoEUR != want || o.CacheReadTokens != 300 || o.CacheWriteTokens != 100 || o.UsageEstimated {
		t.Errorf("outcome %+v: want cost %d with the tiers kept", o, want)
	}
}

// TestPerCallOnlyWhenServed: the per-call price is charged once per
// served call, and a call not served costs nothing, per-call price
// included.
func TestPerCallOnlyWhenServed(t *testing.T) {
	m, led := cappedMeter(t, metering.Config{Prices: map[string]ledger.Price{"main": {PerCall: 5_000_000}}})
	for i, served := range []bool{true, false, true} {
		st := &call.State{Tenant: "acme"}
		res, err := m.Reserve(context.Background(), st, chatRequest())
		if err != nil {
			t.Fatal(err)
		}
		if _, eur := usage(t, led); eur.Reserved != 5_000_000 {
			t.Fatalf("call %d: reserved %d nano-euros, want the per-call 5000000", i, eur.Reserved)
		}
		st.SetOutcome(call.Outcome{Backend: "main", Served: served, UsageReported: served, InputTokens: 10, OutputTokens: 2})
		res.Settle(context.Background())
	}
	if _, eur := usage(t, led); eur.Committed != 10_000_000 || eur.Reserved != 0 {
		t.Errorf("committed %d, reserved %d; want two calls served at 5000000, the failed one free", eur.Committed, eur.Reserved)
	}
}

// TestEstimatedUsageWithPerCall: an answer without usage (an a2a agent)
// is charged its estimated tokens at input and output, marked estimated,
// plus the per-call price; no tier is assumed cached.
func TestEstimatedUsageWithPerCall(t *testing.T) {
	st, res, est, led := reserveTiered(t)
	st.SetOutcome(call.Outcome{Backend: "main", Served: true, OutputBytes: 300, OutputEvents: 2})
	res.Settle(context.Background())
	out := metering.TokensForBytes(300)
	want := money.AddSat(money.TokenCost(est.InputCharge, 3e9, out, 15e9), 2_000_000)
	o := st.Outcome()
	if !o.UsageEstimated || o.InputTokens != est.InputCharge || o.OutputTokens != out || o.CostNanoEUR != want {
		t.Errorf("outcome %+v: want estimated %d in, %d out, cost %d", o, est.InputCharge, out, want)
	}
	if tok, eur := usage(t, led); eur.Committed != want || tok.Committed != est.InputCharge+out {
		t.Errorf("committed %d nano-euros, %d tokens; want %d, %d", eur.Committed, tok.Committed, want, est.InputCharge+out)
	}
}
