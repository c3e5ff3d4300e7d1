package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// requestTimeout bounds one non-streaming request.
	requestTimeout = 10 * time.Second
	// maxInFlight bounds the open-loop requests outstanding at once; a slot
	// that finds the bound reached is counted as an error, not sent, so an
	// overloaded server cannot make the harness open connections without
	// end.
	maxInFlight = 1024
)

// chatBody is the small non-streaming request sent on every path, for
// model, with call (a sequence number shared by all paths) in its user
// message: every call's message is unique, so that the pipeline path's
// response cache never answers one, and every path sends the same bytes
// but the model's name and the number.
func chatBody(model string, call uint64) []byte {
	return fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":"Say hello to the benchmark, call %d."}],"max_tokens":32}`, model, call)
}

// path is one way to the upstream (see pathNames). All get the same
// bodies and headers, but the model the pipeline path asks for.
type path struct {
	name  string   // one of pathNames
	url   string   // the chat completions URL
	model string   // the model asked for in chat calls; "" is sampleModel
	cpu   cpuMeter // the CPU time of the process in the middle; nil direct
}

// newClient returns an HTTP client with a keep-alive pool large enough for
// conns connections to one host, so that no measurement pays for a dial
// that a long-running client would not.
func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil, // loopback only; never an environment proxy
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        2 * conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     2 * time.Minute,
		DisableCompression:  true,
	}}
}

// load sends requests on every path with one client.
type load struct {
	client    *http.Client
	key       string        // the bearer key, sent on every path
	calls     atomic.Uint64 // chat calls sent, numbering their messages
	cacheHits atomic.Int64  // answers marked Flexway-Cache: hit
}

// newRequest builds a chat completion request for p.
func (l *load) newRequest(ctx context.Context, p path, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+l.key)
	return req, nil
}

// chat sends one non-streaming request and reads the whole answer; any
// status but 200 is an error. An answer from a response cache is counted
// in cacheHits.
func (l *load) chat(ctx context.Context, p path) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	model := p.model
	if model == "" {
		model = sampleModel
	}
	req, err := l.newRequest(ctx, p, chatBody(model, l.calls.Add(1)))
	if err != nil {
		return err
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Flexway-Cache") == "hit" {
		l.cacheHits.Add(1)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", p.name, resp.StatusCode)
	}
	return err
}

// sequential sends n requests on every path at concurrency 1, the paths
// alternating request by request, and returns each path's latencies in
// the order of paths. It stops at the first error.
func (l *load) sequential(ctx context.Context, paths []path, n int) ([][]time.Duration, error) {
	lat := make([][]time.Duration, len(paths))
	for i := range lat {
		lat[i] = make([]time.Duration, 0, n)
	}
	for range n {
		for i, p := range paths {
			start := time.Now()
			if err := l.chat(ctx, p); err != nil {
				return nil, err
			}
			lat[i] = append(lat[i], time.Since(start))
		}
	}
	return lat, nil
}

// openResult is the outcome of an open-loop run.
type openResult struct {
	Latencies []time.Duration // of the successful requests, from their scheduled time
	Lag       []time.Duration // how late the pacer dispatched each request
	Errors    int             // failed requests and slots dropped at maxInFlight
	Elapsed   time.Duration   // from the first slot to the last answer
}

// openLoop sends requests to p at rate per second for d. Request i is
// scheduled at start + i/rate whatever happened to the ones before it, and
// its latency runs from that scheduled time to the end of its answer, so
// that a stall delays the requests scheduled behind it in the figures too.
//
// The pacer sleeps until the next slot and then dispatches every slot that
// is due; Go's timers may wake it up to about a millisecond late on an idle
// process, which shows in Lag and, equally on both paths, in Latencies.
func (l *load) openLoop(ctx context.Context, p path, rate float64, d time.Duration) openResult {
	n := max(int(rate*d.Seconds()), 1)
	interval := time.Duration(float64(time.Second) / rate)
	lat := make([]time.Duration, n)
	ok := make([]bool, n)
	lag := make([]time.Duration, 0, n)
	var (
		wg       sync.WaitGroup
		inFlight atomic.Int64
		errs     atomic.Int64
	)
	start := time.Now()
	for i := 0; i < n && ctx.Err() == nil; {
		slot := start.Add(time.Duration(i) * interval)
		if wait := time.Until(slot); wait > 0 {
			time.Sleep(wait)
		}
		now := time.Now()
		for ; i < n; i++ {
			slot := start.Add(time.Duration(i) * interval)
			if slot.After(now) {
				break
			}
			lag = append(lag, now.Sub(slot))
			if inFlight.Add(1) > maxInFlight {
				inFlight.Add(-1)
				errs.Add(1)
				continue
			}
			wg.Add(1)
			go func(i int, slot time.Time) {
				defer wg.Done()
				defer inFlight.Add(-1)
				if err := l.chat(ctx, p); err != nil {
					errs.Add(1)
					return
				}
				lat[i], ok[i] = time.Since(slot), true
			}(i, slot)
		}
	}
	wg.Wait()
	res := openResult{Lag: lag, Errors: int(errs.Load()), Elapsed: time.Since(start)}
	res.Latencies = make([]time.Duration, 0, n)
	for i, done := range ok {
		if done {
			res.Latencies = append(res.Latencies, lat[i])
		}
	}
	res.Errors += n - len(lag) // slots never reached because ctx ended
	return res
}

// merge appends b's samples to a.
func (a *openResult) merge(b openResult) {
	a.Latencies = append(a.Latencies, b.Latencies...)
	a.Lag = append(a.Lag, b.Lag...)
	a.Errors += b.Errors
	a.Elapsed += b.Elapsed
}
