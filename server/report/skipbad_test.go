package report

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNullLineNamed: a `null` line (what the audit writer's race of issue
// 12 wrote) stops the report with its file, its line number and why, and
// says how to go on; it used to say only "no time".
func TestNullLineNamed(t *testing.T) {
	good := rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", CostEUR: "0.000000001", MeteredBy: "local"}.line()
	for _, bad := range []string{"null", "[1,2]", "42", `"x"`} {
		p := filepath.Join(t.TempDir(), "audit.jsonl")
		writeFile(t, p, good+good+bad+"\n"+good)
		err := Run([]string{"--audit", p, "--month", "2026-11"}, &bytes.Buffer{}, &bytes.Buffer{})
		want := p + ":3: not an audit line: want a JSON object, got " + strconv.Quote(bad)
		if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "--skip-bad") {
			t.Errorf("%s: got %v, want %s...--skip-bad", bad, err, want)
		}
	}
}

// TestSkipBad: with --skip-bad, bad lines (null, a line over 1 MiB, a bad
// cost, a torn line in a backup) are left out, each named on stderr, their
// number given in every output format, and the totals are exactly those
// of the good lines.
func TestSkipBad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.jsonl")
	a := rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", InputTokens: 3, OutputTokens: 4, CostEUR: "0.000000007", MeteredBy: "local"}.line()
	b := rec{Time: "2026-11-11T00:00:00Z", Tenant: "globex", InputTokens: 10, OutputTokens: 1, CostEUR: "1.000000011", MeteredBy: "upstream"}.line()
	long := `{"time":"2026-11-10T00:00:00Z","model_requested":"` + strings.Repeat("m", maxLine+10) + `","cost_eur":"9.000000000","metered_by":"local"}` + "\n"
	writeFile(t, p, a+"null\n"+b+long+a+`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.1","metered_by":"local"}`+"\n"+b)
	bk := filepath.Join(dir, "audit-2026-11-20T10-00-00.000.jsonl")
	writeFile(t, bk, a+a[:20]+"\n"+a)

	// Without it, the first bad line stops the report.
	if err := Run([]string{"--audit", p, "--month", "2026-11"}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.HasPrefix(err.Error(), p+":2: ") {
		t.Fatalf("without --skip-bad: %v", err)
	}
	// The line over 1 MiB alone stops it too, at its number.
	writeFile(t, filepath.Join(dir, "audit-2026-11-20T10-00-00.000.jsonl"), a)
	writeFile(t, p, a+b+long+a)
	if err := Run([]string{"--audit", p, "--month", "2026-11"}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.HasPrefix(err.Error(), p+":3: line longer than") {
		t.Fatalf("long line without --skip-bad: %v", err)
	}
	writeFile(t, p, a+"null\n"+b+long+a+`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.1","metered_by":"local"}`+"\n"+b)
	writeFile(t, bk, a+a[:20]+"\n"+a)

	var out, errb bytes.Buffer
	if err := Run([]string{"--audit", p, "--month", "2026-11", "--format", "csv", "--skip-bad"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	// Good lines: a×4 (3 in, 4 out, 7 n€ each), b×2 (10 in, 1 out, 1.000000011 € each).
	want := `tenant,calls,input_tokens,output_tokens,cost_eur,cost_local_eur,cost_upstream_eur,estimated_calls,cost_estimated_eur,cache_read_tokens,cache_write_tokens,cache_hits,cache_saved_tokens,bad_lines_skipped
acme,4,12,16,0.000000028,0.000000028,0.00,0,0.00,0,0,0,0,
globex,2,20,2,2.000000022,0.00,2.000000022,0,0.00,0,0,0,0,
TOTAL,6,32,18,2.00000005,0.000000028,2.000000022,0,0.00,0,0,0,0,4
`
	if out.String() != want {
		t.Errorf("csv:\n%s\nwant:\n%s", out.String(), want)
	}
	for _, w := range []string{
		"--skip-bad: left out 4 bad audit lines; the totals do not include them",
		p + ":2: not an audit line: want a JSON object, got \"null\"",
		p + ":4: line longer than 1048576 bytes",
		p + `:6: cost_eur "0.1": want exactly 9 decimals`,
		bk + ":2: not an audit line",
	} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, errb.String())
		}
	}

	out.Reset()
	if err := Run([]string{"--audit", p, "--month", "2026-11", "--format", "json", "--skip-bad"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var objs []map[string]any
	if err := json.Unmarshal(out.Bytes(), &objs); err != nil {
		t.Fatalf("json: %v\n%s", err, out.String())
	}
	if last := objs[len(objs)-1]; last["bad_lines_skipped"] != 4.0 || last["cost_eur"] != "2.00000005" || last["calls"] != 6.0 {
		t.Errorf("json total: %v", last)
	}

	out.Reset()
	if err := Run([]string{"--audit", p, "--month", "2026-11", "--skip-bad"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "BAD LINES: 4 malformed audit lines left out (--skip-bad)") {
		t.Errorf("table:\n%s", out.String())
	}

	// Many bad lines: all counted, the first 20 named.
	var many strings.Builder
	for range 50 {
		many.WriteString("null\n" + a)
	}
	writeFile(t, p, many.String())
	writeFile(t, bk, a)
	from, to := utcMonth(2026, time.November)
	rep, err := Compute(Query{Audit: p, From: from, To: to, By: []Dimension{Tenant}, SkipBad: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.BadLines != 50 || len(rep.Bad) != maxBadListed || rep.Bad[0].Line != 1 || rep.Bad[19].Line != 39 || rep.Total.Calls != 51 {
		t.Errorf("%d bad lines, %d listed (first %v, last %v), %d calls", rep.BadLines, len(rep.Bad), rep.Bad[0], rep.Bad[len(rep.Bad)-1], rep.Total.Calls)
	}
}
