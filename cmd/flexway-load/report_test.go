package main

import (
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Microsecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{name: "p50_of_100", sorted: hundred, q: 0.50, want: 50 * time.Microsecond},
		{name: "p99_of_100", sorted: hundred, q: 0.99, want: 99 * time.Microsecond},
		{name: "p100_is_max", sorted: hundred, q: 1, want: 100 * time.Microsecond},
		{name: "one_sample", sorted: hundred[:1], q: 0.99, want: time.Microsecond},
		{name: "p99_of_10_is_max", sorted: hundred[:10], q: 0.99, want: 10 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.sorted, tt.q); got != tt.want {
				t.Errorf("percentile(%d samples, %v) = %v, want %v", len(tt.sorted), tt.q, got, tt.want)
			}
		})
	}
}

func TestSummarizeEmpty(t *testing.T) {
	t.Parallel()
	if got := summarize(nil); got != (dist{}) {
		t.Errorf("summarize(nil) = %+v, want zero", got)
	}
}

func TestFmtDur(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{d: 150 * time.Microsecond, want: "150.0 µs"},
		{d: -42 * time.Microsecond, want: "−42.0 µs"},
		{d: 1500 * time.Microsecond, want: "1.50 ms"},
	}
	for _, tt := range tests {
		if got := fmtDur(tt.d); got != tt.want {
			t.Errorf("fmtDur(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestChecks(t *testing.T) {
	t.Parallel()
	r := &report{
		Fixed: openPair{pair: pair{
			Direct:  dist{N: 10, P50: 300 * time.Microsecond, P99: 900 * time.Microsecond},
			Flexway: dist{N: 10, P50: 400 * time.Microsecond, P99: 2500 * time.Microsecond},
		}},
		Best:   [2]float64{4000, 2000},
		Memory: &memory{IdleKiB: 20000, OpenKiB: 60000, Streams: 1000},
	}
	var got []string
	for _, c := range r.checks() {
		got = append(got, c.verdict())
	}
	// added p50 100 µs, added p99 1.6 ms, ratio 0.5, 40 KiB per stream.
	want := []string{"PASS", "MISS", "PASS", "MISS"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("verdicts = %v, want %v", got, want)
	}

	none := (&report{}).checks()
	for _, c := range none {
		if c.verdict() != "MISS (not measured)" {
			t.Errorf("%s with nothing measured: %s", c.Target, c.verdict())
		}
	}
}
