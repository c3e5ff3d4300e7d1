package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"
)

// The phases' parameters at --duration-scale 1. Durations and counts are
// multiplied by the scale, with a floor that keeps a smoke run meaningful.
const (
	warmupRequests   = 200
	c1Requests       = 2000
	fixedRate        = 1000.0 // requests/s
	fixedDuration    = 5 * time.Second
	fixedRounds      = 5 // turns per path over fixedDuration
	stepDuration     = 3 * time.Second
	stepPause        = 250 * time.Millisecond
	stepTries        = 2 // runs per throughput step and path; the best counts
	maxP99           = 5 * time.Millisecond
	pacedChunkDelay  = 20 * time.Millisecond
	pacedChunks      = 10
	pacedStreams     = 200
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
)

// The paths, in the order in which they take turns; each is also its index
// in the per-path arrays (step, report.Best, report.Capped).
const (
	pathDirect  = iota // harness → sample
	pathFlexway        // harness → gateway → sample
	pathRelay          // harness → TCP relay → sample
	numPaths
)

// stepRates is the open-loop throughput ladder, in requests/s.
var stepRates = []float64{500, 1000, 1500, 2000, 3000, 4000, 6000, 8000, 12000, 16000}

// bench runs the phases and fills the report.
type bench struct {
	opts     options
	load     *load
	direct   path
	flexway  path
	relay    path // the floor: what any process between harness and sample adds
	rep      *report
	progress io.Writer
}

// paths returns the non-streaming phases' paths in index order: direct,
// flexway, relay.
func (b *bench) paths() []path { return []path{b.direct, b.flexway, b.relay} }

// streamPaths returns the streaming phase's paths: direct, then flexway.
func (b *bench) streamPaths() []path { return []path{b.direct, b.flexway} }

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

// concurrencyOne warms the paths up, then measures them at concurrency 1.
func (b *bench) concurrencyOne(ctx context.Context) error {
	n := b.count(c1Requests, 100)
	b.logf("warm-up, then concurrency 1: %d requests per path (direct, flexway, relay)", n)
	if _, err := b.load.sequential(ctx, b.paths(), b.count(warmupRequests, 20)); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	lat, err := b.load.sequential(ctx, b.paths(), n)
	if err != nil {
		return fmt.Errorf("concurrency 1: %w", err)
	}
	b.rep.C1 = pair{Direct: summarize(lat[pathDirect]), Flexway: summarize(lat[pathFlexway])}
	b.rep.RelayC1 = summarize(lat[pathRelay])
	return nil
}

// fixedRateLoad measures the paths at the open-loop fixedRate, the paths
// taking turns.
func (b *bench) fixedRateLoad(ctx context.Context) error {
	round := b.scaled(fixedDuration/fixedRounds, 200*time.Millisecond)
	b.logf("open loop at %.0f req/s: %d rounds of %s per path", fixedRate, fixedRounds, round)
	var res [numPaths]openResult
	for range fixedRounds {
		for i, p := range b.paths() {
			res[i].merge(b.load.openLoop(ctx, p, fixedRate, round))
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.rep.Fixed = openPair{
		pair:     pair{Direct: summarize(res[0].Latencies), Flexway: summarize(res[1].Latencies)},
		Errors:   [2]int{res[0].Errors, res[1].Errors},
		Lag:      summarize(append(res[0].Lag, res[1].Lag...)),
		Achieved: [2]float64{achieved(res[0]), achieved(res[1])},
	}
	r := res[pathRelay]
	b.rep.RelayFixed = openOne{dist: summarize(r.Latencies), Errors: r.Errors, Achieved: achieved(r)}
	if e := b.rep.Fixed.Errors; e[0]+e[1]+r.Errors > 0 {
		return fmt.Errorf("open loop at %.0f req/s: %d direct, %d flexway and %d relay requests failed", fixedRate, e[0], e[1], r.Errors)
	}
	return nil
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
	d := b.scaled(stepDuration, 500*time.Millisecond)
	b.logf("throughput: steps of %s per path until p99 > %s", d, maxP99)
	live := [numPaths]bool{true, true, true}
	for _, rate := range stepRates {
		if !slices.Contains(live[:], true) {
			break
		}
		s := step{Rate: rate}
		for i, p := range b.paths() {
			if !live[i] {
				continue
			}
			// A step passes when one of stepTries runs keeps p99 and errors
			// within bounds: on a shared VM a single scheduling hiccup of a
			// few milliseconds fails a 3 s run on either path.
			for try := 0; try < stepTries; try++ {
				r := b.load.openLoop(ctx, p, rate, d)
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
		b.logf("  %6.0f req/s: direct p99 %s, flexway p99 %s, relay p99 %s", rate, s.cell(pathDirect), s.cell(pathFlexway), s.cell(pathRelay))
		b.rep.Steps = append(b.rep.Steps, s)
	}
	b.rep.Capped = live
	return nil
}

// paced measures time to first byte and inter-chunk gaps on the paced
// sample, the paths taking turns.
func (b *bench) paced(ctx context.Context) error {
	n := b.count(pacedStreams, 40)
	per := max(n/pacedRounds, 1)
	b.logf("streaming: %d streams per path, %d at a time", per*pacedRounds, pacedConcurrency)
	var first, content, gaps [2][]time.Duration
	for range pacedRounds {
		for i, p := range b.streamPaths() {
			ts, err := b.load.streams(ctx, p, per, pacedConcurrency, pacedChunks)
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
	b.rep.FirstByte = pair{Direct: summarize(first[0]), Flexway: summarize(first[1])}
	b.rep.FirstContent = pair{Direct: summarize(content[0]), Flexway: summarize(content[1])}
	b.rep.Gaps = pair{Direct: summarize(gaps[0]), Flexway: summarize(gaps[1])}
	return nil
}

// streamMemory starts a slowly streaming sample and a fresh gateway in front of
// it, and measures the gateway's RSS idle and with openStreamCount streams
// open. Both processes are stopped before it returns.
func (b *bench) streamMemory(ctx context.Context, dir string) error {
	b.logf("memory: %d open streams through a fresh gateway", openStreamCount)
	smp, err := startSample(ctx, b.opts, dir, "sample-hold", holdChunkDelay, holdChunks)
	if err != nil {
		return err
	}
	defer smp.stop()
	gw, err := startGateway(ctx, b.opts, dir, "gateway-hold", smp.base, b.load.key)
	if err != nil {
		return err
	}
	defer gw.stop()
	l := b.memoryLoad()
	defer l.client.CloseIdleConnections()
	p := path{name: "flexway", url: gw.base + "/v1/chat/completions"}

	// Warm the gateway's pools and code paths up before the idle reading.
	for range 50 {
		if err := l.chat(ctx, p); err != nil {
			return fmt.Errorf("memory warm-up: %w", err)
		}
	}
	m, err := measureOpenStreams(ctx, l, p, gw.rssKiB)
	if err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	b.rep.Memory = &m
	return nil
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
