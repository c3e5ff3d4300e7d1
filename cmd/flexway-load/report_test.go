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

// us is n microseconds.
func us(n int) time.Duration { return time.Duration(n) * time.Microsecond }

// sampleReport is a report with every phase filled: direct 300 µs p50,
// flexway adds 100 µs, the Go floor 150 µs, nginx 40 µs, the pipeline
// 140 µs (p50, both phases).
func sampleReport() *report {
	d := func(p50, p99, p999 int) dist { return dist{N: 1000, P50: us(p50), P99: us(p99), P999: us(p999)} }
	r := &report{Scale: 1, Nginx: "/usr/sbin/nginx (nginx/1.22.1)"}
	r.C1 = [numPaths]dist{pathDirect: d(300, 600, 900), pathFlexway: d(400, 900, 1500), pathPipeline: d(440, 950, 1600),
		pathGoFloor: d(450, 800, 1300), pathNginx: d(340, 700, 1000), pathRelay: d(350, 650, 950)}
	for i, x := range r.C1 {
		r.Fixed[i] = openOne{dist: x, Achieved: 1000}
	}
	// p99: flexway adds 300 µs, the Go floor 200 µs: MISS. p99.9: 600 vs 400 µs: PASS (≤ 1.5 ×).
	cpu := func(ticks int64) cpuUse { return cpuUse{Ticks: ticks, Requests: 1000, Hz: 100} } // 10 ms per tick
	r.C1CPU = [numPaths]cpuUse{pathFlexway: cpu(2), pathPipeline: cpu(3), pathGoFloor: cpu(3), pathNginx: cpu(1), pathRelay: cpu(1)}
	r.FixedCPU = [numPaths]cpuUse{pathFlexway: cpu(4), pathPipeline: cpu(5), pathGoFloor: cpu(3), pathNginx: cpu(1), pathRelay: cpu(1)}
	r.Steps = []step{{Rate: 500, Ran: [numPaths]bool{true, true, false, true, true, true}}}
	r.Best = [numPaths]float64{pathDirect: 4000, pathFlexway: 2000, pathGoFloor: 2000, pathNginx: 3000, pathRelay: 3000}
	r.FirstContent = [numPaths]dist{pathDirect: d(21000, 22000, 23000), pathFlexway: d(21500, 22500, 23500), pathGoFloor: d(21200, 22200, 23200),
		pathNginx: d(21100, 22100, 23100), pathRelay: d(21100, 22100, 23100)}
	r.Gaps = [numPaths]dist{pathDirect: d(20000, 21000, 22000), pathFlexway: d(20060, 21000, 22000), pathGoFloor: d(20020, 21000, 22000),
		pathNginx: d(20010, 21000, 22000), pathRelay: d(20010, 21000, 22000)}
	r.Memory = &memory{IdleKiB: 20000, OpenKiB: 40000, Streams: 1000}       // 20.0 KiB
	r.GoFloorMemory = &memory{IdleKiB: 8000, OpenKiB: 48000, Streams: 1000} // 40.0 KiB
	r.HoldMemory = &memory{IdleKiB: 8000, OpenKiB: 35500, Streams: 1000}    // 27.5 KiB
	return r
}

func TestChecks(t *testing.T) {
	t.Parallel()
	r := sampleReport()
	want := []struct{ target, verdict string }{
		{"added p50, concurrency 1 ≤ 0.8 × the Go floor's", "PASS"}, // 100 ≤ 120 µs
		{"added p50, concurrency 1 ≤ 3 × nginx's", "PASS"},          // 100 ≤ 3 × 40 µs
		{"added p50, 1000 req/s ≤ 0.8 × the Go floor's", "PASS"},
		{"added p50, 1000 req/s ≤ 3 × nginx's", "PASS"},
		{"added p99, 1000 req/s ≤ 1.0 × the Go floor's", "MISS"}, // 300 > 200 µs
		{"added p99.9, 1000 req/s over 1 s ≤ 1.5 × the Go floor's", "PASS"},
		{"CPU per request, concurrency 1 ≤ 0.8 × the Go floor's", "PASS"},            // 20 ≤ 24 µs
		{"CPU per request, concurrency 1 ≤ 3 × nginx's", "PASS"},                     // 20 ≤ 30 µs
		{"CPU per request, 1000 req/s ≤ 0.8 × the Go floor's", "MISS"},               // 40 > 24 µs
		{"CPU per request, 1000 req/s ≤ 3 × nginx's", "MISS"},                        // 40 > 30 µs
		{"most req/s under a 5.00 ms p99 ≥ 1.25 × the Go floor's", "MISS"},           // 2000 < 2500
		{"stream: added time to first content chunk, p50 ≤ the Go floor's", "MISS"},  // 500 > 200 µs
		{"stream: added gap between chunks, p50 ≤ the Go floor's + 50.0 µs", "PASS"}, // 60 ≤ 70 µs
		{"RSS per open stream, 1000 streams ≤ 24 KiB", "PASS"},
		{"pipeline on: added p50, concurrency 1 ≤ 1.0 × the Go floor's", "PASS"}, // 140 ≤ 150 µs
		{"pipeline on: added p50, 1000 req/s ≤ 1.0 × the Go floor's", "PASS"},
	}
	got := r.checks()
	if len(got) != len(want) {
		t.Fatalf("%d checks, want %d: %+v", len(got), len(want), got)
	}
	for k, c := range got {
		if c.Target != want[k].target || c.verdict() != want[k].verdict {
			t.Errorf("check %d: %q %s; want %q %s (%+v)", k, c.Target, c.verdict(), want[k].target, want[k].verdict, c)
		}
	}
	if c := got[0]; c.Measured != "100.0 µs" || c.Reference != "≤ 120.0 µs" || c.Ratio != "0.67 ×" {
		t.Errorf("first check %+v; want 100.0 µs, ≤ 120.0 µs, 0.67 ×", c)
	}

	for _, c := range (&report{}).checks() {
		if c.verdict() != "MISS (not measured)" {
			t.Errorf("%s with nothing measured: %s", c.Target, c.verdict())
		}
	}
}

func TestNginxAbsent(t *testing.T) {
	t.Parallel()
	r := sampleReport()
	r.Nginx, r.NginxAbsent = "", "no nginx on PATH nor at /usr/sbin/nginx"
	for k := range r.C1 {
		if k == pathNginx {
			r.C1[k], r.Fixed[k], r.C1CPU[k], r.FixedCPU[k] = dist{}, openOne{}, cpuUse{}, cpuUse{}
		}
	}
	for _, c := range r.checks() {
		isNginx := strings.Contains(c.Target, "nginx")
		if got := c.verdict() == "n/a (nginx absent)"; got != isNginx {
			t.Errorf("%s: verdict %s", c.Target, c.verdict())
		}
	}
	md := string(r.markdown())
	for _, want := range []string{
		"| nginx | absent: no nginx on PATH nor at /usr/sbin/nginx; its columns read \"absent\" |",
		"| added p50, concurrency 1 | 100.0 µs | 140.0 µs | 150.0 µs | absent | 50.0 µs | 0.67 × | absent |",
		"| nginx | absent | absent | absent | absent | absent | absent |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestMarkdown(t *testing.T) {
	t.Parallel()
	md := string(sampleReport().markdown())
	for _, want := range []string{
		"| added p50, concurrency 1 ≤ 0.8 × the Go floor's | 100.0 µs | ≤ 120.0 µs | 0.67 × | PASS |",
		"| added p50, concurrency 1 | 100.0 µs | 140.0 µs | 150.0 µs | 40.0 µs | 50.0 µs | 0.67 × | 2.50 × |",
		"| CPU per request, 1000 req/s | 40.0 µs | 50.0 µs | 30.0 µs | 10.0 µs | 10.0 µs | 1.33 × | 4.00 × |",
		"| most req/s under a 5.00 ms p99 | 2000 req/s | — | 2000 req/s | 3000 req/s | 3000 req/s | 1.00 × | 0.67 × |",
		"| RSS per open stream, 1000 streams | 20.0 KiB | — | 40.0 KiB | — | — | 0.50 × | — |",
		"| flexway | 1000 | 400.0 µs | 100.0 µs | 900.0 µs | 300.0 µs | 20.0 µs |",
		"| direct | 1000 | 300.0 µs | — | 600.0 µs | — | — |",
		"| pipeline | 1000 | 440.0 µs | 140.0 µs | 950.0 µs | 350.0 µs | 1.60 ms | 700.0 µs | 50.0 µs | 0 | 1000 |",
		"| rate (req/s) | direct p99 | flexway p99 | gofloor p99 | nginx p99 | relay p99 |",
		"| flexway | 20000 KiB | 40000 KiB (1000 streams) | **20.0 KiB** |",
		"| hold: bare net/http server, no upstream | 8000 KiB | 35500 KiB (1000 streams) | **27.5 KiB** |",
		"| nginx | /usr/sbin/nginx (nginx/1.22.1) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	empty := string((&report{}).markdown())
	if !strings.Contains(empty, "| gofloor (an upstream connection per stream too) | — | — | not measured |") {
		t.Errorf("an empty report's memory table:\n%s", empty)
	}
}
