package money

import (
	"math"
	"testing"
)

func TestTieredTokenCost(t *testing.T) {
	for _, tc := range []struct {
		name           string
		tokens, prices [4]int64
		want           int64
	}{
		// 600 uncached at 3 €/M, 300 read at 0.30 €/M, 100 written at
		// 3.75 €/M, 50 out at 15 €/M: 1800000 + 90000 + 375000 + 750000.
		{"four tiers", [4]int64{600, 300, 100, 50}, [4]int64{3e9, 3e8, 3.75e9, 15e9}, 3_015_000},
		{"same as TokenCost for two", [4]int64{1000, 0, 0, 2000}, [4]int64{5e8, 7, 9, 1.5e9}, TokenCost(1000, 5e8, 2000, 1.5e9)},
		{"rounded once, not per tier", [4]int64{250_000, 250_000, 250_000, 250_000}, [4]int64{1, 1, 1, 1}, 1},
		{"one token rounds up", [4]int64{0, 1, 0, 0}, [4]int64{0, 1, 0, 0}, 1},
		{"negative counts and prices are 0", [4]int64{-5, 1_000_000, 3, 1_000_000}, [4]int64{1e6, -1, 1e6, 0}, 3},
		{"saturates", [4]int64{math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64}, [4]int64{math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64}, math.MaxInt64},
		{"product over 2^64, quotient fits", [4]int64{0, 5_000_000_000_000, 0, 0}, [4]int64{0, 4_000_000_000, 0, 0}, 20_000_000_000_000_000},
	} {
		if got := TieredTokenCost(tc.tokens, tc.prices); got != tc.want {
			t.Errorf("%s: TieredTokenCost(%v, %v) = %d, want %d", tc.name, tc.tokens, tc.prices, got, tc.want)
		}
	}
}
