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

// The targets the report checks: issue 19's, ratios to the floors measured
// in the same run (the Go floor, nginx), so that the shared machine's noise
// cancels out. Latency figures are "added": a path's percentile minus the
// direct path's.
const (
	// targetP50VsGoFloor bounds Flexway's added p50 (concurrency 1 and
	// fixedRate) as a multiple of the Go floor's added p50.
	targetP50VsGoFloor = 0.8
	// targetVsNginx bounds Flexway's added p50 and CPU per request as a
	// multiple of nginx's.
	targetVsNginx = 3.0
	// targetP99VsGoFloor bounds Flexway's added p99 at fixedRate.
	targetP99VsGoFloor = 1.0
	// targetP999VsGoFloor bounds Flexway's added p99.9 at fixedRate, over
	// fixedDuration.
	targetP999VsGoFloor = 1.5
	// targetCPUVsGoFloor bounds Flexway's CPU per request (µs).
	targetCPUVsGoFloor = 0.8
	// targetThroughputVsGoFloor is the least Flexway's best rate under
	// maxP99 may be, as a multiple of the Go floor's (req/s).
	targetThroughputVsGoFloor = 1.25
	// targetGapSlack is what Flexway's added gap between stream chunks may
	// exceed the Go floor's by.
	targetGapSlack = 50 * time.Microsecond
	// targetKiBPerStream bounds Flexway's RSS per open stream, in KiB.
	targetKiBPerStream = 24.0
	// targetPipelineVsGoFloor bounds the pipeline row's added p50 as a
	// multiple of the Go floor's added p50.
	targetPipelineVsGoFloor = 1.0
)

// openOne is an open-loop measurement on one path.
type openOne struct {
	dist
	Errors   int     // failed requests
	Achieved float64 // answers/s
}

// step is one rung of the throughput ladder, indexed by path.
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

// memory is the memory phase's outcome for one server.
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
// The per-path arrays are indexed by path (pathDirect, ...); a path that
// did not run has zero values there.
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
	// Nginx is the nginx binary and version that ran; NginxAbsent, when
	// not empty, says why there was none (and Nginx is empty).
	Nginx, NginxAbsent string

	C1 [numPaths]dist
	// C1CPU is each middle process's CPU time over the concurrency-1
	// phase and the requests it answered there.
	C1CPU [numPaths]cpuUse
	Fixed [numPaths]openOne
	// FixedCPU is each middle process's CPU time in its own turns at
	// fixedRate and the requests it answered in them.
	FixedCPU [numPaths]cpuUse
	Lag      dist // the pacer's lateness at fixedRate, every path
	Steps    []step
	// Best is each path's best passing rate (req/s); 0 when its first
	// step failed or it did not climb.
	Best [numPaths]float64
	// Capped says, by path, that the path passed the ladder's top rate.
	Capped [numPaths]bool

	FirstByte, FirstContent, Gaps [numPaths]dist

	// Memory is Flexway's memory phase, GoFloorMemory the Go floor's (an
	// upstream connection per stream too), HoldMemory the bare net/http
	// server's (none); nil when not measured.
	Memory, GoFloorMemory, HoldMemory *memory
	// CacheHits counts the answers the pipeline gateway's response cache
	// gave; every call should miss it.
	CacheHits int64

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

// nginxAbsent is the verdict's and the cells' note when nginx did not run
// because it is not installed.
const nginxAbsent = "absent"

// check is one target and its verdict.
type check struct {
	Target    string
	Measured  string // Flexway's figure; "" when not measured
	Reference string // the bound, from the floor's figure; "" when the floor was not measured
	Ratio     string // Flexway's figure ÷ the floor's, when both are positive
	OK        bool
	Absent    bool // the floor is nginx and it is not installed
}

// verdict is PASS, MISS, MISS with the reason that nothing was measured,
// or n/a when the floor is absent.
func (c check) verdict() string {
	switch {
	case c.Absent:
		return "n/a (nginx absent)"
	case c.Measured == "" || c.Reference == "":
		return "MISS (not measured)"
	case c.OK:
		return "PASS"
	}
	return "MISS"
}

// figure is one path's value for a measure: a duration or a plain number.
type figure struct {
	ok  bool
	d   time.Duration
	num float64
}

// added is path i's q-percentile minus direct's on ds, when both ran.
func added(ds [numPaths]dist, i int, q func(dist) time.Duration) figure {
	if ds[i].N == 0 || ds[pathDirect].N == 0 {
		return figure{}
	}
	return figure{ok: true, d: q(ds[i]) - q(ds[pathDirect])}
}

func p50(d dist) time.Duration  { return d.P50 }
func p99(d dist) time.Duration  { return d.P99 }
func p999(d dist) time.Duration { return d.P999 }

// fixedDists are the fixed-rate phase's distributions by path.
func (r *report) fixedDists() [numPaths]dist {
	var ds [numPaths]dist
	for i, o := range r.Fixed {
		ds[i] = o.dist
	}
	return ds
}

// cpuFigure is path i's CPU per request, when measured.
func cpuFigure(c [numPaths]cpuUse, i int) figure {
	if c[i].Requests == 0 {
		return figure{}
	}
	return figure{ok: true, d: c[i].PerRequest()}
}

// bestFigure is path i's best rate under maxP99, when the ladder ran it.
func (r *report) bestFigure(i int) figure {
	for _, s := range r.Steps {
		if s.Ran[i] {
			return figure{ok: true, num: r.Best[i]}
		}
	}
	return figure{}
}

// memFigure is m's RSS per open stream, when measured.
func memFigure(m *memory) figure {
	if m == nil {
		return figure{}
	}
	return figure{ok: true, num: m.PerStream()}
}

// durAtMost checks m ≤ factor × f + slack for durations.
func (r *report) durAtMost(target string, m, f figure, factor float64, slack time.Duration, floorIsNginx bool) check {
	c := check{Target: target, Absent: floorIsNginx && r.NginxAbsent != ""}
	if m.ok {
		c.Measured = fmtDur(m.d)
	}
	if f.ok {
		limit := time.Duration(factor*float64(f.d)) + slack
		c.Reference = fmt.Sprintf("≤ %s", fmtDur(limit))
		c.Ratio = ratio(float64(m.d), float64(f.d), m.ok)
		c.OK = m.ok && m.d <= limit
	}
	return c
}

// ratio is a ÷ b as "0.80 ×", when both are known, a is not negative and
// b is positive (an added figure below zero is noise, and no ratio).
func ratio(a, b float64, ok bool) string {
	if !ok || a < 0 || b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f ×", a/b)
}

// checks evaluates issue 19's targets.
func (r *report) checks() []check {
	fixed := r.fixedDists()
	fx := func(i int, q func(dist) time.Duration) figure { return added(fixed, i, q) }
	c1 := func(i int) figure { return added(r.C1, i, p50) }
	rate := fmt.Sprintf("%.0f req/s", fixedRate)
	span := fmtSeconds(r.fixedSpan())
	cs := []check{
		r.durAtMost(fmt.Sprintf("added p50, concurrency 1 ≤ %.1f × the Go floor's", targetP50VsGoFloor), c1(pathFlexway), c1(pathGoFloor), targetP50VsGoFloor, 0, false),
		r.durAtMost(fmt.Sprintf("added p50, concurrency 1 ≤ %.0f × nginx's", targetVsNginx), c1(pathFlexway), c1(pathNginx), targetVsNginx, 0, true),
		r.durAtMost(fmt.Sprintf("added p50, %s ≤ %.1f × the Go floor's", rate, targetP50VsGoFloor), fx(pathFlexway, p50), fx(pathGoFloor, p50), targetP50VsGoFloor, 0, false),
		r.durAtMost(fmt.Sprintf("added p50, %s ≤ %.0f × nginx's", rate, targetVsNginx), fx(pathFlexway, p50), fx(pathNginx, p50), targetVsNginx, 0, true),
		r.durAtMost(fmt.Sprintf("added p99, %s ≤ %.1f × the Go floor's", rate, targetP99VsGoFloor), fx(pathFlexway, p99), fx(pathGoFloor, p99), targetP99VsGoFloor, 0, false),
		r.durAtMost(fmt.Sprintf("added p99.9, %s over %s ≤ %.1f × the Go floor's", rate, span, targetP999VsGoFloor), fx(pathFlexway, p999), fx(pathGoFloor, p999), targetP999VsGoFloor, 0, false),
		r.durAtMost(fmt.Sprintf("CPU per request, concurrency 1 ≤ %.1f × the Go floor's", targetCPUVsGoFloor), cpuFigure(r.C1CPU, pathFlexway), cpuFigure(r.C1CPU, pathGoFloor), targetCPUVsGoFloor, 0, false),
		r.durAtMost(fmt.Sprintf("CPU per request, concurrency 1 ≤ %.0f × nginx's", targetVsNginx), cpuFigure(r.C1CPU, pathFlexway), cpuFigure(r.C1CPU, pathNginx), targetVsNginx, 0, true),
		r.durAtMost(fmt.Sprintf("CPU per request, %s ≤ %.1f × the Go floor's", rate, targetCPUVsGoFloor), cpuFigure(r.FixedCPU, pathFlexway), cpuFigure(r.FixedCPU, pathGoFloor), targetCPUVsGoFloor, 0, false),
		r.durAtMost(fmt.Sprintf("CPU per request, %s ≤ %.0f × nginx's", rate, targetVsNginx), cpuFigure(r.FixedCPU, pathFlexway), cpuFigure(r.FixedCPU, pathNginx), targetVsNginx, 0, true),
	}

	tp := check{Target: fmt.Sprintf("most req/s under a %s p99 ≥ %.2f × the Go floor's", fmtDur(maxP99), targetThroughputVsGoFloor)}
	if m := r.bestFigure(pathFlexway); m.ok {
		tp.Measured = fmt.Sprintf("%.0f req/s", m.num)
	}
	if f := r.bestFigure(pathGoFloor); f.ok {
		tp.Reference = fmt.Sprintf("≥ %.0f req/s", targetThroughputVsGoFloor*f.num)
		tp.Ratio = ratio(r.Best[pathFlexway], f.num, tp.Measured != "")
		tp.OK = tp.Measured != "" && r.Best[pathFlexway] >= targetThroughputVsGoFloor*f.num && f.num > 0
	}
	cs = append(cs, tp,
		r.durAtMost("stream: added time to first content chunk, p50 ≤ the Go floor's", added(r.FirstContent, pathFlexway, p50), added(r.FirstContent, pathGoFloor, p50), 1, 0, false),
		r.durAtMost(fmt.Sprintf("stream: added gap between chunks, p50 ≤ the Go floor's + %s", fmtDur(targetGapSlack)), added(r.Gaps, pathFlexway, p50), added(r.Gaps, pathGoFloor, p50), 1, targetGapSlack, false),
	)

	mem := check{Target: fmt.Sprintf("RSS per open stream, %d streams ≤ %.0f KiB", openStreamCount, targetKiBPerStream),
		Reference: fmt.Sprintf("≤ %.0f KiB", targetKiBPerStream)}
	if m := memFigure(r.Memory); m.ok {
		mem.Measured = fmt.Sprintf("%.1f KiB", m.num)
		mem.OK = m.num <= targetKiBPerStream
		if g := memFigure(r.GoFloorMemory); g.ok {
			mem.Ratio = ratio(m.num, g.num, true)
		}
	}
	return append(cs, mem,
		r.durAtMost(fmt.Sprintf("pipeline on: added p50, concurrency 1 ≤ %.1f × the Go floor's", targetPipelineVsGoFloor), c1(pathPipeline), c1(pathGoFloor), targetPipelineVsGoFloor, 0, false),
		r.durAtMost(fmt.Sprintf("pipeline on: added p50, %s ≤ %.1f × the Go floor's", rate, targetPipelineVsGoFloor), fx(pathPipeline, p50), fx(pathGoFloor, p50), targetPipelineVsGoFloor, 0, false),
	)
}

// fixedSpan is the Go floor's time at fixedRate in this run (the sum of
// its turns), from its answers and their rate; fixedDuration times the
// scale when it did not run.
func (r *report) fixedSpan() time.Duration {
	if o := r.Fixed[pathGoFloor]; o.Achieved > 0 {
		return time.Duration(float64(o.N+o.Errors) / o.Achieved * float64(time.Second)).Round(time.Second)
	}
	return time.Duration(float64(fixedDuration) * r.Scale)
}

// fmtSeconds formats a span as "30 s".
func fmtSeconds(d time.Duration) string {
	return fmt.Sprintf("%.0f s", max(d.Seconds(), 1))
}

// beside is one row of the table that puts Flexway beside its floors.
type beside struct {
	name string
	fig  func(i int) figure // the measure for path i
	unit func(figure) string
	// pipeline says the pipeline path has this measure.
	pipeline bool
}

// durCell formats a duration figure.
func durCell(f figure) string { return fmtDur(f.d) }

// perSecCell formats a rate figure, in req/s.
func perSecCell(f figure) string { return fmt.Sprintf("%.0f req/s", f.num) }

// kibCell formats an RSS figure, in KiB.
func kibCell(f figure) string { return fmt.Sprintf("%.1f KiB", f.num) }

// besideRows are the measures of the table "Flexway beside its floors".
func (r *report) besideRows() []beside {
	fixed := r.fixedDists()
	memOf := map[int]*memory{pathFlexway: r.Memory, pathGoFloor: r.GoFloorMemory}
	rate := fmt.Sprintf("%.0f req/s", fixedRate)
	return []beside{
		{name: "added p50, concurrency 1", fig: func(i int) figure { return added(r.C1, i, p50) }, unit: durCell, pipeline: true},
		{name: "added p99, concurrency 1", fig: func(i int) figure { return added(r.C1, i, p99) }, unit: durCell, pipeline: true},
		{name: "added p50, " + rate, fig: func(i int) figure { return added(fixed, i, p50) }, unit: durCell, pipeline: true},
		{name: "added p99, " + rate, fig: func(i int) figure { return added(fixed, i, p99) }, unit: durCell, pipeline: true},
		{name: "added p99.9, " + rate, fig: func(i int) figure { return added(fixed, i, p999) }, unit: durCell, pipeline: true},
		{name: "CPU per request, concurrency 1", fig: func(i int) figure { return cpuFigure(r.C1CPU, i) }, unit: durCell, pipeline: true},
		{name: "CPU per request, " + rate, fig: func(i int) figure { return cpuFigure(r.FixedCPU, i) }, unit: durCell, pipeline: true},
		{name: fmt.Sprintf("most req/s under a %s p99", fmtDur(maxP99)), fig: r.bestFigure, unit: perSecCell},
		{name: "stream: added time to first content chunk, p50", fig: func(i int) figure { return added(r.FirstContent, i, p50) }, unit: durCell},
		{name: "stream: added gap between chunks, p50", fig: func(i int) figure { return added(r.Gaps, i, p50) }, unit: durCell},
		{name: fmt.Sprintf("RSS per open stream, %d streams", openStreamCount), fig: func(i int) figure { return memFigure(memOf[i]) }, unit: kibCell},
	}
}

// cell is row's figure for path i: its value, "—" when not measured, or
// "absent" for nginx when it is not installed.
func (r *report) cell(row beside, i int) string {
	if i == pathNginx && r.NginxAbsent != "" {
		return nginxAbsent
	}
	if i == pathPipeline && !row.pipeline {
		return "—"
	}
	f := row.fig(i)
	if !f.ok {
		return "—"
	}
	return row.unit(f)
}

// rowRatio is Flexway's figure ÷ path i's on row, when both are positive.
func (r *report) rowRatio(row beside, i int) string {
	if i == pathNginx && r.NginxAbsent != "" {
		return nginxAbsent
	}
	m, f := row.fig(pathFlexway), row.fig(i)
	if !m.ok || !f.ok {
		return "—"
	}
	a, b := float64(m.d), float64(f.d)
	if m.d == 0 && f.d == 0 {
		a, b = m.num, f.num
	}
	return ratio(a, b, true)
}

// markdown renders the report; the same text goes to stdout and --out.
func (r *report) markdown() []byte {
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	rate := fmt.Sprintf("%.0f req/s", fixedRate)

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
	if r.NginxAbsent != "" {
		w("| nginx | absent: %s; its columns read \"absent\" |", r.NginxAbsent)
	} else {
		w("| nginx | %s |", r.Nginx)
	}
	w("")
	w("## What was on")
	w("")
	w("- **flexway**: `flexway serve` with identity on (every call carries `Authorization: Bearer` with the key, checked against the configured key_sha256), one backend, the budget on the embedded ledger (every call reserved and committed), the audit log to a file (%s), Prometheus metrics and the access log; no alias, pool, policy, guardrail or cache.", r.Audit)
	w("- **pipeline**: a second `flexway serve` with a realistic policy set on: the alias `%s` failing over from backend `sample` to `sample-spare` (both the same flexway-sample), a pool of two keys on `sample`, one policy with a governance allowlist (the alias, both backends), per-minute caps (requests_per_minute, tokens_per_minute) far above the load, pii + secrets guardrails on the prompt and the answer, and the exact response cache, which every call misses: each call's user message carries a sequence number, on every path alike (%d answers came from the cache). Concurrency 1 and %s only.", pipelineAlias, r.CacheHits, rate)
	w("- **gofloor**: the Go floor, the harness binary started again as its own process with `%s LISTEN SAMPLE`: a net/http server with httputil.ReverseProxy, an http.Transport keeping up to %d idle connections to the sample, FlushInterval −1; it does nothing else.", goproxyModeArg, goproxyIdleConns)
	w("- **nginx**: `nginx -p DIR -c nginx.conf -g 'daemon off;'` on a config the harness writes: worker_processes 1, an upstream with keepalive 64, proxy_http_version 1.1, `Connection \"\"`, proxy_buffering off, an access log to a file, every path in the run's directory. Its CPU is the master's and the worker's.")
	w("- **relay**: the harness binary with `%s LISTEN SAMPLE`, a byte-for-byte TCP relay that parses nothing: what one more process in the path costs.", relayModeArg)
	w("- **direct**: harness → sample. Every path gets the same body and headers (the model aside on the pipeline path); the sample ignores the Authorization header.")
	w("- Memory: Flexway, then the Go floor, each fresh in front of a sample that holds streams open; then the bare net/http hold server (`%s LISTEN`, no upstream), all measured the same way.", holdModeArg)
	w("- CPU per request: utime + stime of the middle process's group (/proc/PID/stat), clock ticks of `getconf CLK_TCK`, over the concurrency-1 phase and over each path's own turns at %s, ÷ the requests answered.", rate)
	w("- Loopback: every process on 127.0.0.1, HTTP/1.1 with keep-alive; the harness shares the CPUs with the servers.")
	w("- GOMAXPROCS: %s.", r.GOMAXPROCS)
	w("- Upstream: flexway-sample; streaming phase with --chunk-delay %s --chunks %d, memory phase with --chunk-delay %s.", pacedChunkDelay, pacedChunks, holdChunkDelay)
	w("")
	w("## Targets (issue 19)")
	w("")
	w("Added = the path's percentile − direct's. A missed target is reported, not an error.")
	w("")
	w("| target | flexway | bound from the floor | ratio to the floor | |")
	w("|---|---|---|---|---|")
	for _, c := range r.checks() {
		w("| %s | %s | %s | %s | %s |", c.Target, dash(c.Measured), dash(c.Reference), dash(c.Ratio), c.verdict())
	}
	w("")
	w("## Flexway beside its floors")
	w("")
	w("| measure | flexway | pipeline on | Go floor | nginx | relay | flexway ÷ Go floor | flexway ÷ nginx |")
	w("|---|---|---|---|---|---|---|---|")
	for _, row := range r.besideRows() {
		w("| %s | %s | %s | %s | %s | %s | %s | %s |", row.name,
			r.cell(row, pathFlexway), r.cell(row, pathPipeline), r.cell(row, pathGoFloor), r.cell(row, pathNginx), r.cell(row, pathRelay),
			r.rowRatio(row, pathGoFloor), r.rowRatio(row, pathNginx))
	}
	w("")
	w("## Non-streaming chat")
	w("")
	w("Latency from send (open loop: from the scheduled send) to the end of the answer; CPU per request of the process in the middle.")
	w("")
	w("### Concurrency 1 (the paths alternating request by request)")
	w("")
	w("| path | n | p50 | added p50 | p99 | added p99 | CPU per request |")
	w("|---|---|---|---|---|---|---|")
	for _, i := range chatPaths {
		if r.absent(i) {
			w("| %s | %s | %s | %s | %s | %s | %s |", pathNames[i], nginxAbsent, nginxAbsent, nginxAbsent, nginxAbsent, nginxAbsent, nginxAbsent)
			continue
		}
		d := r.C1[i]
		w("| %s | %s | %s | %s | %s | %s | %s |", pathNames[i], count(d), durOf(d, p50), addedCell(r.C1, i, p50), durOf(d, p99), addedCell(r.C1, i, p99), cpuCell(r.C1CPU, i))
	}
	w("")
	w("### Open loop at %s (%d turns per path)", rate, fixedRounds)
	w("")
	w("| path | n | p50 | added p50 | p99 | added p99 | p99.9 | added p99.9 | CPU per request | errors | answers/s |")
	w("|---|---|---|---|---|---|---|---|---|---|---|")
	fixed := r.fixedDists()
	for _, i := range chatPaths {
		if r.absent(i) {
			w("| %s |%s", pathNames[i], strings.Repeat(" "+nginxAbsent+" |", 10))
			continue
		}
		o := r.Fixed[i]
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %.0f |", pathNames[i], count(o.dist),
			durOf(o.dist, p50), addedCell(fixed, i, p50), durOf(o.dist, p99), addedCell(fixed, i, p99),
			durOf(o.dist, p999), addedCell(fixed, i, p999), cpuCell(r.FixedCPU, i), o.Errors, o.Achieved)
	}
	w("")
	if r.Lag.N > 0 {
		w("The pacer dispatched p50 %s and p99 %s after the scheduled time (timer resolution; included in every path's latency).", fmtDur(r.Lag.P50), fmtDur(r.Lag.P99))
		w("")
	}
	w("### Sustained throughput (open loop, p99 ≤ %s, no error; the better of %d runs per step)", fmtDur(maxP99), stepTries)
	w("")
	if len(r.Steps) > 0 {
		w("| rate (req/s) |%s", headerCells(ladderPaths, " p99 |"))
		w("|---|%s", strings.Repeat("---|", len(ladderPaths)))
		for _, s := range r.Steps {
			var cells []string
			for _, i := range ladderPaths {
				if r.absent(i) {
					cells = append(cells, nginxAbsent)
				} else {
					cells = append(cells, s.cell(i))
				}
			}
			w("| %.0f | %s |", s.Rate, strings.Join(cells, " | "))
		}
		w("")
		var best []string
		for _, i := range ladderPaths {
			if r.absent(i) {
				best = append(best, pathNames[i]+" "+nginxAbsent)
				continue
			}
			best = append(best, pathNames[i]+" "+bestRate(r.Best[i], r.Capped[i]))
		}
		w("Best passing rate: %s.", strings.Join(best, "; "))
	} else {
		w("Not measured.")
	}
	w("")
	w("## Streaming (paced: a chunk every %s)", pacedChunkDelay)
	w("")
	w("| path | n | first SSE byte p50 | first content chunk p50 | added | first content chunk p99 | gap p50 | added | gap p99 |")
	w("|---|---|---|---|---|---|---|---|---|")
	for _, i := range ladderPaths {
		if r.absent(i) {
			w("| %s |%s", pathNames[i], strings.Repeat(" "+nginxAbsent+" |", 8))
			continue
		}
		fc, g := r.FirstContent[i], r.Gaps[i]
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |", pathNames[i], count(fc), durOf(r.FirstByte[i], p50),
			durOf(fc, p50), addedCell(r.FirstContent, i, p50), durOf(fc, p99),
			durOf(g, p50), addedCell(r.Gaps, i, p50), durOf(g, p99))
	}
	w("")
	if f := added(r.FirstByte, pathFlexway, p50); f.ok && f.d > pacedChunkDelay/2 {
		w("Flexway holds role-only chunks, and the response headers, until the first chunk with content, so that a backend failing before any content can still be fallen back from; its first byte comes with the first content chunk, one chunk delay after the others'. The time to the first content chunk compares like with like.")
		w("")
	}
	w("## Memory with %d open streams", openStreamCount)
	w("")
	w("(VmRSS with the streams open − VmRSS idle after a warm-up) ÷ streams.")
	w("")
	w("| server | idle | open | per open stream |")
	w("|---|---|---|---|")
	for _, m := range []struct {
		name string
		m    *memory
	}{{"flexway", r.Memory}, {"gofloor (an upstream connection per stream too)", r.GoFloorMemory}, {"hold: bare net/http server, no upstream", r.HoldMemory}} {
		if m.m == nil {
			w("| %s | — | — | not measured |", m.name)
			continue
		}
		w("| %s | %d KiB | %d KiB (%d streams) | **%.1f KiB** |", m.name, m.m.IdleKiB, m.m.OpenKiB, m.m.Streams, m.m.PerStream())
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

// absent says path i is nginx and nginx is not installed.
func (r *report) absent(i int) bool { return i == pathNginx && r.NginxAbsent != "" }

// dash is s, or "—" when s is empty.
func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// count is d's sample count, or "—".
func count(d dist) string {
	if d.N == 0 {
		return "—"
	}
	return fmt.Sprint(d.N)
}

// durOf is d's q-percentile, or "—" when d is empty.
func durOf(d dist, q func(dist) time.Duration) string {
	if d.N == 0 {
		return "—"
	}
	return fmtDur(q(d))
}

// addedCell is path i's added q-percentile on ds: "—" for direct itself
// and when not measured.
func addedCell(ds [numPaths]dist, i int, q func(dist) time.Duration) string {
	f := added(ds, i, q)
	if i == pathDirect || !f.ok {
		return "—"
	}
	return fmtDur(f.d)
}

// cpuCell is path i's CPU per request, or "—".
func cpuCell(c [numPaths]cpuUse, i int) string {
	f := cpuFigure(c, i)
	if !f.ok {
		return "—"
	}
	return fmtDur(f.d)
}

// headerCells is " NAME SUFFIX" for each path of idx.
func headerCells(idx []int, suffix string) string {
	var b strings.Builder
	for _, i := range idx {
		b.WriteString(" " + pathNames[i] + suffix)
	}
	return b.String()
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
