package money

import "math/bits"

// TieredTokenCost returns the price in nano-euros of a call whose tokens
// fall in up to four tiers (uncached input, cache reads, cache writes,
// output), tokens[i] of them at prices[i] nano-euros per million tokens:
// Σ tokens[i]×prices[i] / 10⁶, rounded up to the next nano-euro once for
// the call as a whole, as [TokenCost] does for two. It is computed in
// 128-bit integers (each product is below 2¹²⁶, so four never overflow
// 2¹²⁸); a result beyond math.MaxInt64 saturates at math.MaxInt64.
// Negative counts and negative prices count as 0.
func TieredTokenCost(tokens, prices [4]int64) int64 {
	var hi, lo uint64
	for i := range tokens {
		h, l := bits.Mul64(nonNeg(tokens[i]), nonNeg(prices[i]))
		var c uint64
		lo, c = bits.Add64(lo, l, 0)
		hi, _ = bits.Add64(hi, h, c)
	}
	return ceilDiv(hi, lo, perMillion)
}
