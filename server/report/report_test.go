package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func runOut(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	if err := Run(args, &out, &errb); err != nil {
		t.Fatalf("Run(%q): %v", args, err)
	}
	return out.String(), errb.String()
}

func TestCSV(t *testing.T) {
	p := fixture(t)
	got, stderr := runOut(t, "--audit", p, "--month", "2026-11", "--format", "csv")
	want := `tenant,calls,input_tokens,output_tokens,cost_eur,cost_local_eur,cost_upstream_eur,estimated_calls,cost_estimated_eur,cache_read_tokens,cache_write_tokens,cache_hits,cache_saved_tokens
acme,5,131,59,0.000370001,0.000020001,0.00035,1,0.00005,60,20,0,0
globex,2,1040,207,0.012456789,0.000111111,0.012345678,1,0.000111111,800,0,0,0
initech,1,5,5,2.50,2.50,0.00,0,0.00,0,0,0,0
TOTAL,8,1176,271,2.51282679,2.500131112,0.012695678,2,0.000161111,860,20,0,0
`
	if got != want {
		t.Errorf("csv:\n%s\nwant:\n%s", got, want)
	}
	if stderr != "" {
		t.Errorf("stderr: %q", stderr)
	}
}

func TestJSON(t *testing.T) {
	p := fixture(t)
	got, _ := runOut(t, "--audit", p, "--month", "2026-11", "--format", "json", "--by", "tenant,model")
	want := `[
  {"tenant":"acme","model":"m","calls":1,"input_tokens":0,"output_tokens":0,"cost_eur":"0.00","cost_local_eur":"0.00","cost_upstream_eur":"0.00","estimated_calls":0,"cost_estimated_eur":"0.00","cache_read_tokens":0,"cache_write_tokens":0,"cache_hits":0,"cache_saved_tokens":0},
  {"tenant":"acme","model":"m-1","calls":3,"input_tokens":111,"output_tokens":56,"cost_eur":"0.000320001","cost_local_eur":"0.000020001","cost_upstream_eur":"0.0003","estimated_calls":0,"cost_estimated_eur":"0.00","cache_read_tokens":60,"cache_write_tokens":20,"cache_hits":0,"cache_saved_tokens":0},
  {"tenant":"acme","model":"m-2","calls":1,"input_tokens":20,"output_tokens":3,"cost_eur":"0.00005","cost_local_eur":"0.00","cost_upstream_eur":"0.00005","estimated_calls":1,"cost_estimated_eur":"0.00005","cache_read_tokens":0,"cache_write_tokens":0,"cache_hits":0,"cache_saved_tokens":0},
  {"tenant":"globex","model":"gpt-x","calls":2,"input_tokens":1040,"output_tokens":207,"cost_eur":"0.012456789","cost_local_eur":"0.000111111","cost_upstream_eur":"0.012345678","estimated_calls":1,"cost_estimated_eur":"0.000111111","cache_read_tokens":800,"cache_write_tokens":0,"cache_hits":0,"cache_saved_tokens":0},
  {"tenant":"initech","model":"m-1","calls":1,"input_tokens":5,"output_tokens":5,"cost_eur":"2.50","cost_local_eur":"2.50","cost_upstream_eur":"0.00","estimated_calls":0,"cost_estimated_eur":"0.00","cache_read_tokens":0,"cache_write_tokens":0,"cache_hits":0,"cache_saved_tokens":0},
  {"total":true,"calls":8,"input_tokens":1176,"output_tokens":271,"cost_eur":"2.51282679","cost_local_eur":"2.500131112","cost_upstream_eur":"0.012695678","estimated_calls":2,"cost_estimated_eur":"0.000161111","cache_read_tokens":860,"cache_write_tokens":20,"cache_hits":0,"cache_saved_tokens":0}
]
`
	if got != want {
		t.Errorf("json:\n%s\nwant:\n%s", got, want)
	}
	// It is valid JSON with integers and decimal strings.
	var v []map[string]any
	if err := json.Unmarshal([]byte(got), &v); err != nil {
		t.Fatal(err)
	}
	if v[5]["calls"].(float64) != 8 || v[5]["cost_eur"].(string) != "2.51282679" || v[5]["total"] != true {
		t.Errorf("total object: %v", v[5])
	}
}

func TestTable(t *testing.T) {
	p := fixture(t)
	got, _ := runOut(t, "--audit", p, "--month", "2026-11", "--by", "tenant,agent")
	want := `Flexway chargeback, November 2026 (UTC), by tenant, agent
8 calls in the period out of 10 audit lines in 3 files

TENANT   AGENT   CALLS  INPUT TOKENS  OUTPUT TOKENS          EUR    LOCAL EUR  UPSTREAM EUR  ESTIMATED  ESTIMATED EUR  CACHE READ  CACHE WRITE  CACHE HITS  CACHE SAVED
acme     bot         4            31              9  0.000070001  0.000020001   0.00005              1    0.00005               0            0           0            0
acme     helper      1           100             50  0.0003       0.00          0.0003               0    0.00                 60           20           0            0
globex   -           2          1040            207  0.012456789  0.000111111   0.012345678          1    0.000111111         800            0           0            0
initech  x           1             5              5  2.50         2.50          0.00                 0    0.00                  0            0           0            0
-----------------------------------------------------------------------------------------------------------------------------------------------------------------------
TOTAL                8          1176            271  2.51282679   2.500131112   0.012695678          2    0.000161111         860           20           0            0

EUR = LOCAL EUR (metered and billed by this gateway) + UPSTREAM EUR (by a relay's peer: metering: upstream).
CACHE READ, CACHE WRITE: input tokens the providers read from and wrote to their prompt caches, counted in INPUT TOKENS and charged at each backend's cache_read and cache_write prices.
ESTIMATED: 2 calls were charged 0.000161111 EUR on usage Flexway estimated because the upstream never reported it (a cut stream); included in EUR.
`
	if got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestComputeTotals(t *testing.T) {
	p := fixture(t)
	from, to := utcMonth(2026, time.November)
	rep, err := Compute(Query{Audit: p, From: from, To: to, By: []Dimension{Backend, MeteredBy}})
	if err != nil {
		t.Fatal(err)
	}
	want := Totals{Calls: 8, InputTokens: 1176, OutputTokens: 271, CostNano: 2_512_826_790,
		LocalCostNano: 2_500_131_112, UpstreamCostNano: 12_695_678, EstimatedCalls: 2, EstimatedCostNano: 161_111,
		CacheReadTokens: 860, CacheWriteTokens: 20}
	if rep.Total != want {
		t.Errorf("total = %+v, want %+v", rep.Total, want)
	}
	if rep.Lines != 10 || rep.InPeriod != 8 || len(rep.Files) != 3 {
		t.Errorf("lines %d, in period %d, files %q", rep.Lines, rep.InPeriod, rep.Files)
	}
	var keys []string
	for _, r := range rep.Rows {
		keys = append(keys, strings.Join(r.Keys, "/"))
	}
	if got := strings.Join(keys, " "); got != "alt/local alt/upstream main/ main/local main/upstream" {
		t.Errorf("rows %s", got)
	}
	if rep.Rows[1].CostNano != 12_395_678 || rep.Rows[1].EstimatedCalls != 1 {
		t.Errorf("alt/upstream = %+v", rep.Rows[1].Totals)
	}
}

// edgeAudit has one line per instant, each with a distinct power-of-two
// cost in nano-euros, so the total cost tells exactly which lines counted.
func edgeAudit(t *testing.T, times ...string) string {
	var rs []rec
	for i, tm := range times {
		rs = append(rs, rec{Time: tm, Tenant: "acme", CostEUR: fmt.Sprintf("0.%09d", 1<<i), MeteredBy: "local"})
	}
	p := filepath.Join(t.TempDir(), "audit.jsonl")
	writeFile(t, p, lines(rs...))
	return p
}

func TestPeriodEdges(t *testing.T) {
	p := edgeAudit(t,
		"2026-10-31T22:59:59.999999999Z", // 1: last ns of October in Paris
		"2026-10-31T23:00:00Z",           // 2: first ns of November in Paris
		"2026-10-31T23:59:59.999999999Z", // 4: last ns of October in UTC
		"2026-11-01T00:00:00Z",           // 8: first ns of November in UTC
		"2026-11-30T22:59:59.999999999Z", // 16: last ns of November in Paris
		"2026-11-30T23:00:00Z",           // 32: first ns of December in Paris
		"2026-11-30T23:59:59.999999999Z", // 64: last ns of November in UTC
		"2026-12-01T00:00:00Z",           // 128: first ns of December in UTC
		"2026-12-01T00:30:00+01:00",      // 256: = 2026-11-30T23:30Z, an offset is an instant
		"2026-03-31T21:59:59.999999999Z", // 512: last ns of March in Paris (CEST)
		"2026-03-31T22:00:00Z",           // 1024: first ns of April in Paris
		"2026-02-28T22:59:59.999999999Z", // 2048: last ns of February in Paris (CET)
		"2026-02-28T23:00:00Z",           // 4096: first ns of March in Paris
	)
	cases := []struct {
		args []string
		want int64
	}{
		{[]string{"--month", "2026-11"}, 8 + 16 + 32 + 64 + 256},
		{[]string{"--month", "2026-11", "--tz", "UTC"}, 8 + 16 + 32 + 64 + 256},
		{[]string{"--month", "2026-11", "--tz", "Europe/Paris"}, 2 + 4 + 8 + 16},
		{[]string{"--from", "2026-11-01", "--to", "2026-11-30"}, 8 + 16 + 32 + 64 + 256},
		{[]string{"--from", "2026-11-30", "--to", "2026-11-30"}, 16 + 32 + 64 + 256},
		{[]string{"--from", "2026-11-30", "--to", "2026-11-30", "--tz", "Europe/Paris"}, 16},
		{[]string{"--from", "2026-10-31", "--to", "2026-10-31", "--tz", "Europe/Paris"}, 1},
		{[]string{"--month", "2026-03", "--tz", "Europe/Paris"}, 512 + 4096},
		{[]string{"--month", "2026-04", "--tz", "Europe/Paris"}, 1024},
		{[]string{"--month", "2026-02", "--tz", "Europe/Paris"}, 2048},
	}
	for _, c := range cases {
		o, err := parseArgs(append([]string{"--audit", p}, c.args...), time.Now)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := Compute(o.query)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Total.CostNano != c.want {
			t.Errorf("%q: cost %d nano, want %d (bits = the lines counted)", c.args, rep.Total.CostNano, c.want)
		}
	}
}

func TestDefaultIsCurrentMonth(t *testing.T) {
	p := edgeAudit(t, "2026-10-31T23:30:00Z", "2026-11-15T00:00:00Z", "2026-12-01T00:00:00Z")
	now := func() time.Time { return time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC) }
	var out bytes.Buffer
	if err := run([]string{"--audit", p, "--format", "csv"}, &out, &bytes.Buffer{}, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "TOTAL,1,0,0,0.000000002,") {
		t.Errorf("UTC November: %s", out.String())
	}
	// At 23:59 UTC on Nov 30 it is already December in Paris.
	out.Reset()
	if err := run([]string{"--audit", p, "--format", "csv", "--tz", "Europe/Paris"}, &out, &bytes.Buffer{}, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "TOTAL,1,0,0,0.000000004,") {
		t.Errorf("Paris December: %s", out.String())
	}
}

func TestBadFlags(t *testing.T) {
	p := fixture(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{}, "--audit PATH is required"},
		{[]string{"--audit", p, "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"--audit", p, "extra"}, `unexpected argument "extra"`},
		{[]string{"--audit", p, "--format", "xml"}, `--format "xml": want table, csv or json`},
		{[]string{"--audit", p, "--by", "tenant,user"}, `unknown key "user"`},
		{[]string{"--audit", p, "--by", ""}, `unknown key ""`},
		{[]string{"--audit", p, "--by", "tenant,tenant"}, "tenant given twice"},
		{[]string{"--audit", p, "--month", "2026-13"}, `--month "2026-13": want YYYY-MM`},
		{[]string{"--audit", p, "--month", "11/2026"}, `--month "11/2026": want YYYY-MM`},
		{[]string{"--audit", p, "--month", "2026-11", "--from", "2026-11-01", "--to", "2026-11-02"}, "exclude each other"},
		{[]string{"--audit", p, "--from", "2026-11-01"}, "--from and --to go together"},
		{[]string{"--audit", p, "--to", "2026-11-01"}, "--from and --to go together"},
		{[]string{"--audit", p, "--from", "2026-11-31", "--to", "2026-12-01"}, `--from "2026-11-31": want YYYY-MM-DD`},
		{[]string{"--audit", p, "--from", "2026-11-02", "--to", "2026-11-01"}, "--to 2026-11-01 is before --from 2026-11-02"},
		{[]string{"--audit", p, "--tz", "Mars/Olympus"}, `--tz "Mars/Olympus": unknown time zone`},
		{[]string{"--audit", filepath.Join(t.TempDir(), "none.jsonl")}, "no audit file at"},
		{[]string{"--audit", t.TempDir()}, "is a directory"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		err := Run(c.args, &out, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run(%q) = %v, want an error containing %q", c.args, err, c.want)
		}
		if out.Len() != 0 {
			t.Errorf("Run(%q) wrote %q", c.args, out.String())
		}
	}
}

func TestHelp(t *testing.T) {
	for _, h := range []string{"--help", "-h", "-help"} {
		var out, errb bytes.Buffer
		if err := Run([]string{h}, &out, &errb); err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		if out.String() != Usage || errb.Len() != 0 {
			t.Errorf("%s: stdout %q, stderr %q", h, out.String(), errb.String())
		}
	}
	if !strings.Contains(Usage, "ai.budget.timezone") {
		t.Error("the help does not say which zone the ledger uses")
	}
}

func TestMalformedLine(t *testing.T) {
	good := rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", CostEUR: "0.000000001", MeteredBy: "local"}.line()
	cases := []struct {
		bad, want string
	}{
		{`{"time":"2026-11-10T00:00:00Z","tenant":"acme"`, "not an audit line"},
		{`not json`, "not an audit line"},
		{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.00000001","metered_by":"local"}`, `cost_eur "0.00000001": want exactly 9 decimals`},
		{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.0000000010","metered_by":"local"}`, `cost_eur "0.0000000010": want exactly 9 decimals`},
		{`{"time":"2026-11-10T00:00:00Z","cost_eur":0.000000001,"metered_by":"local"}`, "not an audit line"},
		{`{"time":"2026-11-10T00:00:00Z","cost_eur":"+0.000000001","metered_by":"local"}`, "want digits"},
		{`{"time":"2026-11-10T00:00:00Z","metered_by":"local"}`, "no cost_eur"},
		{`{"cost_eur":"0.000000001","metered_by":"local"}`, "no time"},
		{`{"time":"2026-11-10 00:00:00","cost_eur":"0.000000001","metered_by":"local"}`, "want RFC 3339"},
		{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000001","metered_by":"cloud"}`, `metered_by "cloud"`},
		{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000001"}`, "with no metered_by"},
		{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000000","input_tokens":-1}`, "negative tokens"},
		{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000000","input_tokens":"1"}`, "not an audit line"},
		{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000000","input_tokens":5,"cache_read_tokens":-1}`, "cache tokens (-1 read, 0 written) are not part of input_tokens 5"},
		{`{"time":"2026-11-10T00:00:00Z","cost_eur":"0.000000000","input_tokens":5,"cache_read_tokens":4,"cache_write_tokens":2,"cache_hits":0,"cache_saved_tokens":0}`, "cache tokens (4 read, 2 written) are not part of input_tokens 5"},
	}
	for _, c := range cases {
		p := filepath.Join(t.TempDir(), "audit.jsonl")
		writeFile(t, p, good+good+"\n"+c.bad+"\n"+good)
		err := Run([]string{"--audit", p, "--month", "2026-11"}, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), p+":4: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %s:4: ...%s", c.bad, err, p, c.want)
		}
	}
}

// TestFirstErrorFarAway checks line numbers across many batches and files,
// and that the earliest of several errors is the one reported.
func TestFirstErrorFarAway(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.jsonl")
	good := rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", CostEUR: "0.000000001", MeteredBy: "local"}.line()
	var b strings.Builder
	for i := 1; i <= 4000; i++ {
		switch i {
		case 2345, 3500:
			b.WriteString("{oops}\n")
		default:
			b.WriteString(good)
		}
	}
	writeFile(t, p, b.String())
	for i := 0; i < 3; i++ {
		_, err := Compute(Query{Audit: p, From: time.Time{}, To: time.Now(), By: []Dimension{Tenant}})
		if err == nil || !strings.HasPrefix(err.Error(), p+":2345: not an audit line") {
			t.Fatalf("got %v, want %s:2345", err, p)
		}
	}
	// In a gzipped backup, the name is the backup's.
	gz := filepath.Join(dir, "audit-2026-11-01T00-00-00.000.jsonl.gz")
	writeFile(t, p, good)
	writeFile(t, gz, good+good+`{"time":"2026-11-10T00:00:00Z","cost_eur":"1.5","metered_by":"local"}`+"\n")
	_, err := Compute(Query{Audit: p, From: time.Time{}, To: time.Now(), By: []Dimension{Tenant}})
	if err == nil || !strings.HasPrefix(err.Error(), gz+`:3: cost_eur "1.5": want exactly 9 decimals`) {
		t.Fatalf("got %v", err)
	}
}

func TestUnterminatedLastLine(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.jsonl")
	good := rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", CostEUR: "0.000000001", MeteredBy: "local"}.line()
	half := good[:len(good)/2]
	// Live file, being written: the half line is left out with a warning.
	writeFile(t, p, good+good+half)
	var out, errb bytes.Buffer
	if err := Run([]string{"--audit", p, "--month", "2026-11", "--format", "csv"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "TOTAL,2,0,0,0.000000002,") {
		t.Errorf("out: %s", out.String())
	}
	if !strings.Contains(errb.String(), "warning: "+p+":3: left out the last line, still being written") {
		t.Errorf("stderr: %q", errb.String())
	}
	// A complete last line without its newline counts.
	writeFile(t, p, good+strings.TrimSuffix(good, "\n"))
	rep, err := Compute(Query{Audit: p, To: time.Now(), By: []Dimension{Tenant}})
	if err != nil || rep.Total.Calls != 2 || len(rep.Warnings) != 0 {
		t.Errorf("complete last line: %v, %+v", err, rep)
	}
	// A backup is closed: a half line there is corruption.
	writeFile(t, p, good)
	bk := filepath.Join(dir, "audit-2026-11-01T00-00-00.000.jsonl")
	writeFile(t, bk, good+half)
	_, err = Compute(Query{Audit: p, To: time.Now(), By: []Dimension{Tenant}})
	if err == nil || !strings.HasPrefix(err.Error(), bk+":2: not an audit line") {
		t.Errorf("half line in a backup: %v", err)
	}
}

func TestBackupsOnlyAndBlankLines(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.jsonl")
	good := rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", CostEUR: "0.000000001", MeteredBy: "local"}.line()
	writeFile(t, filepath.Join(dir, "audit-2026-11-01T00-00-00.000.jsonl"), "\n"+good+"  \n"+good)
	rep, err := Compute(Query{Audit: p, To: time.Now(), By: []Dimension{Tenant}})
	if err != nil || rep.Total.CostNano != 2 || rep.Lines != 2 {
		t.Fatalf("%v %+v", err, rep)
	}
}

func TestBackupBeingCompressed(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.jsonl")
	one := rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", CostEUR: "0.000000001", MeteredBy: "local"}.line()
	writeFile(t, p, one)
	bk := filepath.Join(dir, "audit-2026-11-01T00-00-00.000.jsonl")
	writeFile(t, bk, one+one)
	writeFile(t, bk+".gz", one) // half-written by lumberjack
	rep, err := Compute(Query{Audit: p, To: time.Now(), By: []Dimension{Tenant}})
	if err != nil || rep.Total.CostNano != 3 || len(rep.Files) != 2 {
		t.Fatalf("%v %+v", err, rep)
	}
}

func TestRotatedWhileOpening(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.jsonl")
	writeFile(t, p, rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", CostEUR: "0.000000001", MeteredBy: "local"}.line())
	// The same file under a backup's name, as after a rename: once only.
	if err := os.Link(p, filepath.Join(dir, "audit-2026-11-20T00-00-00.000.jsonl")); err != nil {
		t.Skip(err)
	}
	rep, err := Compute(Query{Audit: p, To: time.Now(), By: []Dimension{Tenant}})
	if err != nil || rep.Total.CostNano != 1 {
		t.Fatalf("%v %+v", err, rep)
	}
}

func TestEmptyPeriod(t *testing.T) {
	p := fixture(t)
	got, _ := runOut(t, "--audit", p, "--month", "2025-01", "--format", "csv", "--by", "backend,model")
	want := "backend,model,calls,input_tokens,output_tokens,cost_eur,cost_local_eur,cost_upstream_eur,estimated_calls,cost_estimated_eur,cache_read_tokens,cache_write_tokens,cache_hits,cache_saved_tokens\n" +
		"TOTAL,,0,0,0,0.00,0.00,0.00,0,0.00,0,0,0,0\n"
	if got != want {
		t.Errorf("got %q", got)
	}
	got, _ = runOut(t, "--audit", p, "--month", "2025-01")
	if strings.Contains(got, "ESTIMATED:") || !strings.Contains(got, "0 calls in the period out of 10 audit lines in 3 files") {
		t.Errorf("table:\n%s", got)
	}
}

func TestComputeRefusesBadQuery(t *testing.T) {
	p := fixture(t)
	from, to := utcMonth(2026, time.November)
	for _, q := range []Query{
		{Audit: p, From: from, To: to},
		{Audit: p, From: from, To: to, By: []Dimension{"user"}},
		{Audit: p, From: from, To: to, By: []Dimension{Tenant, Tenant}},
		{Audit: p, From: to, To: from, By: []Dimension{Tenant}},
	} {
		if _, err := Compute(q); err == nil {
			t.Errorf("Compute(%+v) succeeded", q)
		}
	}
	if err := (&Report{By: []Dimension{Tenant}}).Write(&bytes.Buffer{}, "xml"); err == nil {
		t.Error("Write xml succeeded")
	}
}

func TestOverflowFails(t *testing.T) {
	p := filepath.Join(t.TempDir(), "audit.jsonl")
	big := rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", CostEUR: "9000000000.000000000", MeteredBy: "local"}.line()
	writeFile(t, p, big+big)
	_, err := Compute(Query{Audit: p, To: time.Now(), By: []Dimension{Tenant}})
	if err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("got %v", err)
	}
	small := rec{Time: "2026-11-10T00:00:00Z", Tenant: "acme", CostEUR: "-9000000000.000000000", MeteredBy: "local"}.line()
	writeFile(t, p, small+small)
	_, err = Compute(Query{Audit: p, To: time.Now(), By: []Dimension{Tenant}})
	if err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("negative: got %v", err)
	}
	// A refund subtracts.
	writeFile(t, p, big+small)
	rep, err := Compute(Query{Audit: p, To: time.Now(), By: []Dimension{Tenant}})
	if err != nil || rep.Total.CostNano != 0 || rep.Total.LocalCostNano != 0 || rep.Total.Calls != 2 {
		t.Errorf("refund: %v %+v", err, rep)
	}
}

// TestJSONValuesFollowColumns: the json names of jsonValues, between total
// and bad_lines_skipped, are columns in order, so that csv and json agree.
func TestJSONValuesFollowColumns(t *testing.T) {
	typ := reflect.TypeFor[jsonValues]()
	var names []string
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	want := append(append([]string{"total"}, columns...), "bad_lines_skipped")
	if !slices.Equal(names, want) {
		t.Errorf("jsonValues fields %q, want %q", names, want)
	}
}
