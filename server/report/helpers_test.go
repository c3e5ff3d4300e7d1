package report

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rec is an audit line as the gateway writes it (every field of DESIGN.md,
// plus one the report does not know).
type rec struct {
	Time           string  `json:"time"`
	RequestID      string  `json:"request_id"`
	Operation      string  `json:"operation"`
	Tenant         string  `json:"tenant"`
	Agent          string  `json:"agent"`
	Backend        string  `json:"backend"`
	ModelRequested string  `json:"model_requested"`
	ModelServed    string  `json:"model_served"`
	Capability     string  `json:"capability"`
	Feature        string  `json:"feature"`
	InputTokens    int64   `json:"input_tokens"`
	OutputTokens   int64   `json:"output_tokens"`
	CacheRead      int64   `json:"cache_read_tokens,omitempty"` // absent: a line from before issue 14
	CacheWrite     int64   `json:"cache_write_tokens,omitempty"`
	Cache          string  `json:"cache,omitempty"`              // absent: no cache policy, or a line from before the response cache
	CacheSaved     int64   `json:"cache_saved_tokens,omitempty"` // written only for a hit that saved tokens
	CostEUR        string  `json:"cost_eur"`
	UsageEstimated bool    `json:"usage_estimated"`
	MeteredBy      string  `json:"metered_by"`
	Outcome        string  `json:"outcome"`
	Status         int     `json:"status"`
	Fallback       bool    `json:"fallback"`
	Soft           bool    `json:"soft"`
	DurationMS     float64 `json:"duration_ms"`
	KeyHash        string  `json:"key_hash"`
	UserHash       string  `json:"user_hash"`
	Future         any     `json:"future_field,omitempty"`
}

func (r rec) line() string {
	if r.Operation == "" {
		r.Operation = "ai.chatCompletions"
	}
	if r.Capability == "" {
		r.Capability = "chat"
	}
	if r.Outcome == "" {
		r.Outcome = "ok"
	}
	if r.Status == 0 {
		r.Status = 200
	}
	r.RequestID = "req_" + r.Time
	r.KeyHash = "9f86d081884c7d659a2feaa0c55ad015"
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return string(b) + "\n"
}

func lines(rs ...rec) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.line())
	}
	return b.String()
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	data := []byte(content)
	if strings.HasSuffix(path, ".gz") {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(data)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		data = buf.Bytes()
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// fixture writes a mixed audit with a rotated backup, a gzipped one and a
// file that only looks like a backup, and returns the audit path.
//
// Expected for November 2026 (UTC), by tenant:
//
//	acme:    5 calls, 131 in (60 cache read, 20 cache write), 59 out, 0.000370001 (local 0.000020001, upstream 0.000350000), 1 estimated 0.000050000
//	globex:  2 calls, 1040 in (800 cache read), 207 out, 0.012456789 (local 0.000111111, upstream 0.012345678), 1 estimated 0.000111111
//	initech: 1 call, 5 in, 5 out, 2.500000000 local
func fixture(t testing.TB) string {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	writeFile(t, path, lines(
		rec{Time: "2026-11-10T08:00:00.123456Z", Tenant: "acme", Agent: "bot", Backend: "main", ModelRequested: "m", ModelServed: "m-1",
			InputTokens: 10, OutputTokens: 5, CostEUR: "0.000020000", MeteredBy: "local", DurationMS: 12.3,
			Future: map[string]any{"x": []int{1, 2}}},
		rec{Time: "2026-11-10T08:00:01Z", Tenant: "acme", Agent: "bot", Backend: "main", ModelRequested: "m",
			CostEUR: "0.000000000", Outcome: "refused", Status: 429},
		rec{Time: "2026-11-10T08:00:02Z", Tenant: "acme", Agent: "helper", Backend: "main", ModelRequested: "m", ModelServed: "m-1",
			InputTokens: 100, OutputTokens: 50, CacheRead: 60, CacheWrite: 20, CostEUR: "0.000300000", MeteredBy: "upstream"},
		// Last nanosecond of October: out.
		rec{Time: "2026-10-31T23:59:59.999999999Z", Tenant: "globex", Agent: "x", Backend: "alt", ModelServed: "gpt-x",
			InputTokens: 1, OutputTokens: 1, CostEUR: "1.000000000", MeteredBy: "local"},
	))
	writeFile(t, filepath.Join(dir, "audit-2026-11-15T10-00-00.000.jsonl"), lines(
		rec{Time: "2026-11-12T10:00:00Z", Tenant: "globex", Backend: "alt", ModelRequested: "gpt", ModelServed: "gpt-x",
			InputTokens: 1000, OutputTokens: 200, CacheRead: 800, CostEUR: "0.012345678", MeteredBy: "upstream"},
		rec{Time: "2026-11-12T10:00:01Z", Tenant: "globex", Backend: "alt", ModelRequested: "gpt", ModelServed: "gpt-x",
			InputTokens: 40, OutputTokens: 7, CostEUR: "0.000111111", MeteredBy: "local", UsageEstimated: true, Outcome: "canceled", Status: 499},
		// First nanosecond of December: out.
		rec{Time: "2026-12-01T00:00:00Z", Tenant: "acme", Agent: "bot", Backend: "main", ModelServed: "m-1",
			InputTokens: 1, OutputTokens: 1, CostEUR: "3.000000000", MeteredBy: "local"},
		// Last nanosecond of November: in.
		rec{Time: "2026-11-30T23:59:59.999999999Z", Tenant: "acme", Agent: "bot", Backend: "main", ModelServed: "m-1",
			InputTokens: 1, OutputTokens: 1, CostEUR: "0.000000001", MeteredBy: "local"},
	))
	writeFile(t, filepath.Join(dir, "audit-2026-11-20T10-00-00.000.jsonl.gz"), lines(
		// First nanosecond of November: in.
		rec{Time: "2026-11-01T00:00:00Z", Tenant: "acme", Agent: "bot", Backend: "alt", ModelRequested: "m", ModelServed: "m-2",
			InputTokens: 20, OutputTokens: 3, CostEUR: "0.000050000", MeteredBy: "upstream", UsageEstimated: true, Outcome: "upstream_error", Status: 502},
		rec{Time: "2026-11-20T09:00:00Z", Tenant: "initech", Agent: "x", Backend: "main", ModelServed: "m-1",
			InputTokens: 5, OutputTokens: 5, CostEUR: "2.500000000", MeteredBy: "local", Capability: "embeddings", Operation: "ai.embeddings"},
	))
	// Not lumberjack names: never read (they would add 100 € each).
	for _, n := range []string{"audit-old.jsonl", "audit.jsonl.bak", "other-2026-11-15T10-00-00.000.jsonl", "audit-2026-11-15.jsonl"} {
		writeFile(t, filepath.Join(dir, n), lines(rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", CostEUR: "100.000000000", MeteredBy: "local"}))
	}
	return path
}

func utcMonth(y int, m time.Month) (time.Time, time.Time) {
	f := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	return f, f.AddDate(0, 1, 0)
}
