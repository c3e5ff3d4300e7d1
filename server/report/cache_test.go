package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cacheFixture writes an audit with response cache hits, misses, a
// bypass and lines from before the response cache (no cache fields), and
// returns its path.
//
// Expected for November 2026 (UTC), by tenant:
//
//	acme:    5 calls (2 hits saving 150 + 40 tokens, a miss, a bypass, an old line), 117 in, 58 out, 0.000326 local
//	globex:  1 old line, 20 in, 2 out, 0.000022 upstream: 0 hits, 0 saved
//	initech: 1 hit with no cache_saved_tokens (0 saved), free
//
// and a hit of December (1000 saved) out of the period.
func cacheFixture(t *testing.T) string {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.jsonl")
	writeFile(t, p, lines(
		rec{Time: "2026-11-10T08:00:00Z", Tenant: "acme", Agent: "bot", Backend: "main", ModelServed: "m-1",
			InputTokens: 100, OutputTokens: 50, CostEUR: "0.000300000", MeteredBy: "local", Cache: "miss"},
		// A hit spends no tokens and costs the policy's hit_price (0 here).
		rec{Time: "2026-11-10T08:01:00Z", Tenant: "acme", Agent: "bot", Backend: "main", ModelServed: "m-1",
			CostEUR: "0.000000000", MeteredBy: "local", Cache: "hit", CacheSaved: 150},
		// A hit_price of 0.000001 €.
		rec{Time: "2026-11-10T08:02:00Z", Tenant: "acme", Agent: "helper", Backend: "main", ModelServed: "m-1",
			CostEUR: "0.000001000", MeteredBy: "local", Cache: "hit", CacheSaved: 40},
		rec{Time: "2026-11-10T08:03:00Z", Tenant: "acme", Agent: "helper", Backend: "main", ModelServed: "m-1",
			InputTokens: 10, OutputTokens: 5, CostEUR: "0.000015000", MeteredBy: "local", Cache: "bypass"},
		// From before the response cache: no cache fields.
		rec{Time: "2026-11-10T08:04:00Z", Tenant: "acme", Agent: "bot", Backend: "main", ModelServed: "m-1",
			InputTokens: 7, OutputTokens: 3, CostEUR: "0.000010000", MeteredBy: "local"},
	))
	writeFile(t, filepath.Join(dir, "audit-2026-11-20T10-00-00.000.jsonl"), lines(
		rec{Time: "2026-11-12T10:00:00Z", Tenant: "globex", Agent: "x", Backend: "alt", ModelServed: "gpt-x",
			InputTokens: 20, OutputTokens: 2, CostEUR: "0.000022000", MeteredBy: "upstream"},
		// A hit whose entry was filled by a call that reported no tokens:
		// cache_saved_tokens is not written.
		rec{Time: "2026-11-13T10:00:00Z", Tenant: "initech", Agent: "y", Backend: "main", ModelServed: "m-1",
			CostEUR: "0.000000000", MeteredBy: "local", Cache: "hit"},
		// First nanosecond of December: out of the period.
		rec{Time: "2026-12-01T00:00:00Z", Tenant: "acme", Agent: "bot", Backend: "main", ModelServed: "m-1",
			CostEUR: "0.000000000", MeteredBy: "local", Cache: "hit", CacheSaved: 1000},
	))
	return p
}

// TestCacheHitsCSV: cache_hits and cache_saved_tokens come last in csv,
// per tenant and in TOTAL; misses, bypasses and old lines add nothing to
// them, and the hit out of the period is not counted.
func TestCacheHitsCSV(t *testing.T) {
	p := cacheFixture(t)
	got, stderr := runOut(t, "--audit", p, "--month", "2026-11", "--format", "csv")
	want := `tenant,calls,input_tokens,output_tokens,cost_eur,cost_local_eur,cost_upstream_eur,estimated_calls,cost_estimated_eur,cache_read_tokens,cache_write_tokens,cache_hits,cache_saved_tokens
acme,5,117,58,0.000326,0.000326,0.00,0,0.00,0,0,2,190
globex,1,20,2,0.000022,0.00,0.000022,0,0.00,0,0,0,0
initech,1,0,0,0.00,0.00,0.00,0,0.00,0,0,1,0
TOTAL,7,137,60,0.000348,0.000326,0.000022,0,0.00,0,0,3,190
`
	if got != want {
		t.Errorf("csv:\n%s\nwant:\n%s", got, want)
	}
	if stderr != "" {
		t.Errorf("stderr: %q", stderr)
	}
}

// TestCacheHitsJSONByAgent: the hits and saved tokens follow --by (here
// tenant and agent) in json, as integers, and the total sums them.
func TestCacheHitsJSONByAgent(t *testing.T) {
	p := cacheFixture(t)
	got, _ := runOut(t, "--audit", p, "--month", "2026-11", "--format", "json", "--by", "tenant,agent")
	want := `[
  {"tenant":"acme","agent":"bot","calls":3,"input_tokens":107,"output_tokens":53,"cost_eur":"0.00031","cost_local_eur":"0.00031","cost_upstream_eur":"0.00","estimated_calls":0,"cost_estimated_eur":"0.00","cache_read_tokens":0,"cache_write_tokens":0,"cache_hits":1,"cache_saved_tokens":150},
  {"tenant":"acme","agent":"helper","calls":2,"input_tokens":10,"output_tokens":5,"cost_eur":"0.000016","cost_local_eur":"0.000016","cost_upstream_eur":"0.00","estimated_calls":0,"cost_estimated_eur":"0.00","cache_read_tokens":0,"cache_write_tokens":0,"cache_hits":1,"cache_saved_tokens":40},
  {"tenant":"globex","agent":"x","calls":1,"input_tokens":20,"output_tokens":2,"cost_eur":"0.000022","cost_local_eur":"0.00","cost_upstream_eur":"0.000022","estimated_calls":0,"cost_estimated_eur":"0.00","cache_read_tokens":0,"cache_write_tokens":0,"cache_hits":0,"cache_saved_tokens":0},
  {"tenant":"initech","agent":"y","calls":1,"input_tokens":0,"output_tokens":0,"cost_eur":"0.00","cost_local_eur":"0.00","cost_upstream_eur":"0.00","estimated_calls":0,"cost_estimated_eur":"0.00","cache_read_tokens":0,"cache_write_tokens":0,"cache_hits":1,"cache_saved_tokens":0},
  {"total":true,"calls":7,"input_tokens":137,"output_tokens":60,"cost_eur":"0.000348","cost_local_eur":"0.000326","cost_upstream_eur":"0.000022","estimated_calls":0,"cost_estimated_eur":"0.00","cache_read_tokens":0,"cache_write_tokens":0,"cache_hits":3,"cache_saved_tokens":190}
]
`
	if got != want {
		t.Errorf("json:\n%s\nwant:\n%s", got, want)
	}
	var v []map[string]any
	if err := json.Unmarshal([]byte(got), &v); err != nil {
		t.Fatal(err)
	}
	if last := v[len(v)-1]; last["cache_hits"] != 3.0 || last["cache_saved_tokens"] != 190.0 {
		t.Errorf("json total: %v", last)
	}
}

// TestCacheHitsTable: the table has CACHE HITS and CACHE SAVED last,
// right-aligned, and a note saying what they are when there are hits.
func TestCacheHitsTable(t *testing.T) {
	p := cacheFixture(t)
	got, _ := runOut(t, "--audit", p, "--month", "2026-11")
	want := `Flexway chargeback, November 2026 (UTC), by tenant
7 calls in the period out of 8 audit lines in 2 files

TENANT   CALLS  INPUT TOKENS  OUTPUT TOKENS       EUR  LOCAL EUR  UPSTREAM EUR  ESTIMATED  ESTIMATED EUR  CACHE READ  CACHE WRITE  CACHE HITS  CACHE SAVED
acme         5           117             58  0.000326   0.000326      0.00              0           0.00           0            0           2          190
globex       1            20              2  0.000022   0.00          0.000022          0           0.00           0            0           0            0
initech      1             0              0  0.00       0.00          0.00              0           0.00           0            0           1            0
----------------------------------------------------------------------------------------------------------------------------------------------------------
TOTAL        7           137             60  0.000348   0.000326      0.000022          0           0.00           0            0           3          190

EUR = LOCAL EUR (metered and billed by this gateway) + UPSTREAM EUR (by a relay's peer: metering: upstream).
CACHE HITS, CACHE SAVED: calls answered from Flexway's response cache (counted in CALLS, with no input or output tokens, charged their policy's hit_price in EUR), and the input plus output tokens of the calls that filled those entries: tokens the hits did not spend.
`
	if got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	// No hits, no note.
	got, _ = runOut(t, "--audit", fixture(t), "--month", "2026-11")
	if strings.Contains(got, "CACHE HITS,") {
		t.Errorf("a note on cache hits with none:\n%s", got)
	}
}

// TestCacheHitsComputeManyBatches: hits summed by many workers over many
// batches and two files total exactly, per row and overall.
func TestCacheHitsComputeManyBatches(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.jsonl")
	var live, backup strings.Builder
	var wantHits, wantSaved [2]int64
	for i := range 20_000 {
		r := rec{Time: "2026-11-10T00:00:00Z", Tenant: fmt.Sprintf("t%d", i%2), CostEUR: "0.000000001", MeteredBy: "local"}
		switch i % 4 {
		case 0:
			r.Cache, r.CacheSaved = "hit", int64(i)
			wantHits[i%2]++
			wantSaved[i%2] += int64(i)
		case 1:
			r.Cache, r.InputTokens, r.OutputTokens = "miss", 3, 4
		case 2:
			r.Cache, r.InputTokens = "bypass", 1
		case 3: // an old line
			r.InputTokens = 2
		}
		b := &live
		if i%3 == 0 {
			b = &backup
		}
		b.WriteString(r.line())
	}
	writeFile(t, p, live.String())
	writeFile(t, filepath.Join(dir, "audit-2026-11-20T10-00-00.000.jsonl.gz"), backup.String())
	from, to := utcMonth(2026, time.November)
	rep, err := Compute(Query{Audit: p, From: from, To: to, By: []Dimension{Tenant}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows", len(rep.Rows))
	}
	for i, r := range rep.Rows {
		if r.CacheHits != wantHits[i] || r.CacheSavedTokens != wantSaved[i] {
			t.Errorf("%s: %d hits, %d saved; want %d, %d", r.Keys[0], r.CacheHits, r.CacheSavedTokens, wantHits[i], wantSaved[i])
		}
	}
	if rep.Total.Calls != 20_000 || rep.Total.CacheHits != wantHits[0]+wantHits[1] || rep.Total.CacheSavedTokens != wantSaved[0]+wantSaved[1] {
		t.Errorf("total: %+v", rep.Total)
	}
}

// TestCacheSavedTokensOverflowFails: saved tokens that no int64 holds
// fail the report, as every other total does.
func TestCacheSavedTokensOverflowFails(t *testing.T) {
	p := filepath.Join(t.TempDir(), "audit.jsonl")
	big := rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", CostEUR: "0.000000000", MeteredBy: "local", Cache: "hit", CacheSaved: math.MaxInt64/2 + 1}.line()
	writeFile(t, p, big+big)
	_, err := Compute(Query{Audit: p, To: time.Now(), By: []Dimension{Tenant}})
	if err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("got %v", err)
	}
}

// badCacheLines are audit lines whose cache fields are malformed, and what
// the report says of each.
var badCacheLines = []struct{ bad, want string }{
	{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000000","cache":"hit","cache_saved_tokens":-1}`, "negative cache_saved_tokens -1"},
	{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000000","cache":"miss","cache_saved_tokens":5}`, "cache_saved_tokens 5 on a cache miss: only a cache hit saves tokens"},
	{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000000","cache":"bypass","cache_saved_tokens":5}`, "cache_saved_tokens 5 on a cache bypass: only a cache hit saves tokens"},
	{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000000","cache_saved_tokens":5}`, "cache_saved_tokens 5 with no cache field: only a cache hit saves tokens"},
	{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000000","cache":"HIT"}`, `cache "HIT": want hit, miss or bypass, or no cache field`},
	{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000000","cache":"stale","cache_saved_tokens":5}`, `cache "stale": want hit, miss or bypass`},
	{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000000","cache":true}`, "not an audit line"},
	{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000000","cache":"hit","cache_saved_tokens":"5"}`, "not an audit line"},
	{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000000","cache":"hit","cache_saved_tokens":1.5}`, "not an audit line"},
}

// TestBadCacheLineFails: without --skip-bad, a malformed cache field stops
// the report with the file, the line number, why, and how to go on.
func TestBadCacheLineFails(t *testing.T) {
	good := rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", CostEUR: "0.000000001", MeteredBy: "local", Cache: "hit", CacheSaved: 9}.line()
	for _, c := range badCacheLines {
		p := filepath.Join(t.TempDir(), "audit.jsonl")
		writeFile(t, p, good+good+c.bad+"\n"+good)
		var out bytes.Buffer
		err := Run([]string{"--audit", p, "--month", "2026-11"}, &out, &bytes.Buffer{})
		if err == nil || !strings.HasPrefix(err.Error(), p+":3: ") || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--skip-bad") {
			t.Errorf("%s: got %v, want %s:3: ...%s...--skip-bad", c.bad, err, p, c.want)
		}
		if out.Len() != 0 {
			t.Errorf("%s: wrote %q", c.bad, out.String())
		}
	}
}

// TestBadCacheLinesSkipped: with --skip-bad, lines with malformed cache
// fields are left out, each named on stderr, and the hits and saved
// tokens are exactly those of the good lines, in every format.
func TestBadCacheLinesSkipped(t *testing.T) {
	hit := rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", CostEUR: "0.000000001", MeteredBy: "local", Cache: "hit", CacheSaved: 9}.line()
	miss := rec{Time: "2026-11-10T00:00:01Z", Tenant: "acme", InputTokens: 6, OutputTokens: 3, CostEUR: "0.000000010", MeteredBy: "local", Cache: "miss"}.line()
	var b strings.Builder
	b.WriteString(hit + miss)
	for _, c := range badCacheLines {
		b.WriteString(c.bad + "\n")
	}
	b.WriteString(hit)
	p := filepath.Join(t.TempDir(), "audit.jsonl")
	writeFile(t, p, b.String())
	nbad := len(badCacheLines)

	out, stderr := runOut(t, "--audit", p, "--month", "2026-11", "--format", "csv", "--skip-bad")
	want := "tenant,calls,input_tokens,output_tokens,cost_eur,cost_local_eur,cost_upstream_eur,estimated_calls,cost_estimated_eur,cache_read_tokens,cache_write_tokens,cache_hits,cache_saved_tokens,bad_lines_skipped\n" +
		"acme,3,6,3,0.000000012,0.000000012,0.00,0,0.00,0,0,2,18,\n" +
		fmt.Sprintf("TOTAL,3,6,3,0.000000012,0.000000012,0.00,0,0.00,0,0,2,18,%d\n", nbad)
	if out != want {
		t.Errorf("csv:\n%s\nwant:\n%s", out, want)
	}
	if !strings.Contains(stderr, fmt.Sprintf("--skip-bad: left out %d bad audit lines", nbad)) {
		t.Errorf("stderr lacks the count:\n%s", stderr)
	}
	named := map[string]string{} // "file:line: " to the rest of its stderr line
	for _, l := range strings.Split(stderr, "\n") {
		if pos, why, ok := strings.Cut(strings.TrimPrefix(l, "  "), ": "); ok {
			named[pos] = why
		}
	}
	for i, c := range badCacheLines {
		pos := fmt.Sprintf("%s:%d", p, i+3)
		if !strings.Contains(named[pos], c.want) {
			t.Errorf("stderr names %s as %q, want %q:\n%s", pos, named[pos], c.want, stderr)
		}
	}

	out, _ = runOut(t, "--audit", p, "--month", "2026-11", "--format", "json", "--skip-bad")
	var objs []map[string]any
	if err := json.Unmarshal([]byte(out), &objs); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if last := objs[len(objs)-1]; last["cache_hits"] != 2.0 || last["cache_saved_tokens"] != 18.0 || last["bad_lines_skipped"] != float64(nbad) || last["calls"] != 3.0 {
		t.Errorf("json total: %v", last)
	}

	out, _ = runOut(t, "--audit", p, "--month", "2026-11", "--skip-bad")
	if !strings.Contains(out, fmt.Sprintf("BAD LINES: %d malformed audit lines left out", nbad)) {
		t.Errorf("table lacks the bad lines note:\n%s", out)
	}
	var total string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "TOTAL") {
			total = l
		}
	}
	if f := strings.Fields(total); len(f) < 2 || f[len(f)-2] != "2" || f[len(f)-1] != "18" {
		t.Errorf("table TOTAL row %q: want CACHE HITS 2, CACHE SAVED 18 last", total)
	}
}
