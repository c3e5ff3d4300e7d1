package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// The targets the report checks.
const (
	targetAddedP50     = 150 * time.Microsecond // at fixedRate
	targetAddedP99     = time.Millisecond       // at fixedRate
	targetThroughput   = 0.5                    // flexway / direct
	targetKiBPerStream = 30.0
)

// pair is one measurement on both paths.
type pair struct {
	Direct, Flexway dist
}

// AddedP50 is the p50 through Flexway minus the p50 direct.
func (p pair) AddedP50() time.Duration { return p.Flexway.P50 - p.Direct.P50 }

// AddedP99 is the p99 through Flexway minus the p99 direct.
func (p pair) AddedP99() time.Duration { return p.Flexway.P99 - p.Direct.P99 }

// openPair is an open-loop measurement on both paths.
type openPair struct {
	pair
	Errors   [2]int     // direct, flexway
	Achieved [2]float64 // answers/s, direct, flexway
	Lag      dist       // the pacer's lateness, both paths
}

// step is one rung of the throughput ladder; index 0 is direct, 1 flexway.
type step struct {
	Rate   float64
	Ran    [2]bool
	P99    [2]time.Duration
	Errors [2]int
}

// cell is the step's result for path i, as the table shows it.
func (s step) cell(i int) string {
	switch {
	case !s.Ran[i]:
		return "—"
	case s.Errors[i] > 0:
		return fmt.Sprintf("%s, %d errors", fmtDur(s.P99[i]), s.Errors[i])
	case s.P99[i] > maxP99:
		return fmtDur(s.P99[i]) + " (over)"
	}
	return fmtDur(s.P99[i])
}

// memory is the memory phase's outcome.
type memory struct {
	IdleKiB, OpenKiB int64
	Streams          int
}

// PerStream is the RSS added per open stream, in KiB.
func (m memory) PerStream() float64 {
	if m.Streams == 0 {
		return 0
	}
	return float64(m.OpenKiB-m.IdleKiB) / float64(m.Streams)
}

// report is everything one run measured and the context to read it in.
type report struct {
	Started    time.Time
	Scale      float64
	NProc      int
	CPU        string
	LoadAvg    string
	GoHarness  string
	Flexway    string // `flexway version`
	GOMAXPROCS string
	Audit      string

	C1           pair
	Fixed        openPair
	Steps        []step
	Best         [2]float64 // best passing rate, direct and flexway
	Capped       [2]bool    // the path passed the ladder's top rate
	FirstByte    pair
	FirstContent pair
	Gaps         pair
	Memory       *memory

	Problems []string // phases that failed
}

// newReport describes the machine and the binaries.
func newReport(o options) *report {
	r := &report{
		Started:   time.Now().UTC(),
		Scale:     o.scale,
		NProc:     runtime.NumCPU(),
		CPU:       cpuModel(),
		LoadAvg:   loadAvg(),
		GoHarness: runtime.Version(),
		Flexway:   binaryVersion(o.flexwayPath),
	}
	if v := os.Getenv("GOMAXPROCS"); v != "" {
		r.GOMAXPROCS = fmt.Sprintf("%s (set in the environment, in every process)", v)
	} else {
		r.GOMAXPROCS = fmt.Sprintf("%d (the runtime default, in every process)", runtime.GOMAXPROCS(0))
	}
	return r
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// loadAvg is the 1, 5 and 15 minute load average from /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// check is one target and its verdict.
type check struct {
	Target   string
	Measured string // "" when the phase did not run
	OK       bool
}

// checks evaluates the targets.
func (r *report) checks() []check {
	var cs []check
	if r.Fixed.Flexway.N > 0 {
		a50, a99 := r.Fixed.AddedP50(), r.Fixed.AddedP99()
		cs = append(cs,
			check{fmt.Sprintf("added p50 ≤ %s at %.0f req/s", fmtDur(targetAddedP50), fixedRate), fmtDur(a50), a50 <= targetAddedP50},
			check{fmt.Sprintf("added p99 ≤ %s at %.0f req/s", fmtDur(targetAddedP99), fixedRate), fmtDur(a99), a99 <= targetAddedP99},
		)
	} else {
		cs = append(cs,
			check{Target: fmt.Sprintf("added p50 ≤ %s at %.0f req/s", fmtDur(targetAddedP50), fixedRate)},
			check{Target: fmt.Sprintf("added p99 ≤ %s at %.0f req/s", fmtDur(targetAddedP99), fixedRate)})
	}
	tp := check{Target: fmt.Sprintf("sustained throughput ≥ %.1f × direct", targetThroughput)}
	switch {
	case r.Best[0] > 0:
		ratio := r.Best[1] / r.Best[0]
		tp.Measured = fmt.Sprintf("%.2f × (%.0f / %.0f req/s)", ratio, r.Best[1], r.Best[0])
		tp.OK = ratio >= targetThroughput
	case len(r.Steps) > 0:
		tp.Measured = fmt.Sprintf("no ratio: direct missed the first step (%.0f req/s)", stepRates[0])
	}
	cs = append(cs, tp)
	mem := check{Target: fmt.Sprintf("≤ %.0f KiB per open stream", targetKiBPerStream)}
	if r.Memory != nil {
		mem.Measured = fmt.Sprintf("%.1f KiB", r.Memory.PerStream())
		mem.OK = r.Memory.PerStream() <= targetKiBPerStream
	}
	return append(cs, mem)
}

// verdict is PASS, MISS, or MISS with the reason that nothing was measured.
func (c check) verdict() string {
	switch {
	case c.Measured == "":
		return "MISS (not measured)"
	case c.OK:
		return "PASS"
	}
	return "MISS"
}

// markdown renders the report; the same text goes to stdout and --out.
func (r *report) markdown() []byte {
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }

	w("# Flexway load report")
	w("")
	w("%s, duration scale %g.", r.Started.Format("2006-01-02 15:04 UTC"), r.Scale)
	w("")
	w("## Machine")
	w("")
	w("| | |")
	w("|---|---|")
	w("| nproc | %d |", r.NProc)
	w("| CPU | %s |", r.CPU)
	w("| load average at start (1, 5, 15 min) | %s |", r.LoadAvg)
	w("| Go | harness %s; %s |", r.GoHarness, r.Flexway)
	w("")
	w("## What was on")
	w("")
	w("- Identity on: every call through Flexway carries `Authorization: Bearer` with the key, checked against the configured key_sha256. The direct path gets the same body and headers.")
	w("- Embedded defaults: one backend, no caps, no tenants; the budget store is the embedded default in the run's temporary directory.")
	w("- Audit as configured: `audit.path: audit.jsonl` with a hash key, in the run's temporary directory; %s.", r.Audit)
	w("- Loopback: harness, flexway-sample and `flexway serve` on 127.0.0.1, HTTP/1.1 with keep-alive; the harness shares the CPUs with both servers.")
	w("- GOMAXPROCS: %s.", r.GOMAXPROCS)
	w("- Upstream: flexway-sample; streaming phases with --chunk-delay %s --chunks %d, memory phase with --chunk-delay %s.", pacedChunkDelay, pacedChunks, holdChunkDelay)
	w("")
	w("## Targets")
	w("")
	w("| target | measured | |")
	w("|---|---|---|")
	for _, c := range r.checks() {
		m := c.Measured
		if m == "" {
			m = "—"
		}
		w("| %s | %s | %s |", c.Target, m, c.verdict())
	}
	w("")
	w("## Non-streaming chat")
	w("")
	w("Latency from send (open loop: from the scheduled send) to the end of the answer. Added = flexway − direct.")
	w("")
	w("| | n per path | direct p50 | flexway p50 | added p50 | direct p99 | flexway p99 | added p99 |")
	w("|---|---|---|---|---|---|---|---|")
	writePair(w, "concurrency 1", r.C1)
	writePair(w, fmt.Sprintf("open loop %.0f req/s", fixedRate), r.Fixed.pair)
	w("")
	if r.Fixed.Lag.N > 0 {
		w("At %.0f req/s: answers/s direct %.0f, flexway %.0f; errors direct %d, flexway %d. The pacer dispatched p50 %s and p99 %s after the scheduled time (timer resolution; included in both paths).",
			fixedRate, r.Fixed.Achieved[0], r.Fixed.Achieved[1], r.Fixed.Errors[0], r.Fixed.Errors[1], fmtDur(r.Fixed.Lag.P50), fmtDur(r.Fixed.Lag.P99))
		w("")
	}
	w("### Sustained throughput (open loop, p99 ≤ %s, no error; the better of %d runs per step)", fmtDur(maxP99), stepTries)
	w("")
	if len(r.Steps) > 0 {
		w("| rate (req/s) | direct p99 | flexway p99 |")
		w("|---|---|---|")
		for _, s := range r.Steps {
			w("| %.0f | %s | %s |", s.Rate, s.cell(0), s.cell(1))
		}
		w("")
		w("Best passing rate: direct %s, flexway %s.", bestRate(r.Best[0], r.Capped[0]), bestRate(r.Best[1], r.Capped[1]))
		if r.Best[0] > 0 {
			w("Ratio flexway / direct: %.2f.", r.Best[1]/r.Best[0])
		}
	} else {
		w("Not measured.")
	}
	w("")
	w("## Streaming (paced: a chunk every %s)", pacedChunkDelay)
	w("")
	w("| | n per path | direct p50 | flexway p50 | added p50 | direct p99 | flexway p99 | added p99 |")
	w("|---|---|---|---|---|---|---|---|")
	writePair(w, "time to first SSE byte", r.FirstByte)
	writePair(w, "time to first content chunk", r.FirstContent)
	writePair(w, "gap between chunk arrivals", r.Gaps)
	w("")
	if r.FirstByte.Flexway.N > 0 && r.FirstByte.AddedP50() > pacedChunkDelay/2 {
		w("The sample sends a role-only chunk at once and each content chunk after its delay. Flexway holds role-only chunks, and the response headers, until the first chunk with content, so that a backend failing before any content can still be fallen back from (Core.StreamChatCompletion); its first byte therefore comes with the first content chunk, and the added time to first byte includes one chunk delay by design. The time to the first content chunk compares like with like.")
		w("")
	}
	w("## Memory with %d open streams", openStreamCount)
	w("")
	if m := r.Memory; m != nil {
		w("Flexway VmRSS idle (after warm-up) %d KiB; with %d streams open %d KiB; (open − idle) / streams = **%.1f KiB per open stream**.",
			m.IdleKiB, m.Streams, m.OpenKiB, m.PerStream())
	} else {
		w("Not measured.")
	}
	if len(r.Problems) > 0 {
		w("")
		w("## Problems")
		w("")
		for _, p := range r.Problems {
			w("- %s", strings.ReplaceAll(p, "\n", " "))
		}
	}
	return b.Bytes()
}

// writePair writes one table row of a pair; a pair not measured shows dashes.
func writePair(w func(string, ...any), name string, p pair) {
	if p.Direct.N == 0 || p.Flexway.N == 0 {
		w("| %s | — | — | — | — | — | — | — |", name)
		return
	}
	w("| %s | %d | %s | %s | **%s** | %s | %s | **%s** |", name, min(p.Direct.N, p.Flexway.N),
		fmtDur(p.Direct.P50), fmtDur(p.Flexway.P50), fmtDur(p.AddedP50()),
		fmtDur(p.Direct.P99), fmtDur(p.Flexway.P99), fmtDur(p.AddedP99()))
}

// bestRate formats a best passing rate; capped means the ladder ran out.
func bestRate(rate float64, capped bool) string {
	switch {
	case rate == 0:
		return fmt.Sprintf("none (the first step, %.0f req/s, missed)", stepRates[0])
	case capped:
		return fmt.Sprintf("≥ %.0f req/s (the ladder's top)", rate)
	}
	return fmt.Sprintf("%.0f req/s", rate)
}

// binaryVersion runs `path version`.
func binaryVersion(path string) string {
	out, err := runOutput(path, "version")
	if err != nil {
		return "flexway version unknown"
	}
	return strings.TrimSpace(out)
}

// writeReport writes the report to w.
func writeReport(w io.Writer, r *report) error {
	_, err := w.Write(r.markdown())
	return err
}
