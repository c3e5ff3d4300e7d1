package money

import (
	"math"
	"testing"
)

func TestEURToNano(t *testing.T) {
	cases := []struct {
		eur  float64
		want int64
	}{
		{0, 0},
		{0.15, 150_000_000},
		{0.1 + 0.2, 300_000_000}, // 0.30000000000000004 rounds at the ninth decimal
		{2.5, 2_500_000_000},
		{1e-9, 1},
		{0.0000000005, 1},   // half rounds away from zero
		{0.00000000049, 0},  // under half rounds down
		{-0.0000000015, -2}, // away from zero on the negative side too
		{9_223_372_035, 9_223_372_035_000_000_000},
	}
	for _, c := range cases {
		got, err := EURToNano(c.eur)
		if err != nil || got != c.want {
			t.Errorf("EURToNano(%v) = %d, %v; want %d", c.eur, got, err, c.want)
		}
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 9_223_372_036, 1e300} {
		if got, err := EURToNano(bad); err == nil {
			t.Errorf("EURToNano(%v) = %d, want an error", bad, got)
		}
	}
}
