package money

import (
	"math"
	"math/bits"
)

// perMillion and perThousand are the divisors of prices per million tokens
// and per thousand units.
const (
	perMillion  = 1_000_000
	perThousand = 1_000
)

// TokenCost returns the price in nano-euros of a call that used in input
// and out output tokens at inPrice and outPrice nano-euros per million
// tokens: (in×inPrice + out×outPrice) / 10⁶, rounded up to the next
// nano-euro for the call as a whole (not per side). It is computed in
// 128-bit integers, so it never overflows; a result beyond math.MaxInt64
// saturates at math.MaxInt64. Negative token counts and negative prices
// count as 0.
func TokenCost(in, inPrice, out, outPrice int64) int64 {
	h1, l1 := bits.Mul64(nonNeg(in), nonNeg(inPrice))
	h2, l2 := bits.Mul64(nonNeg(out), nonNeg(outPrice))
	lo, c := bits.Add64(l1, l2, 0)
	hi, _ := bits.Add64(h1, h2, c) // each product < 2^126: no carry out
	return ceilDiv(hi, lo, perMillion)
}

// PerThousand returns the price in nano-euros of units (calls, or bytes) at
// nanoPerThousand nano-euros per thousand units: units × nanoPerThousand /
// 1000, rounded up to the next nano-euro, saturating at math.MaxInt64. A
// count or price ≤ 0 costs 0.
func PerThousand(units, nanoPerThousand int64) int64 {
	if units <= 0 || nanoPerThousand <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(units), uint64(nanoPerThousand))
	return ceilDiv(hi, lo, perThousand)
}

// ceilDiv returns the 128-bit value hi:lo divided by d, rounded up,
// saturating at math.MaxInt64.
func ceilDiv(hi, lo, d uint64) int64 {
	lo, c := bits.Add64(lo, d-1, 0)
	hi += c
	if hi >= d { // the quotient would not fit in 64 bits
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, d)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

func nonNeg(v int64) uint64 {
	if v < 0 {
		return 0
	}
	return uint64(v)
}

// AddSat returns a+b saturated at the int64 bounds: a sum past
// math.MaxInt64 is math.MaxInt64, one below math.MinInt64 is
// math.MinInt64. For tokens and nano-euros counted against caps, where a
// wrapped sum would turn a huge charge into a credit.
func AddSat(a, b int64) int64 {
	s := a + b
	if (s > a) != (b > 0) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// MulSat returns a×b saturated at the int64 bounds: a product past
// math.MaxInt64 is math.MaxInt64, one below math.MinInt64 is
// math.MinInt64. For tokens and nano-euros (a per-choice allowance times
// the number of choices).
func MulSat(a, b int64) int64 {
	neg := (a < 0) != (b < 0)
	hi, lo := bits.Mul64(abs(a), abs(b))
	switch {
	case a == 0 || b == 0:
		return 0
	case neg && (hi != 0 || lo > 1<<63):
		return math.MinInt64
	case !neg && (hi != 0 || lo > math.MaxInt64):
		return math.MaxInt64
	case neg:
		return int64(-lo)
	}
	return int64(lo)
}

// abs returns |v|; |math.MinInt64| fits a uint64.
func abs(v int64) uint64 {
	if v < 0 {
		return -uint64(v)
	}
	return uint64(v)
}
