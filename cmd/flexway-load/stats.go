package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// dist is a latency distribution reduced to what the report shows.
type dist struct {
	N              int
	P50, P99, P999 time.Duration
	Max            time.Duration
}

// summarize returns the distribution of samples, which it sorts in place.
// An empty slice gives the zero dist.
func summarize(samples []time.Duration) dist {
	if len(samples) == 0 {
		return dist{}
	}
	slices.Sort(samples)
	return dist{
		N:    len(samples),
		P50:  percentile(samples, 0.50),
		P99:  percentile(samples, 0.99),
		P999: percentile(samples, 0.999),
		Max:  samples[len(samples)-1],
	}
}

// percentile returns the q-quantile (0 < q ≤ 1) of sorted by the nearest-rank
// method: the smallest sample that at least q of the samples do not exceed.
// sorted must be sorted and not empty.
func percentile(sorted []time.Duration, q float64) time.Duration {
	// The epsilon keeps 0.99 × 100 at rank 99 despite binary rounding.
	rank := int(math.Ceil(q*float64(len(sorted)) - 1e-9))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// fmtDur formats d for the report: microseconds with one decimal below
// 1 ms, milliseconds with two decimals from there. Negative values keep their
// sign (an "added" figure can be below zero by noise).
func fmtDur(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "−", -d
	}
	if d < time.Millisecond {
		return fmt.Sprintf("%s%.1f µs", sign, float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%s%.2f ms", sign, float64(d)/float64(time.Millisecond))
}
