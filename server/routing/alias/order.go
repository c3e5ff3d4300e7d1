package alias

import (
	"cmp"
	"math"
	"slices"

	"github.com/flexway/flexway/server/config"
)

// sortTargets sorts the targets of a cost, latency or cost_latency alias
// in place, stably (ties keep the declared order): see [Compile].
func sortTargets(s config.AliasStrategy, targets []Target, backends map[string]config.Backend) {
	slices.SortStableFunc(targets, func(a, b Target) int {
		ba, bb := backends[a.Backend], backends[b.Backend]
		switch s {
		case config.StrategyCost:
			return cmp.Compare(price(ba), price(bb))
		case config.StrategyLatency:
			return cmp.Compare(latency(ba), latency(bb))
		}
		return cmp.Or(cmp.Compare(price(ba), price(bb)), cmp.Compare(latency(ba), latency(bb)))
	})
}

// price is the declared price a cost alias sorts by: input plus output,
// in nano-euros per million tokens, saturating.
func price(b config.Backend) int64 {
	in, out := b.Price.InputNanoEURPerMTok(), b.Price.OutputNanoEURPerMTok()
	if in > math.MaxInt64-out {
		return math.MaxInt64
	}
	return in + out
}

// latency is the declared expected_latency a latency alias sorts by;
// unset (zero) sorts last.
func latency(b config.Backend) int64 {
	if b.ExpectedLatency <= 0 {
		return math.MaxInt64
	}
	return int64(b.ExpectedLatency)
}
