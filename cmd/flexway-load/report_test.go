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
		Best:   [numPaths]float64{4000, 2000, 3000},
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

func TestRelayFloor(t *testing.T) {
	t.Parallel()
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	r := &report{
		C1: pair{
			Direct:  dist{N: 10, P50: us(200), P99: us(400)},
			Flexway: dist{N: 10, P50: us(600), P99: us(900)},
		},
		RelayC1: dist{N: 10, P50: us(380), P99: us(650)},
		Fixed: openPair{pair: pair{
			Direct:  dist{N: 10, P50: us(300), P99: us(900)},
			Flexway: dist{N: 10, P50: us(700), P99: us(2500)},
		}},
		RelayFixed: openOne{dist: dist{N: 10, P50: us(500), P99: us(1200)}},
		Best:       [numPaths]float64{4000, 2000, 3000},
		Steps:      []step{{Rate: 500}},
	}
	got := r.relayFloor()
	for _, want := range []string{
		"adds 200.0 µs at p50 and 300.0 µs at p99 at 1000 req/s (concurrency 1: 180.0 µs at p50, 250.0 µs at p99)",
		"Flexway adds 200.0 µs over the relay (flexway − relay at p50; 1.30 ms at p99)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("relayFloor() = %q; want it to contain %q", got, want)
		}
	}

	md := string(r.markdown())
	for _, want := range []string{
		// The flexway figures are unchanged; the relay's follow.
		"| open loop 1000 req/s | 10 | 300.0 µs | 700.0 µs | **400.0 µs** | 900.0 µs | 2.50 ms | **1.60 ms** | 500.0 µs (+200.0 µs) | 1.20 ms (+300.0 µs) |",
		"| concurrency 1 | 10 | 200.0 µs | 600.0 µs | **400.0 µs** | 400.0 µs | 900.0 µs | **500.0 µs** | 380.0 µs (+180.0 µs) | 650.0 µs (+250.0 µs) |",
		"Ratio flexway / direct: 0.50.",
		"Relay path: best passing rate 3000 req/s; ratio relay / direct: 0.75.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}

	if got := (&report{}).relayFloor(); !strings.Contains(got, "not measured") {
		t.Errorf("relayFloor() with nothing measured = %q", got)
	}
	if got, want := (relayCellsOf(dist{N: 1, P50: us(90)}, dist{N: 1, P50: us(100)})), "90.0 µs (−10.0 µs)"; got != want {
		t.Errorf("relay faster than direct: cell %q, want %q", got, want)
	}
}

// relayCellsOf is the p50 cell of relayCells.
func relayCellsOf(relay, direct dist) string {
	p50, _ := relayCells(relay, direct)
	return p50
}

func TestHoldFloor(t *testing.T) {
	t.Parallel()
	flexway := &memory{IdleKiB: 20000, OpenKiB: 60000, Streams: 1000} // 40.0 KiB
	hold := &memory{IdleKiB: 8000, OpenKiB: 35500, Streams: 1000}     // 27.5 KiB
	tests := []struct {
		name         string
		mem, hold    *memory
		want, reject []string
	}{
		{
			name: "both",
			mem:  flexway, hold: hold,
			want: []string{
				"A bare net/http server holding the same streams open, with no upstream connection (the harness's -hold-mode), used 27.5 KiB per open stream (VmRSS idle 8000 KiB; with 1000 streams open 35500 KiB): the floor of an HTTP/1.1 front on net/http here; Flexway adds 12.5 KiB over it (its upstream connection, the in-process gRPC stream and the call's state).",
			},
		},
		{
			name: "flexway_below_the_floor",
			mem:  &memory{IdleKiB: 20000, OpenKiB: 46500, Streams: 1000}, hold: hold,
			want:   []string{"used 27.5 KiB per open stream", "; Flexway used 1.0 KiB less than it in this run"},
			reject: []string{"Flexway adds"},
		},
		{
			name: "hold_only",
			hold: hold,
			want: []string{
				"Not measured.",
				"used 27.5 KiB per open stream (VmRSS idle 8000 KiB; with 1000 streams open 35500 KiB): the floor of an HTTP/1.1 front on net/http here.",
			},
			reject: []string{"Flexway adds"},
		},
		{
			name: "flexway_only",
			mem:  flexway,
			want: []string{
				"**40.0 KiB per open stream**",
				"The floor of a bare net/http server holding the same streams open (the harness's -hold-mode) was not measured.",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &report{Memory: tt.mem, HoldMemory: tt.hold}
			md := string(r.markdown())
			_, section, _ := strings.Cut(md, "## Memory with 1000 open streams")
			for _, want := range tt.want {
				if !strings.Contains(section, want) {
					t.Errorf("the memory section lacks %q:\n%s", want, section)
				}
			}
			for _, reject := range tt.reject {
				if strings.Contains(section, reject) {
					t.Errorf("the memory section has %q:\n%s", reject, section)
				}
			}
			if !strings.Contains(md, "- Memory floor: the harness binary started again, as its own process, with `-hold-mode LISTEN`") {
				t.Errorf("What was on lacks the hold mode:\n%s", md)
			}
		})
	}

	// Flexway's figure and target row are the same with the floor beside them.
	with := &report{Memory: flexway, HoldMemory: hold}
	without := &report{Memory: flexway}
	if a, b := with.checks(), without.checks(); a[len(a)-1] != b[len(b)-1] {
		t.Errorf("memory target row %+v with the floor, %+v without", a[len(a)-1], b[len(b)-1])
	}
	for _, want := range []string{
		"| ≤ 30 KiB per open stream | 40.0 KiB | MISS |",
		"Flexway VmRSS idle (after warm-up) 20000 KiB; with 1000 streams open 60000 KiB; (open − idle) / streams = **40.0 KiB per open stream**.",
	} {
		if md := string(with.markdown()); !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
