package report

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// Usage is the help of `flexway report`.
const Usage = `usage: flexway report --audit PATH [--month YYYY-MM | --from DATE --to DATE]
                      [--by tenant,agent,backend,model,metered_by] [--format table|csv|json]
                      [--tz ZONE] [--skip-bad]

Chargeback from the audit file: calls, input and output tokens and euros per
group, euros split by who meters and bills them (local: this gateway;
upstream: the peer of a relay with metering: upstream), and the calls charged on
estimated usage (a cut stream) flagged. Every line counts, whatever its
outcome. Totals equal the budget ledger's for the same period, to the
nano-euro.

  --audit PATH    the audit file (audit.path); its rotated backups beside it
                  are read too: for audit.jsonl, audit-<timestamp>.jsonl and
                  audit-<timestamp>.jsonl.gz (lumberjack's names)
  --month YYYY-MM a whole calendar month (default: the current month)
  --from DATE     first day, YYYY-MM-DD, included
  --to DATE       last day, YYYY-MM-DD, included (--from and --to go together)
  --by KEYS       group by these keys, comma-separated (default tenant);
                  model is the model served, or the one requested when none was
  --format F      table (default), csv or json; euros are exact decimals
  --tz ZONE       IANA time zone in which days and months begin (default UTC).
                  The ledger rolls over in ai.budget.timezone: use the same
                  zone for the report to equal it.
  --skip-bad      leave malformed audit lines out instead of stopping at the
                  first: each is named on stderr (file:line: why, the first
                  20) and their number is in the output (a note in the
                  table, a bad_lines_skipped column in csv, a field of the
                  total in json). The totals are then those of the good
                  lines only, and no longer equal the ledger's.

A malformed audit line (not a JSON object, a field missing or of the wrong
form, a line over 1 MiB) stops the report with its file, line number and
what is wrong, unless --skip-bad is given.
`

// Run is `flexway report`: args are the flags after "report". The report
// goes to stdout and warnings to stderr; a usage error, an unreadable file or
// a malformed audit line is the returned error (the caller prints
// "flexway report: <err>" and exits 1). --help prints Usage on stdout and
// returns nil.
func Run(args []string, stdout, stderr io.Writer) error {
	return run(args, stdout, stderr, time.Now)
}

// options are the parsed flags.
type options struct {
	query  Query
	format Format
}

func run(args []string, stdout, stderr io.Writer, now func() time.Time) error {
	o, err := parseArgs(args, now)
	if errors.Is(err, flag.ErrHelp) {
		_, err := io.WriteString(stdout, Usage)
		return err
	}
	if err != nil {
		return err
	}
	rep, err := Compute(o.query)
	if err != nil {
		return err
	}
	for _, w := range rep.Warnings {
		fmt.Fprintln(stderr, "flexway report: warning:", w)
	}
	if rep.BadLines > 0 {
		fmt.Fprintf(stderr, "flexway report: warning: --skip-bad: left out %d bad audit %s; the totals do not include %s:\n",
			rep.BadLines, plural(int(rep.BadLines), "line", "lines"), plural(int(rep.BadLines), "it", "them"))
		for _, b := range rep.Bad {
			fmt.Fprintln(stderr, "  "+b.String())
		}
		if more := rep.BadLines - int64(len(rep.Bad)); more > 0 {
			fmt.Fprintf(stderr, "  and %d more\n", more)
		}
	}
	return rep.Write(stdout, o.format)
}

// parseArgs turns the flags into options; now gives the default month.
func parseArgs(args []string, now func() time.Time) (options, error) {
	fs := flag.NewFlagSet("flexway report", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, help printed by run
	fs.Usage = func() {}
	audit := fs.String("audit", "", "")
	month := fs.String("month", "", "")
	from := fs.String("from", "", "")
	to := fs.String("to", "", "")
	by := fs.String("by", string(Tenant), "")
	format := fs.String("format", string(Table), "")
	tz := fs.String("tz", "UTC", "")
	skipBad := fs.Bool("skip-bad", false, "")
	var o options
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%v (see flexway report --help)", err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (see flexway report --help)", fs.Arg(0))
	}
	if *audit == "" {
		return o, errors.New("--audit PATH is required: the audit file (audit.path)")
	}
	switch f := Format(*format); f {
	case Table, CSV, JSON:
		o.format = f
	default:
		return o, fmt.Errorf("--format %q: want table, csv or json", *format)
	}
	if *tz == "" {
		*tz = "UTC"
	}
	loc, err := time.LoadLocation(*tz)
	if err != nil {
		return o, fmt.Errorf("--tz %q: unknown time zone: want an IANA name such as UTC or Europe/Paris", *tz)
	}
	dims, err := parseBy(*by)
	if err != nil {
		return o, err
	}
	start, end, err := period(*month, *from, *to, loc, now)
	if err != nil {
		return o, err
	}
	o.query = Query{Audit: *audit, From: start, To: end, By: dims, SkipBad: *skipBad}
	return o, nil
}

// parseBy parses --by.
func parseBy(s string) ([]Dimension, error) {
	var dims []Dimension
	seen := map[Dimension]bool{}
	for _, f := range strings.Split(s, ",") {
		d := Dimension(strings.TrimSpace(f))
		if !validDimension(d) {
			return nil, fmt.Errorf("--by %q: unknown key %q: want one or more of tenant, agent, backend, model, metered_by, comma-separated", s, d)
		}
		if seen[d] {
			return nil, fmt.Errorf("--by %q: %s given twice", s, d)
		}
		seen[d] = true
		dims = append(dims, d)
	}
	return dims, nil
}

// period returns [start, end) for --month or --from/--to in loc, or the
// current month.
func period(month, from, to string, loc *time.Location, now func() time.Time) (start, end time.Time, err error) {
	switch {
	case month != "" && (from != "" || to != ""):
		return start, end, errors.New("--month and --from/--to exclude each other")
	case month != "":
		m, err := time.ParseInLocation("2006-01", month, loc)
		if err != nil {
			return start, end, fmt.Errorf("--month %q: want YYYY-MM, such as 2026-11", month)
		}
		return m, m.AddDate(0, 1, 0), nil
	case from != "" || to != "":
		if from == "" || to == "" {
			return start, end, errors.New("--from and --to go together: give both days (both included)")
		}
		f, err := time.ParseInLocation(time.DateOnly, from, loc)
		if err != nil {
			return start, end, fmt.Errorf("--from %q: want YYYY-MM-DD, such as 2026-11-01", from)
		}
		t, err := time.ParseInLocation(time.DateOnly, to, loc)
		if err != nil {
			return start, end, fmt.Errorf("--to %q: want YYYY-MM-DD, such as 2026-11-30", to)
		}
		if t.Before(f) {
			return start, end, fmt.Errorf("--to %s is before --from %s", to, from)
		}
		return f, t.AddDate(0, 0, 1), nil
	}
	n := now().In(loc)
	m := time.Date(n.Year(), n.Month(), 1, 0, 0, 0, 0, loc)
	return m, m.AddDate(0, 1, 0), nil
}
