package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexway/flexway/server/report"
)

// tieredUsage is an OpenAI usage reporting 1000 prompt tokens of which 600
// were read from the cache (OpenAI's prompt_tokens_details) and 100
// written to it (cache_creation_input_tokens, as an upstream passing
// Anthropic's usage through reports it), and 10 completion tokens.
const tieredUsage = `{"prompt_tokens":1000,"completion_tokens":10,"total_tokens":1010,` +
	`"prompt_tokens_details":{"cached_tokens":600,"audio_tokens":0},"cache_creation_input_tokens":100}`

// tieredCost is tieredUsage at main's price: 300 uncached × 1 €/M +
// 600 read × 0.10 €/M + 100 written × 1.25 €/M + 10 out × 2 €/M +
// 0.001 € per call, in nano-euros.
const tieredCost = 300_000 + 60_000 + 125_000 + 20_000 + 1_000_000

// TestCacheTiersCharged: an openai upstream that reports cached tokens is
// charged each tier at its price plus the per-call price, on the JSON and
// the stream path; the token cap counts every input token; the audit line
// and the report carry the tiers; a call no backend serves costs nothing,
// per-call price included.
func TestCacheTiersCharged(t *testing.T) {
	var failing atomic.Bool
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case failing.Load():
			jsonHandler(500, `{"error":{"message":"down"}}`)(w, r)
		case strings.Contains(string(body), `"stream":true`):
			sseUpstream(chunk(`[{"index":0,"delta":{"role":"assistant","content":"hi"}}]`, ""),
				chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""),
				chunk(`[]`, tieredUsage))(w, r)
		default:
			jsonHandler(200, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":`+tieredUsage+`}`)(w, r)
		}
	})
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	c := budgetTestConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 100000, eur_per_month: 5}")
	c.AuditPath = path
	cfg := c.yaml()
	const plain = "price: {input: 1.00, output: 2.00}"
	if strings.Count(cfg, plain) != 1 {
		t.Fatalf("main's price is not rendered as %q:\n%s", plain, cfg)
	}
	cfg = strings.Replace(cfg, plain, "price: {input: 1.00, output: 2.00, cache_read: 0.10, cache_write: 1.25, per_call: 0.001}", 1)
	g := startGateway(t, cfg)

	resp := post(t, g, "/v1/chat/completions", `{"model":"m","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`)
	if out := readJSON(t, resp); resp.StatusCode != 200 || out["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"] != 600.0 {
		t.Fatalf("JSON call: %d %v; the client sees cached_tokens as reported", resp.StatusCode, out)
	}
	u := usageOf(t, g, "")
	if u["eur_per_month"].Committed != tieredCost || u["tokens_per_day"].Committed != 1010 {
		t.Fatalf("after the JSON call: %d nano-euros, %d tokens committed; want %d, 1010 (every input token)", u["eur_per_month"].Committed, u["tokens_per_day"].Committed, tieredCost)
	}

	resp = post(t, g, "/v1/chat/completions", `{"model":"m","max_tokens":20,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"cached_tokens":600`) {
		t.Fatalf("stream: %d %s", resp.StatusCode, raw)
	}
	u = usageOf(t, g, "")
	if u["eur_per_month"].Committed != 2*tieredCost || u["tokens_per_day"].Committed != 2020 {
		t.Fatalf("after the stream: %d nano-euros, %d tokens; want %d, 2020", u["eur_per_month"].Committed, u["tokens_per_day"].Committed, 2*tieredCost)
	}

	failing.Store(true)
	resp = post(t, g, "/v1/chat/completions", `{"model":"m","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode < 500 {
		t.Fatalf("failing upstream: %d", resp.StatusCode)
	}
	u = usageOf(t, g, "")
	if u["eur_per_month"].Committed != 2*tieredCost || u["eur_per_month"].Reserved != 0 {
		t.Fatalf("after a failure: %d committed, %d reserved; want %d, 0: no per-call price for a call not served",
			u["eur_per_month"].Committed, u["eur_per_month"].Reserved, 2*tieredCost)
	}
	g.stop()
	g.wait(t, 10*time.Second)

	lines := auditLines(t, path)
	if len(lines) != 3 {
		t.Fatalf("%d audit lines, want 3", len(lines))
	}
	for i, l := range lines[:2] {
		if l["input_tokens"] != 1000.0 || l["cache_read_tokens"] != 600.0 || l["cache_write_tokens"] != 100.0 || l["output_tokens"] != 10.0 ||
			l["cost_eur"] != "0.001505000" || l["usage_estimated"] != false {
			t.Errorf("line %d: %v; want 1000 in (600 read, 100 written), 10 out, 0.001505000", i, l)
		}
	}
	if f := lines[2]; f["cache_read_tokens"] != 0.0 || f["cache_write_tokens"] != 0.0 || f["cost_eur"] != "0.000000000" {
		t.Errorf("failed call's line: %v", f)
	}

	from := time.Now().UTC().AddDate(0, 0, -1)
	rep, err := report.Compute(report.Query{Audit: path, From: from, To: from.AddDate(0, 0, 2), By: []report.Dimension{report.Tenant}})
	if err != nil {
		t.Fatal(err)
	}
	if tot := rep.Total; tot.InputTokens != 2000 || tot.CacheReadTokens != 1200 || tot.CacheWriteTokens != 200 || tot.CostNano != 2*tieredCost {
		t.Errorf("report total %+v: want 2000 in, 1200 read, 200 written, %d nano-euros", tot, 2*tieredCost)
	}
}
