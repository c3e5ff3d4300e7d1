package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// The phases' parameters at --duration-scale 1. Durations and counts are
// multiplied by the scale, with a floor that keeps a smoke run meaningful.
const (
	warmupRequests = 200
	c1Requests     = 2000
	fixedRate      = 1000.0 // requests/s
	// fixedDuration is each path's time at fixedRate, over fixedRounds
	// turns: 30 s, so that its p99.9 rests on 30 samples past it.
	fixedDuration = 30 * time.Second
	fixedRounds   = 10 // turns per path over fixedDuration
	// pipelineShare is the pipeline path's turn at fixedRate as a share of
	// the others': it checks only a p50, which 10,000 calls settle.
	pipelineShare    = 1.0 / 3
	stepDuration     = 1500 * time.Millisecond
	stepPause        = 250 * time.Millisecond
	stepTries        = 2 // runs per throughput step and path; the best counts
	maxP99           = 5 * time.Millisecond
	pacedChunkDelay  = 20 * time.Millisecond
	pacedChunks      = 10
	pacedStreams     = 100
	pacedConcurrency = 8
	pacedRounds      = 2 // turns per path over pacedStreams

	// openStreamCount is the memory phase's open streams; it is not scaled.
	openStreamCount = 1000
	// holdChunkDelay paces the memory phase's sample so slowly that its
	// streams stay open, yet below the gateway's 30 s idle timeout.
	holdChunkDelay = 5 * time.Second
	holdChunks     = 60
	// openingAtOnce bounds the streams waiting for their first byte.
	openingAtOnce = 100
	// settle is how long RSS is left to settle before it is read.
	settle = 500 * time.Millisecond
	// memoryWarmups is how many non-streaming calls warm a proxy up before
	// its idle reading in the memory phase.
	memoryWarmups = 50
)

// The paths, in the order in which they take turns; each is also its index
// in the per-path arrays of the bench and the report.
const (
	pathDirect   = iota // harness → sample
	pathFlexway         // harness → gateway → sample (identity, budget, audit, metrics)
	pathPipeline        // harness → gateway with pipelineConfig's policy set → sample
	pathGoFloor         // harness → httputil.ReverseProxy (-goproxy-mode) → sample
	pathNginx           // harness → nginx → sample, where nginx is installed
	pathRelay           // harness → TCP relay (-relay-mode) → sample
	numPaths
)

// pathNames names the paths in progress lines, by index.
var pathNames = [numPaths]string{"direct", "flexway", "pipeline", "gofloor", "nginx", "relay"}

// chatPaths are the paths of the concurrency-1 and fixed-rate phases: all.
var chatPaths = []int{pathDirect, pathFlexway, pathPipeline, pathGoFloor, pathNginx, pathRelay}

// ladderPaths are the paths of the throughput and streaming phases: all
// but the pipeline row, which issue 19 checks at concurrency 1 and at
// fixedRate only.
var ladderPaths = []int{pathDirect, pathFlexway, pathGoFloor, pathNginx, pathRelay}

// stepRates is the open-loop throughput ladder, in requests/s.
var stepRates = []float64{500, 1000, 1500, 2000, 3000, 4000, 6000, 8000, 12000, 16000}

// bench runs the phases and fills the report.
type bench struct {
	opts options
	load *load
	// paths holds each path by index; nil for one that is absent (nginx
	// not installed).
	paths    [numPaths]*path
	hz       int64 // clock ticks per second, for cpuUse
	rep      *report
	progress io.Writer
}

// present returns the paths among want that are not absent, as indexes.
func (b *bench) present(want []int) []int {
	var out []int
	for _, i := range want {
		if b.paths[i] != nil {
			out = append(out, i)
		}
	}
	return out
}

// names lists the paths idx for progress lines.
func names(idx []int) string {
	s := make([]string, len(idx))
	for k, i := range idx {
		s[k] = pathNames[i]
	}
	return strings.Join(s, ", ")
}

// scaled returns d times the duration scale, at least floor.
func (b *bench) scaled(d, floor time.Duration) time.Duration {
	return max(time.Duration(float64(d)*b.opts.scale), floor)
}

// count returns n times the duration scale, at least floor.
func (b *bench) count(n, floor int) int {
	return max(int(math.Round(float64(n)*b.opts.scale)), floor)
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "flexway-load: "+format+"\n", args...)
}

// readCPU reads the CPU time, in clock ticks, of the middle process of
// each path in idx that has one.
func (b *bench) readCPU(idx []int) ([numPaths]int64, error) {
	var t [numPaths]int64
	for _, i := range idx {
		if m := b.paths[i].cpu; m != nil {
			v, err := m()
			if err != nil {
				return t, fmt.Errorf("%s: CPU time: %w", pathNames[i], err)
			}
			t[i] = v
		}
	}
	return t, nil
}

// concurrencyOne warms the paths up, then measures them at concurrency 1,
// the paths alternating request by request. Each middle process's CPU time
// over the measured requests of all paths, divided by its own requests, is
// its CPU per request: at concurrency 1 it has nothing to do during the
// other paths' requests but idle.
func (b *bench) concurrencyOne(ctx context.Context) error {
	idx := b.present(chatPaths)
	ps := make([]path, len(idx))
	for k, i := range idx {
		ps[k] = *b.paths[i]
	}
	n := b.count(c1Requests, 100)
	b.logf("warm-up, then concurrency 1: %d requests per path (%s)", n, names(idx))
	if _, err := b.load.sequential(ctx, ps, b.count(warmupRequests, 20)); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	before, cpuErr := b.readCPU(idx)
	lat, err := b.load.sequential(ctx, ps, n)
	if err != nil {
		return fmt.Errorf("concurrency 1: %w", err)
	}
	after, err := b.readCPU(idx)
	cpuErr = cmp.Or(cpuErr, err)
	for k, i := range idx {
		b.rep.C1[i] = summarize(lat[k])
		if b.paths[i].cpu != nil && cpuErr == nil {
			b.rep.C1CPU[i] = cpuUse{Ticks: after[i] - before[i], Requests: len(lat[k]), Hz: b.hz}
		}
	}
	if cpuErr != nil {
		return fmt.Errorf("concurrency 1: %w", cpuErr)
	}
	return nil
}

// fixedRateLoad measures the paths at the open-loop fixedRate, the paths
// taking turns, and the CPU time each middle process used in its own turns.
func (b *bench) fixedRateLoad(ctx context.Context) error {
	idx := b.present(chatPaths)
	round := b.scaled(fixedDuration/fixedRounds, 200*time.Millisecond)
	b.logf("open loop at %.0f req/s: %d turns of %s per path (the pipeline's %s; %s)", fixedRate, fixedRounds, round,
		b.pipelineTurn(round), names(idx))
	var res [numPaths]openResult
	var cpu [numPaths]cpuUse
	var cpuErr error
	for range fixedRounds {
		for _, i := range idx {
			turn := round
			if i == pathPipeline {
				turn = b.pipelineTurn(round)
			}
			before, err := b.readCPU([]int{i})
			r := b.load.openLoop(ctx, *b.paths[i], fixedRate, turn)
			after, err2 := b.readCPU([]int{i})
			if err = cmp.Or(err, err2); err != nil {
				cpuErr = cmp.Or(cpuErr, err)
			} else {
				cpu[i].add(after[i]-before[i], len(r.Latencies))
			}
			res[i].merge(r)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var lag []time.Duration
	var failed []string
	for _, i := range idx {
		r := res[i]
		lag = append(lag, r.Lag...)
		b.rep.Fixed[i] = openOne{dist: summarize(r.Latencies), Errors: r.Errors, Achieved: achieved(r)}
		if b.paths[i].cpu != nil && cpuErr == nil {
			cpu[i].Hz = b.hz
			b.rep.FixedCPU[i] = cpu[i]
		}
		if r.Errors > 0 {
			failed = append(failed, fmt.Sprintf("%d %s", r.Errors, pathNames[i]))
		}
	}
	b.rep.Lag = summarize(lag)
	if len(failed) > 0 {
		return fmt.Errorf("open loop at %.0f req/s: requests failed: %s", fixedRate, strings.Join(failed, ", "))
	}
	if cpuErr != nil {
		return fmt.Errorf("open loop at %.0f req/s: %w", fixedRate, cpuErr)
	}
	return nil
}

// pipelineTurn is the pipeline path's turn at fixedRate: pipelineShare of
// the others', at least 200 ms.
func (b *bench) pipelineTurn(round time.Duration) time.Duration {
	return max(time.Duration(float64(round)*pipelineShare), 200*time.Millisecond)
}

// achieved is the rate of successful answers over the run.
func achieved(r openResult) float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(len(r.Latencies)) / r.Elapsed.Seconds()
}

// throughput steps the open-loop rate up on each path until its p99
// exceeds maxP99 or a request fails in each of stepTries runs.
func (b *bench) throughput(ctx context.Context) error {
	idx := b.present(ladderPaths)
	d := b.scaled(stepDuration, 500*time.Millisecond)
	b.logf("throughput: steps of %s per path until p99 > %s (%s)", d, maxP99, names(idx))
	var live [numPaths]bool
	for _, i := range idx {
		live[i] = true
	}
	for _, rate := range stepRates {
		if !slices.Contains(live[:], true) {
			break
		}
		s := step{Rate: rate}
		for _, i := range idx {
			if !live[i] {
				continue
			}
			// A step passes when one of stepTries runs keeps p99 and errors
			// within bounds: on a shared VM a single scheduling hiccup of a
			// few milliseconds fails a short run on any path.
			for try := 0; try < stepTries; try++ {
				r := b.load.openLoop(ctx, *b.paths[i], rate, d)
				if err := ctx.Err(); err != nil {
					return err
				}
				p99 := summarize(r.Latencies).P99
				if try == 0 || p99 < s.P99[i] {
					s.Ran[i], s.P99[i], s.Errors[i] = true, p99, r.Errors
				}
				if r.Errors == 0 && p99 <= maxP99 {
					s.P99[i], s.Errors[i] = p99, 0
					break
				}
				time.Sleep(stepPause)
			}
			if s.Errors[i] == 0 && s.P99[i] <= maxP99 {
				b.rep.Best[i] = rate
			} else {
				live[i] = false
			}
			time.Sleep(stepPause)
		}
		cells := make([]string, len(idx))
		for k, i := range idx {
			cells[k] = pathNames[i] + " " + s.cell(i)
		}
		b.logf("  %6.0f req/s: p99 %s", rate, strings.Join(cells, ", "))
		b.rep.Steps = append(b.rep.Steps, s)
	}
	b.rep.Capped = live
	return nil
}

// paced measures time to first byte, to the first content chunk and the
// gaps between chunks on the paced sample, the paths taking turns.
func (b *bench) paced(ctx context.Context) error {
	idx := b.present(ladderPaths)
	n := b.count(pacedStreams, 40)
	per := max(n/pacedRounds, 1)
	b.logf("streaming: %d streams per path, %d at a time (%s)", per*pacedRounds, pacedConcurrency, names(idx))
	var first, content, gaps [numPaths][]time.Duration
	for range pacedRounds {
		for _, i := range idx {
			ts, err := b.load.streams(ctx, *b.paths[i], per, pacedConcurrency, pacedChunks)
			if err != nil {
				return fmt.Errorf("streaming: %w", err)
			}
			for _, t := range ts {
				first[i] = append(first[i], t.FirstByte)
				content[i] = append(content[i], t.FirstContent)
				gaps[i] = append(gaps[i], t.Gaps...)
			}
		}
	}
	for _, i := range idx {
		b.rep.FirstByte[i] = summarize(first[i])
		b.rep.FirstContent[i] = summarize(content[i])
		b.rep.Gaps[i] = summarize(gaps[i])
	}
	return nil
}

// streamMemory starts a slowly streaming sample and a fresh gateway in
// front of it, and measures the gateway's RSS idle and with openStreamCount
// streams open. Both processes are stopped before it returns.
func (b *bench) streamMemory(ctx context.Context, dir string) error {
	b.logf("memory: %d open streams through a fresh gateway", openStreamCount)
	m, err := b.proxyMemory(ctx, dir, "gateway-hold", func(upstream string) (*proc, string, error) {
		gw, err := startGateway(ctx, b.opts, dir, "gateway-hold", upstream, b.load.key)
		if err != nil {
			return nil, "", err
		}
		return gw.proc, gw.base, nil
	})
	if err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	b.rep.Memory = m
	return nil
}

// goFloorMemory is streamMemory for the Go floor: a fresh -goproxy-mode
// process in front of a slowly streaming sample, which, like the gateway,
// holds an upstream connection for every stream.
func (b *bench) goFloorMemory(ctx context.Context, dir string) error {
	b.logf("memory: %d open streams through a fresh Go floor (%s)", openStreamCount, goproxyModeArg)
	m, err := b.proxyMemory(ctx, dir, "goproxy-hold", func(upstream string) (*proc, string, error) {
		gp, err := startGoProxy(ctx, dir, "goproxy-hold", upstream)
		if err != nil {
			return nil, "", err
		}
		return gp.proc, "http://" + gp.addr, nil
	})
	if err != nil {
		return fmt.Errorf("Go floor memory: %w", err)
	}
	b.rep.GoFloorMemory = m
	return nil
}

// proxyMemory starts a sample streaming one chunk every holdChunkDelay (its
// directory named after name) and, with start, a proxy in front of it
// (start returns the proxy's process and base URL); warms the proxy up with
// memoryWarmups non-streaming calls and measures its RSS with
// measureOpenStreams. Both processes are stopped before it returns.
func (b *bench) proxyMemory(ctx context.Context, dir, name string, start func(upstream string) (*proc, string, error)) (*memory, error) {
	smp, err := startSample(ctx, b.opts, dir, "sample-"+name, holdChunkDelay, holdChunks)
	if err != nil {
		return nil, err
	}
	defer smp.stop()
	px, base, err := start(smp.base)
	if err != nil {
		return nil, err
	}
	defer px.stop()
	l := b.memoryLoad()
	defer l.client.CloseIdleConnections()
	p := path{name: name, url: base + "/v1/chat/completions"}

	// Warm the proxy's pools and code paths up before the idle reading.
	for range memoryWarmups {
		if err := l.chat(ctx, p); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	m, err := measureOpenStreams(ctx, l, p, px.rssKiB)
	if err != nil {
		return nil, err
	}
	if px.exited() {
		return nil, fmt.Errorf("%s exited during the run: %s", name, px.logTail())
	}
	return &m, nil
}

// memoryLoad returns the memory phase's client: a pool large enough for
// every stream and every one being opened. The gateway's measurement and the
// hold server's each get one built the same way.
func (b *bench) memoryLoad() *load {
	return &load{client: newClient(openStreamCount + openingAtOnce), key: b.load.key}
}

// measureOpenStreams is the memory phase's measurement, the same for every
// server: it lets RSS settle and reads it (idle), opens openStreamCount
// streams on p, openingAtOnce at a time, and once all have received their
// first byte lets RSS settle and reads it again (open). rss reads the
// server's VmRSS.
func measureOpenStreams(ctx context.Context, l *load, p path, rss func() (int64, error)) (memory, error) {
	time.Sleep(settle)
	idle, err := rss()
	if err != nil {
		return memory{}, err
	}
	m := memory{IdleKiB: idle}
	m.Streams, err = l.openStreams(ctx, p, openStreamCount, openingAtOnce, func(int) error {
		time.Sleep(settle)
		var err error
		m.OpenKiB, err = rss()
		return err
	})
	if err != nil {
		return m, fmt.Errorf("%d streams open: %w", m.Streams, err)
	}
	return m, nil
}

// auditState describes what became of the configured audit log.
func auditState(file string) string {
	st, err := os.Stat(file)
	if err != nil {
		return "not written by this build (no file after the run)"
	}
	return fmt.Sprintf("written: %d bytes after the run", st.Size())
}
