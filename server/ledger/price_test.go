package ledger

import (
	"math"
	"testing"
)

// claude is priced as Anthropic prices Claude Sonnet: 3 €/M input,
// 0.30 €/M cache reads, 3.75 €/M cache writes, 15 €/M output, plus 0.002 €
// a call.
var claude = Price{Input: 3e9, Output: 15e9, CacheRead: 3e8, CacheWrite: 3.75e9, PerCall: 2_000_000}

func TestCharge(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		p                    Price
		in, read, write, out int64
		want                 int64
	}{
		// 600 uncached: 1800000, 300 read: 90000, 100 written: 375000,
		// 50 out: 750000, per call 2000000.
		{"every tier and the per-call price", claude, 1000, 300, 100, 50, 1_800_000 + 90_000 + 375_000 + 750_000 + 2_000_000},
		{"no cache: Cost plus PerCall", claude, 1000, 0, 0, 50, claude.Cost(1000, 50) + 2_000_000},
		{"all read", claude, 1000, 1000, 0, 0, 300_000 + 2_000_000},
		{"a read tier over the input is clamped to it", claude, 1000, 5000, 0, 0, 300_000 + 2_000_000},
		{"reads first, then writes up to the input", claude, 1000, 800, 800, 0, 240_000 + 750_000 + 2_000_000},
		{"negative tiers count as 0", claude, 1000, -5, -5, 0, 3_000_000 + 2_000_000},
		{"negative input: nothing but the call", claude, -1000, 10, 10, 0, 2_000_000},
		{"per call alone (an a2a agent)", Price{PerCall: 5_000_000}, 0, 0, 0, 0, 5_000_000},
		{"negative per-call price counts as 0", Price{Input: 1e9, PerCall: -7}, 1000, 0, 0, 0, 1_000_000},
		{"rounded once for the call", Price{Input: 1, CacheRead: 1, CacheWrite: 1, Output: 1}, 750_000, 250_000, 250_000, 250_000, 1},
		{"saturates with the per-call price", Price{Input: math.MaxInt64, PerCall: math.MaxInt64}, math.MaxInt64, 0, 0, 0, math.MaxInt64},
	} {
		if got := tc.p.Charge(tc.in, tc.read, tc.write, tc.out); got != tc.want {
			t.Errorf("%s: Charge(%d, %d, %d, %d) = %d, want %d", tc.name, tc.in, tc.read, tc.write, tc.out, got, tc.want)
		}
	}
}

// TestBoundIsUpperBound: the reservation's bound is at least the charge of
// any split of the same tokens into tiers, and prices the input at the
// highest tier.
func TestBoundIsUpperBound(t *testing.T) {
	if got, want := claude.Bound(1000, 50), int64(3_750_000+750_000+2_000_000); got != want {
		t.Errorf("Bound(1000, 50) = %d, want %d (input at cache_write, the dearest)", got, want)
	}
	cheapInput := Price{Input: 1e8, CacheRead: 5e8, Output: 1e9}
	if got, want := cheapInput.Bound(1000, 0), int64(500_000); got != want {
		t.Errorf("Bound with a dearer cache_read = %d, want %d", got, want)
	}
	for _, p := range []Price{claude, cheapInput, {Input: 7, Output: 3}} {
		for read := int64(0); read <= 1000; read += 250 {
			for write := int64(0); write+read <= 1000; write += 250 {
				if c, b := p.Charge(1000, read, write, 50), p.Bound(1000, 50); c > b {
					t.Errorf("%+v: Charge(1000, %d, %d, 50) = %d over Bound %d", p, read, write, c, b)
				}
			}
		}
	}
}
