package ledger

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestCost(t *testing.T) {
	tests := []struct {
		name    string
		p       Price
		in, out int64
		want    int64
	}{
		{"0.50 €/M in, 1000 tokens", Price{Input: 500_000_000}, 1000, 0, 500_000},
		{"in and out", Price{Input: 500_000_000, Output: 1_500_000_000}, 1000, 2000, 500_000 + 3_000_000},
		{"one nano-euro per million, one token rounds up", Price{Input: 1}, 1, 0, 1},
		{"exactly one million", Price{Input: 1}, 1_000_000, 0, 1},
		{"one past a million rounds up", Price{Input: 1}, 1_000_001, 0, 2},
		{"rounded once per call, not per side", Price{Input: 1, Output: 1}, 500_000, 500_000, 1},
		{"zero", Price{Input: 7, Output: 9}, 0, 0, 0},
		{"negative counts as zero", Price{Input: 1_000_000, Output: 1_000_000}, -5, 3, 3},
		{"negative price counts as zero", Price{Input: -1_000_000, Output: 1_000_000}, 5, 3, 3},
		{"large but exact", Price{Input: 1_000_000}, math.MaxInt64, 0, math.MaxInt64},
		{"just over int64 saturates", Price{Input: 1_000_001}, math.MaxInt64, 0, math.MaxInt64},
		{"128-bit product saturates", Price{Input: math.MaxInt64, Output: math.MaxInt64}, math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{"product over 2^64 but quotient fits", Price{Input: 4_000_000_000}, 5_000_000_000_000, 0, 20_000_000_000_000_000},
	}
	for _, tt := range tests {
		if got := tt.p.Cost(tt.in, tt.out); got != tt.want {
			t.Errorf("%s: Cost(%d, %d) = %d, want %d", tt.name, tt.in, tt.out, got, tt.want)
		}
	}
}

func TestCapUnit(t *testing.T) {
	for c, want := range map[Cap]Unit{TokensPerDay: UnitTokens, TokensPerMonth: UnitTokens, EURPerMonth: UnitNanoEUR} {
		if got := c.Unit(); got != want {
			t.Errorf("%s.Unit() = %q, want %q", c, got, want)
		}
	}
}

func TestExceededErrorMessage(t *testing.T) {
	e := &ExceededError{
		Account: Account{Tenant: "acme"}, Scope: "tenant", Cap: TokensPerDay,
		Period: "2026-11-30", Limit: 100, Used: 100, RetryAfter: 3*time.Hour + 12*time.Minute,
	}
	if got, want := e.Error(), `tenant "acme" reached its tokens_per_day cap (100 tokens) for 2026-11-30; it resets in 3h12m`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	e = &ExceededError{
		Account: Account{Tenant: "acme", Agent: "support-bot"}, Scope: "agent", Cap: EURPerMonth,
		Period: "2026-11", Limit: 5_000_000_000, RetryAfter: 17*24*time.Hour + 4*time.Hour + 4*time.Minute + time.Second,
	}
	if got, want := e.Error(), `agent "support-bot" of tenant "acme" reached its eur_per_month cap (5.00 EUR) for 2026-11; it resets in 17d4h5m`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// An agent's call refused by its tenant's cap names the tenant.
	e.Scope = "tenant"
	e.RetryAfter = 30 * time.Second
	if got, want := e.Error(), `tenant "acme" reached its eur_per_month cap (5.00 EUR) for 2026-11; it resets in 30s`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	var err error = e
	var target *ExceededError
	if !errors.As(err, &target) || target.Cap != EURPerMonth {
		t.Errorf("errors.As failed: %v", target)
	}
}

func TestFormatWait(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                "0s",
		time.Nanosecond:                  "1s",
		59 * time.Second:                 "59s",
		time.Minute:                      "1m",
		time.Minute + time.Nanosecond:    "2m",
		time.Hour:                        "1h0m",
		25 * time.Hour:                   "1d1h0m",
		3*time.Hour + 11*time.Minute + 1: "3h12m",
	} {
		if got := formatWait(d); got != want {
			t.Errorf("formatWait(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestSoftThreshold(t *testing.T) {
	for _, tt := range []struct {
		limit, ppm, want int64
	}{
		{100, 800_000, 80},
		{100, 700_000, 70}, // 0.7*100 in float64 is 70.00000000000001
		{3, 500_000, 2},    // 1.5 rounds up
		{0, 800_000, 0},
		{math.MaxInt64, 1_000_000, math.MaxInt64},
		{math.MaxInt64, 1, 9_223_372_036_855},
	} {
		if got := softThreshold(tt.limit, tt.ppm); got != tt.want {
			t.Errorf("softThreshold(%d, %d) = %d, want %d", tt.limit, tt.ppm, got, tt.want)
		}
	}
}

func TestBucketIDEscapes(t *testing.T) {
	a := bucketID(Account{Tenant: "a:b"}, false, TokensPerDay, "2026-11-30")
	b := bucketID(Account{Tenant: "a", Agent: "b"}, true, TokensPerDay, "2026-11-30")
	c := bucketID(Account{Tenant: "a%3Ab"}, false, TokensPerDay, "2026-11-30")
	if a != "t:a%3Ab:tokens_per_day:2026-11-30" || b != "a:a:b:tokens_per_day:2026-11-30" || c != "t:a%253Ab:tokens_per_day:2026-11-30" {
		t.Errorf("bucket ids: %q %q %q", a, b, c)
	}
}
