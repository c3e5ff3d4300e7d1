package backends

import "math"

// ClampUsage returns a wire format's token counts as OpenAI's usage may
// say them, whatever the upstream sent: every count at least 0, cached at
// most prompt, and total prompt + completion (saturating at
// math.MaxInt64) unless the upstream's own total is larger. The counts are
// in tokens: prompt every input token, cached those of them read from the
// provider's cache, completion the output.
func ClampUsage(prompt, completion, total, cached int64) (p, c, t, r int64) {
	p, c, t, r = max(prompt, 0), max(completion, 0), max(total, 0), max(cached, 0)
	r = min(r, p)
	sum := p + c
	if sum < p { // overflow
		sum = math.MaxInt64
	}
	return p, c, max(t, sum), r
}

// AddTokens is a + b for non-negative token counts, saturating at
// math.MaxInt64; a negative count is taken as 0.
func AddTokens(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}
