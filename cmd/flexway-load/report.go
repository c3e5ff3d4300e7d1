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
	Lag      dist       // the pacer's lateness, direct and flexway
}

// openOne is an open-loop measurement on one path.
type openOne struct {
	dist
	Errors   int     // failed requests
	Achieved float64 // answers/s
}

// step is one rung of the throughput ladder, indexed by path (pathDirect,
// pathFlexway, pathRelay).
type step struct {
	Rate   float64
	Ran    [numPaths]bool
	P99    [numPaths]time.Duration
	Errors [numPaths]int
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

	C1    pair
	Fixed openPair
	// RelayC1 is the relay path at concurrency 1, measured in the same
	// rounds as C1; its added figures are over C1.Direct.
	RelayC1 dist
	// RelayFixed is the relay path at fixedRate, taking turns with Fixed;
	// its added figures are over Fixed.Direct.
	RelayFixed openOne
	Steps      []step
	// Best is each path's best passing rate, indexed by path (pathDirect,
	// pathFlexway, pathRelay); 0 when the first step failed.
	Best [numPaths]float64
	// Capped says, by path, that the path passed the ladder's top rate.
	Capped [numPaths]bool

	FirstByte    pair
	FirstContent pair
	Gaps         pair
	Memory       *memory
	// HoldMemory is the memory phase's floor: the same streams, opened and
	// measured the same way, held by a bare net/http server with no upstream
	// connection (holdModeArg). It is shown beside Memory and checks no
	// target; nil when it was not measured.
	HoldMemory *memory

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
	w("- Relay path: the harness binary started again, as its own process, with `%s LISTEN SAMPLE`: a byte-for-byte TCP relay on 127.0.0.1 that accepts each connection, dials the sample and copies bytes both ways (io.Copy), and parses nothing. It gets the same body and headers as direct; the sample ignores the Authorization header. It shows what any process between harness and sample adds on this machine; non-streaming and throughput phases only.", relayModeArg)
	w("- Memory floor: the harness binary started again, as its own process, with `%s LISTEN`: an http.Server on 127.0.0.1 with net/http's defaults (the header and idle timeouts of Flexway's front, no special buffer sizes) whose handler reads and discards the request body, answers `text/event-stream` with one event, flushes it and holds the response open until the client closes. It has no upstream connection. After Flexway's memory measurement, with the gateway and its sample stopped, it gets the same streams, opened and measured the same way; it checks no target.", holdModeArg)
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
	w("%s", r.relayFloor())
	w("")
	w("## Non-streaming chat")
	w("")
	w("Latency from send (open loop: from the scheduled send) to the end of the answer. Added = flexway − direct. The relay columns show the TCP relay path, with relay − direct in brackets.")
	w("")
	w("| | n per path | direct p50 | flexway p50 | added p50 | direct p99 | flexway p99 | added p99 | relay p50 (− direct) | relay p99 (− direct) |")
	w("|---|---|---|---|---|---|---|---|---|---|")
	writeChatRow(w, "concurrency 1", r.C1, r.RelayC1)
	writeChatRow(w, fmt.Sprintf("open loop %.0f req/s", fixedRate), r.Fixed.pair, r.RelayFixed.dist)
	w("")
	if r.Fixed.Lag.N > 0 {
		w("At %.0f req/s: answers/s direct %.0f, flexway %.0f; errors direct %d, flexway %d. The pacer dispatched p50 %s and p99 %s after the scheduled time (timer resolution; included in both paths).",
			fixedRate, r.Fixed.Achieved[0], r.Fixed.Achieved[1], r.Fixed.Errors[0], r.Fixed.Errors[1], fmtDur(r.Fixed.Lag.P50), fmtDur(r.Fixed.Lag.P99))
		w("")
	}
	if r.RelayFixed.N > 0 {
		w("Relay path at %.0f req/s: answers/s %.0f; errors %d.", fixedRate, r.RelayFixed.Achieved, r.RelayFixed.Errors)
		w("")
	}
	w("### Sustained throughput (open loop, p99 ≤ %s, no error; the better of %d runs per step)", fmtDur(maxP99), stepTries)
	w("")
	if len(r.Steps) > 0 {
		w("| rate (req/s) | direct p99 | flexway p99 | relay p99 |")
		w("|---|---|---|---|")
		for _, s := range r.Steps {
			w("| %.0f | %s | %s | %s |", s.Rate, s.cell(pathDirect), s.cell(pathFlexway), s.cell(pathRelay))
		}
		w("")
		w("Best passing rate: direct %s, flexway %s.", bestRate(r.Best[0], r.Capped[0]), bestRate(r.Best[1], r.Capped[1]))
		if r.Best[0] > 0 {
			w("Ratio flexway / direct: %.2f.", r.Best[1]/r.Best[0])
		}
		w("")
		relayRatio := ""
		if r.Best[pathDirect] > 0 {
			relayRatio = fmt.Sprintf("; ratio relay / direct: %.2f", r.Best[pathRelay]/r.Best[pathDirect])
		}
		w("Relay path: best passing rate %s%s.", bestRate(r.Best[pathRelay], r.Capped[pathRelay]), relayRatio)
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
	w("")
	w("%s", r.holdFloor())
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

// relayFloor is the paragraph under the targets that says what the TCP relay
// adds over direct, the floor any separate process in the path adds on this
// machine, and what Flexway adds over the relay.
func (r *report) relayFloor() string {
	measured := func(ds ...dist) bool {
		for _, d := range ds {
			if d.N == 0 {
				return false
			}
		}
		return true
	}
	c1, fixed := measured(r.C1.Direct, r.RelayC1), measured(r.Fixed.Direct, r.RelayFixed.dist)
	c1Text := "not measured"
	if c1 {
		c1Text = fmt.Sprintf("%s at p50, %s at p99",
			fmtDur(r.RelayC1.P50-r.C1.Direct.P50), fmtDur(r.RelayC1.P99-r.C1.Direct.P99))
	}
	var b strings.Builder
	switch {
	case fixed:
		fmt.Fprintf(&b, "On this machine a byte-for-byte TCP relay adds %s at p50 and %s at p99 at %.0f req/s (concurrency 1: %s)",
			fmtDur(r.RelayFixed.P50-r.Fixed.Direct.P50), fmtDur(r.RelayFixed.P99-r.Fixed.Direct.P99), fixedRate, c1Text)
		if r.Fixed.Flexway.N > 0 {
			fmt.Fprintf(&b, "; Flexway adds %s over the relay (flexway − relay at p50; %s at p99)",
				fmtDur(r.Fixed.Flexway.P50-r.RelayFixed.P50), fmtDur(r.Fixed.Flexway.P99-r.RelayFixed.P99))
		}
	case c1:
		fmt.Fprintf(&b, "On this machine a byte-for-byte TCP relay adds %s at concurrency 1 (not measured at %.0f req/s)", c1Text, fixedRate)
		if r.C1.Flexway.N > 0 {
			fmt.Fprintf(&b, "; Flexway adds %s over the relay there (flexway − relay at p50; %s at p99)",
				fmtDur(r.C1.Flexway.P50-r.RelayC1.P50), fmtDur(r.C1.Flexway.P99-r.RelayC1.P99))
		}
	default:
		return "The TCP relay path, which shows what any process between the harness and the sample adds on this machine, was not measured."
	}
	b.WriteString(". The relay parses nothing, so what it adds (waking one more process, one more loopback hop each way) is the floor for any gateway in its own process here; the targets above compare flexway with direct and include that floor.")
	return b.String()
}

// holdFloor is the memory section's sentence on the bare net/http server:
// what it used per open stream, the floor of an HTTP/1.1 front on net/http,
// and what Flexway uses over it.
func (r *report) holdFloor() string {
	h := r.HoldMemory
	if h == nil {
		return fmt.Sprintf("The floor of a bare net/http server holding the same streams open (the harness's %s) was not measured.", holdModeArg)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "A bare net/http server holding the same streams open, with no upstream connection (the harness's %s), used %.1f KiB per open stream (VmRSS idle %d KiB; with %d streams open %d KiB): the floor of an HTTP/1.1 front on net/http here",
		holdModeArg, h.PerStream(), h.IdleKiB, h.Streams, h.OpenKiB)
	if m := r.Memory; m != nil {
		over := m.PerStream() - h.PerStream()
		if over >= 0 {
			fmt.Fprintf(&b, "; Flexway adds %.1f KiB over it (its upstream connection, the in-process gRPC stream and the call's state)", over)
		} else {
			fmt.Fprintf(&b, "; Flexway used %.1f KiB less than it in this run, although it also holds an upstream connection, an in-process gRPC stream and the call's state", -over)
		}
	}
	b.WriteString(".")
	return b.String()
}

// writeChatRow writes one row of the non-streaming table: the pair, as
// writePair does, then the relay's p50 and p99 with relay − direct.
func writeChatRow(w func(string, ...any), name string, p pair, relay dist) {
	r50, r99 := relayCells(relay, p.Direct)
	if p.Direct.N == 0 || p.Flexway.N == 0 {
		w("| %s | — | — | — | — | — | — | — | %s | %s |", name, r50, r99)
		return
	}
	w("| %s | %d | %s | %s | **%s** | %s | %s | **%s** | %s | %s |", name, min(p.Direct.N, p.Flexway.N),
		fmtDur(p.Direct.P50), fmtDur(p.Flexway.P50), fmtDur(p.AddedP50()),
		fmtDur(p.Direct.P99), fmtDur(p.Flexway.P99), fmtDur(p.AddedP99()),
		r50, r99)
}

// relayCells are the relay's p50 and p99 cells, each "relay (+relay −
// direct)"; a dash when the relay was not measured, the relay's figure alone
// when direct was not.
func relayCells(relay, direct dist) (p50, p99 string) {
	cell := func(r, d time.Duration) string {
		switch {
		case relay.N == 0:
			return "—"
		case direct.N == 0:
			return fmtDur(r)
		case r >= d:
			return fmt.Sprintf("%s (+%s)", fmtDur(r), fmtDur(r-d))
		}
		return fmt.Sprintf("%s (%s)", fmtDur(r), fmtDur(r-d)) // fmtDur writes the minus sign
	}
	return cell(relay.P50, direct.P50), cell(relay.P99, direct.P99)
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
