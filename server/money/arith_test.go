package money

import (
	"math"
	"testing"
)

func TestTokenCost(t *testing.T) {
	tests := []struct {
		name                     string
		in, inPrice, out, outPrc int64
		want                     int64
	}{
		{"0.50 €/M in, 1000 tokens", 1000, 500_000_000, 0, 0, 500_000},
		{"in and out", 1000, 500_000_000, 2000, 1_500_000_000, 500_000 + 3_000_000},
		{"one nano-euro per million, one token rounds up", 1, 1, 0, 0, 1},
		{"exactly one million", 1_000_000, 1, 0, 0, 1},
		{"one past a million rounds up", 1_000_001, 1, 0, 0, 2},
		{"rounded once per call, not per side", 500_000, 1, 500_000, 1, 1},
		{"zero", 0, 7, 0, 9, 0},
		{"negative counts as zero", -5, 1_000_000, 3, 1_000_000, 3},
		{"negative price counts as zero", 5, -1_000_000, 3, 1_000_000, 3},
		{"large but exact", math.MaxInt64, 1_000_000, 0, 0, math.MaxInt64},
		{"just over int64 saturates", math.MaxInt64, 1_000_001, 0, 0, math.MaxInt64},
		{"128-bit product saturates", math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{"product over 2^64 but quotient fits", 5_000_000_000_000, 4_000_000_000, 0, 0, 20_000_000_000_000_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TokenCost(tt.in, tt.inPrice, tt.out, tt.outPrc); got != tt.want {
				t.Errorf("TokenCost(%d, %d, %d, %d) = %d, want %d", tt.in, tt.inPrice, tt.out, tt.outPrc, got, tt.want)
			}
		})
	}
}

func TestPerThousand(t *testing.T) {
	for _, tc := range []struct {
		name               string
		units, price, want int64
	}{
		{"2 € per 1,000 calls is 0.002 € a call", 1, 2_000_000_000, 2_000_000},
		{"rounded up to the next nano-euro", 1, 1, 1},
		{"exact", 1500, 1000, 1500},
		{"1,499,499 / 1,000 = 1,499.499 → 1,500", 1501, 999, 1500},
		{"no units", 0, 1000, 0},
		{"free", 10, 0, 0},
		{"negative units cost nothing", -10, 1000, 0},
		{"negative price costs nothing", 10, -1000, 0},
		{"saturates", math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{"just fits", math.MaxInt64, 1000, math.MaxInt64},
		{"just over", math.MaxInt64, 1001, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PerThousand(tc.units, tc.price); got != tc.want {
				t.Errorf("PerThousand(%d, %d) = %d, want %d", tc.units, tc.price, got, tc.want)
			}
		})
	}
}

// TestSaturating checks AddSat and MulSat, each case both ways round.
func TestSaturating(t *testing.T) {
	for _, tc := range []struct {
		name       string
		op         func(a, b int64) int64
		a, b, want int64
	}{
		{"add small", AddSat, 2, 3, 5},
		{"add zero", AddSat, 0, 0, 0},
		{"add negative", AddSat, -2, -3, -5},
		{"add mixed", AddSat, math.MaxInt64, -1, math.MaxInt64 - 1},
		{"add to max exactly", AddSat, math.MaxInt64 - 1, 1, math.MaxInt64},
		{"add past max", AddSat, math.MaxInt64, 1, math.MaxInt64},
		{"add max to max", AddSat, math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{"add to min exactly", AddSat, math.MinInt64 + 1, -1, math.MinInt64},
		{"add past min", AddSat, math.MinInt64, -1, math.MinInt64},
		{"add min to max", AddSat, math.MinInt64, math.MaxInt64, -1},
		{"mul small", MulSat, 6, 7, 42},
		{"mul zero", MulSat, 0, math.MaxInt64, 0},
		{"mul zero by min", MulSat, math.MinInt64, 0, 0},
		{"mul one", MulSat, math.MaxInt64, 1, math.MaxInt64},
		{"mul fits", MulSat, math.MaxInt64 / 2, 2, math.MaxInt64 - 1},
		{"mul past max", MulSat, math.MaxInt64/2 + 1, 2, math.MaxInt64},
		{"mul max by max", MulSat, math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{"mul negative", MulSat, -6, 7, -42},
		{"mul two negatives", MulSat, -6, -7, 42},
		{"mul to min exactly", MulSat, math.MinInt64 / 2, 2, math.MinInt64},
		{"mul past min", MulSat, math.MinInt64/2 - 1, 2, math.MinInt64},
		{"mul min by one", MulSat, math.MinInt64, 1, math.MinInt64},
		{"mul min by minus one", MulSat, math.MinInt64, -1, math.MaxInt64},
		{"mul min by min", MulSat, math.MinInt64, math.MinInt64, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.op(tc.a, tc.b); got != tc.want {
				t.Errorf("(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
			}
			if got := tc.op(tc.b, tc.a); got != tc.want {
				t.Errorf("(%d, %d) = %d, want %d", tc.b, tc.a, got, tc.want)
			}
		})
	}
}
