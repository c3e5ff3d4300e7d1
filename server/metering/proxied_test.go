package metering

import (
	"math"
	"testing"
)

func TestCostPerThousand(t *testing.T) {
	for _, tc := range []struct{ units, price, want int64 }{
		{1, 2_000_000_000, 2_000_000}, // 2 € per 1,000 calls: 0.002 € a call
		{1, 1, 1},                     // rounded up to the next nano-euro
		{1500, 1000, 1500},
		{1501, 999, 1500}, // 1,499,499 / 1,000 = 1,499.499 → 1,500
		{0, 1000, 0},
		{10, 0, 0},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64}, // saturates
	} {
		if got := costPerThousand(tc.units, tc.price); got != tc.want {
			t.Errorf("costPerThousand(%d, %d) = %d, want %d", tc.units, tc.price, got, tc.want)
		}
	}
}
