package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexway/flexway/cmd/flexway/gateway"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/ledger"
)

// These benchmarks run the gateway inside the benchmark process, so
// allocs/op and B/op count everything one call allocates here: the caller's
// request, the HTTP front, the in-process gRPC channel, the interceptor
// chain, the core, the backend's client and the fake upstream's handler.
// That is the point: it is the whole cost of a call on one machine. The
// load harness, cmd/flexway-load, measures the same path across processes.
//
//	go test -run '^$' -bench ChatCompletion -benchmem ./cmd/flexway/

// benchChatBody is the non-streaming request both benchmarks send.
const benchChatBody = `{"model":"m-large","messages":[{"role":"user","content":"Say hello to the benchmark."}]}`

// newBenchUpstream is an upstream that answers every request with the
// canned [completion]. Unlike [newUpstream] it records nothing, so that
// neither its memory nor its allocations grow with b.N.
func newBenchUpstream(b *testing.B) *httptest.Server {
	b.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		jsonHandler(http.StatusOK, completion)(w, r)
	}))
	b.Cleanup(up.Close)
	return up
}

// BenchmarkChatCompletionInProcess measures one non-streaming chat
// completion through a running gateway ([startGateway]): a full HTTP round
// trip over loopback with a keep-alive client, identity checked, answered
// by a fake upstream.
func BenchmarkChatCompletionInProcess(b *testing.B) {
	up := newBenchUpstream(b)
	g := startGateway(b, baseConfig(b, up.URL, ""))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	b.Cleanup(client.CloseIdleConnections)
	url := g.HTTP + "/v1/chat/completions"

	b.ReportAllocs()
	for b.Loop() {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(benchChatBody))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+demoKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d, read error %v", resp.StatusCode, err)
		}
	}
}

// BenchmarkChatCompletionHandler measures only the in-process path of the
// same call: the gateway's HTTP handler is called directly, with no caller
// connection or HTTP server in front of it, so the difference from
// [BenchmarkChatCompletionInProcess] is the caller-side HTTP. The hop to the
// fake upstream is still loopback HTTP.
//
// budget=off builds the gateway without a ledger (metrics are always on);
// budget=embedded,audit adds the audit log, to a file; budget=embedded meters
// every call against caps in force (tokens per day and euros per month, for
// the tenant) in the embedded ledger, and budget=redis in the Redis ledger
// at FLEXWAY_TEST_REDIS_URL (database 3; skipped without it): their
// difference is what the budget adds to a call.
func BenchmarkChatCompletionHandler(b *testing.B) {
	caps := "    default: {tokens_per_day: 1000000000000, eur_per_month: 1000000}"
	for _, bc := range []struct {
		name, budget  string
		ledger, audit bool
	}{
		{"budget=off", caps, false, false},
		{"budget=embedded", caps, true, false},
		{"budget=embedded,audit", caps, true, true},
		{"budget=redis", "", true, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			up := newBenchUpstream(b)
			b.Setenv("FLEXWAY_TEST_KEY", demoKey)
			b.Setenv("FLEXWAY_TEST_UPSTREAM_TOKEN", "upstream-secret-token")
			budget := bc.budget
			if bc.name == "budget=redis" {
				url := os.Getenv("FLEXWAY_TEST_REDIS_URL")
				if url == "" {
					b.Skip("FLEXWAY_TEST_REDIS_URL is not set")
				}
				url += "/3"
				if _, err := ledger.InitRedis(context.Background(), url); err != nil {
					b.Fatal(err)
				}
				budget = redisBudget(url, 1_000_000_000_000)
			}
			text := budgetConfig(b, up.URL, up.URL, budget)
			if bc.audit {
				text += "audit:\n  path: " + filepath.Join(b.TempDir(), "audit.jsonl") + "\n"
			}
			gw := benchGateway(b, text, bc.ledger, bc.audit)

			b.ReportAllocs()
			took := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(benchChatBody))
				req.Header.Set("Authorization", "Bearer "+demoKey)
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				start := time.Now()
				gw.Handler().ServeHTTP(rec, req)
				took = append(took, time.Since(start))
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
			// Percentiles of the handler's time per call (the caller's
			// request building excluded): the budget's added p50 is the
			// difference of the sub-benchmarks' p50-ns.
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

// BenchmarkOversizedBodyRefused sends a 25 MiB chat body (over the 24 MiB
// ai.vision.max_body_bytes) to the handler: with its Content-Length it is
// refused unread; without one (chunked) it is read up to the limit and no
// further. B/op is the memory one refusal costs: bounded by the limit, not
// by the body.
func BenchmarkOversizedBodyRefused(b *testing.B) {
	up := newBenchUpstream(b)
	b.Setenv("FLEXWAY_TEST_KEY", demoKey)
	b.Setenv("FLEXWAY_TEST_UPSTREAM_TOKEN", "upstream-secret-token")
	path := filepath.Join(b.TempDir(), "flexway.yaml")
	if err := os.WriteFile(path, []byte(baseConfig(b, up.URL, "")), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg, _, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, SkipLedger: true, SkipAudit: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = gw.Close() })
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 25<<20) + `"}]}`)
	for _, known := range []bool{true, false} {
		b.Run(fmt.Sprintf("content-length=%v", known), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
				if !known {
					req.ContentLength = -1
				}
				req.Header.Set("Authorization", "Bearer "+demoKey)
				rec := httptest.NewRecorder()
				gw.Handler().ServeHTTP(rec, req)
				if rec.Code != http.StatusRequestEntityTooLarge {
					b.Fatalf("status %d", rec.Code)
				}
			}
		})
	}
}

// BenchmarkAuditAndMetricsAdded measures what the audit line and the
// metrics add to one call (issue 7's target: ≤ 10 µs at p50). Gateways are
// built from the same configuration, with the embedded ledger and caps in
// force, differing only in what measures: "off" has no audit and
// telemetry.prometheus: false, so nothing does; "audit" writes the audit
// log to a file; "metrics" exports on /metrics (Prometheus: otelhttp's
// server metrics and flexway.inference.*); "audit+metrics" does both, as
// the default configuration with an audit path does. Each iteration calls
// every handler once, in a rotating order, so that the machine's drifting
// load falls on all equally; <variant>-added-p50-ns is the variant's p50
// handler time minus off's.
func BenchmarkAuditAndMetricsAdded(b *testing.B) {
	caps := "    default: {tokens_per_day: 1000000000000, eur_per_month: 1000000}"
	up := newBenchUpstream(b)
	b.Setenv("FLEXWAY_TEST_KEY", demoKey)
	b.Setenv("FLEXWAY_TEST_UPSTREAM_TOKEN", "upstream-secret-token")
	const (
		auditOn   = "audit:\n  path: %s\n  hash_key: env:FLEXWAY_TEST_KEY\n"
		metricOff = "telemetry:\n  prometheus: false\n"
	)
	variants := []struct {
		name            string
		audited, metric bool
	}{{"off", false, false}, {"audit", true, false}, {"metrics", false, true}, {"audit+metrics", true, true}}
	handlers := make([]http.Handler, len(variants))
	for i, v := range variants {
		text := budgetConfig(b, up.URL, up.URL, caps)
		if v.audited {
			text += fmt.Sprintf(auditOn, filepath.Join(b.TempDir(), "audit.jsonl"))
		}
		if !v.metric {
			text += metricOff
		}
		gw := benchGateway(b, text, true, v.audited)
		if gw.Metrics().Exporting() != v.metric {
			b.Fatalf("%s: metrics exporting = %v", v.name, gw.Metrics().Exporting())
		}
		handlers[i] = gw.Handler()
	}

	call := func(h http.Handler) time.Duration {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(benchChatBody))
		req.Header.Set("Authorization", "Bearer "+demoKey)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		took := time.Since(start)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		return took
	}
	took := make([][]time.Duration, len(variants))
	b.ReportAllocs()
	round := 0
	for b.Loop() {
		for j := range variants {
			k := (round + j) % len(variants)
			took[k] = append(took[k], call(handlers[k]))
		}
		round++
	}
	p50 := make([]time.Duration, len(variants))
	for i := range took {
		slices.Sort(took[i])
		p50[i] = took[i][len(took[i])/2]
	}
	b.ReportMetric(float64(p50[0].Nanoseconds()), "off-p50-ns")
	for i, v := range variants[1:] {
		b.ReportMetric(float64((p50[i+1] - p50[0]).Nanoseconds()), v.name+"-added-p50-ns")
	}
}

// benchGateway builds a gateway from a configuration's text the way serve
// does, minus the listeners: the gRPC core is reached on the in-process
// channel only. ledger opens the configured budget ledger, audited the
// configured audit log; everything is closed when b ends.
func benchGateway(b *testing.B, text string, withLedger, audited bool) *gateway.Gateway {
	b.Helper()
	path := filepath.Join(b.TempDir(), "flexway.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg, _, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, SkipLedger: !withLedger, SkipAudit: !audited})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = gw.Close() })
	return gw
}
