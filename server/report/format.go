package report

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/flexway/flexway/server/money"
)

// Format is an output format of the report (--format).
type Format string

// The formats of --format.
const (
	// Table is aligned text for people.
	Table Format = "table"
	// CSV has a header row and a TOTAL row.
	CSV Format = "csv"
	// JSON is an array of objects, the last one the total.
	JSON Format = "json"
)

// Write writes the report in format f.
func (r *Report) Write(w io.Writer, f Format) error {
	switch f {
	case Table:
		return r.WriteTable(w)
	case CSV:
		return r.WriteCSV(w)
	case JSON:
		return r.WriteJSON(w)
	}
	return fmt.Errorf("unknown format %q: want table, csv or json", f)
}

// columns are the value columns, in csv/json order.
var columns = []string{
	"calls", "input_tokens", "output_tokens",
	"cost_eur", "cost_local_eur", "cost_upstream_eur",
	"estimated_calls", "cost_estimated_eur",
	// Issue 14's, last, so that a reader of the columns before them by
	// position keeps reading the same ones.
	"cache_read_tokens", "cache_write_tokens",
	// The response cache's, last for the same reason.
	"cache_hits", "cache_saved_tokens",
}

// values are t's columns as text, in the order of columns; costs are
// exact decimals.
func (t *Totals) values() []string {
	return []string{
		strconv.FormatInt(t.Calls, 10),
		strconv.FormatInt(t.InputTokens, 10),
		strconv.FormatInt(t.OutputTokens, 10),
		money.FormatEUR(t.CostNano),
		money.FormatEUR(t.LocalCostNano),
		money.FormatEUR(t.UpstreamCostNano),
		strconv.FormatInt(t.EstimatedCalls, 10),
		money.FormatEUR(t.EstimatedCostNano),
		strconv.FormatInt(t.CacheReadTokens, 10),
		strconv.FormatInt(t.CacheWriteTokens, 10),
		strconv.FormatInt(t.CacheHits, 10),
		strconv.FormatInt(t.CacheSavedTokens, 10),
	}
}

// isCost reports whether value column i holds euros.
func isCost(i int) bool { return strings.HasSuffix(columns[i], "_eur") }

// WriteCSV writes a header row (the --by dimensions, then calls,
// input_tokens, output_tokens, cost_eur, cost_local_eur, cost_upstream_eur,
// estimated_calls, cost_estimated_eur, cache_read_tokens,
// cache_write_tokens, cache_hits, cache_saved_tokens), one row per group and a last row
// whose first key column is TOTAL and other key columns empty. Euros are
// exact decimals. Under --skip-bad a last column, bad_lines_skipped, holds
// the number of bad lines left out on the TOTAL row (empty on the others).
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	head := make([]string, 0, len(r.By)+len(columns)+1)
	for _, d := range r.By {
		head = append(head, string(d))
	}
	head = append(head, columns...)
	if r.SkipBad {
		head = append(head, "bad_lines_skipped")
	}
	cw.Write(head)
	for _, row := range r.Rows {
		rec := append(append([]string{}, row.Keys...), row.values()...)
		if r.SkipBad {
			rec = append(rec, "")
		}
		cw.Write(rec)
	}
	total := make([]string, len(r.By))
	total[0] = "TOTAL"
	total = append(total, r.Total.values()...)
	if r.SkipBad {
		total = append(total, strconv.FormatInt(r.BadLines, 10))
	}
	cw.Write(total)
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes an array of objects, one per group with its --by keys
// and values, then the total with "total": true and no keys (and, under
// --skip-bad, "bad_lines_skipped": the number of bad lines left out).
// Counts are integers and euros exact decimal strings, one object a line:
//
//	[
//	  {"tenant":"acme","calls":2,...,"cost_eur":"0.000024",...},
//	  {"total":true,"calls":2,...}
//	]
func (r *Report) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("[\n")
	for _, row := range r.Rows {
		if err := r.writeJSONObject(bw, row.Keys, row.Totals.jsonValues()); err != nil {
			return err
		}
		bw.WriteString(",\n")
	}
	total := r.Total.jsonValues()
	total.Total = true
	if r.SkipBad {
		total.BadLinesSkipped = &r.BadLines
	}
	if err := r.writeJSONObject(bw, nil, total); err != nil {
		return err
	}
	bw.WriteString("\n]\n")
	return bw.Flush()
}

// writeJSONObject writes "  {" then the --by keys in order (their names are
// not known until run time, so no struct holds them), then v's fields, "}".
func (r *Report) writeJSONObject(bw *bufio.Writer, keys []string, v jsonValues) error {
	bw.WriteString("  {")
	for i, k := range keys {
		name, _ := json.Marshal(string(r.By[i])) // a string always marshals
		value, _ := json.Marshal(k)
		bw.Write(name)
		bw.WriteByte(':')
		bw.Write(value)
		bw.WriteByte(',')
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	bw.Write(b[1:]) // without its "{": it continues the keys' object
	return nil
}

// jsonValues are a group's values in --format json, in the order of
// [columns]: counts as integers, euros as exact decimal strings.
type jsonValues struct {
	// Total marks the last object, the total (it has no --by keys).
	Total            bool   `json:"total,omitempty"`
	Calls            int64  `json:"calls"`
	InputTokens      int64  `json:"input_tokens"`
	OutputTokens     int64  `json:"output_tokens"`
	CostEUR          string `json:"cost_eur"`
	CostLocalEUR     string `json:"cost_local_eur"`
	CostUpstreamEUR  string `json:"cost_upstream_eur"`
	EstimatedCalls   int64  `json:"estimated_calls"`
	CostEstimatedEUR string `json:"cost_estimated_eur"`
	CacheReadTokens  int64  `json:"cache_read_tokens"`
	CacheWriteTokens int64  `json:"cache_write_tokens"`
	// CacheHits is the number of response cache hits; CacheSavedTokens the
	// tokens (input plus output) the hits did not spend.
	CacheHits        int64 `json:"cache_hits"`
	CacheSavedTokens int64 `json:"cache_saved_tokens"`
	// BadLinesSkipped is set on the total under --skip-bad: the number of
	// bad lines left out.
	BadLinesSkipped *int64 `json:"bad_lines_skipped,omitempty"`
}

// jsonValues returns t as --format json writes it.
func (t *Totals) jsonValues() jsonValues {
	return jsonValues{
		Calls:            t.Calls,
		InputTokens:      t.InputTokens,
		OutputTokens:     t.OutputTokens,
		CacheReadTokens:  t.CacheReadTokens,
		CacheWriteTokens: t.CacheWriteTokens,
		CostEUR:          money.FormatEUR(t.CostNano),
		CostLocalEUR:     money.FormatEUR(t.LocalCostNano),
		CostUpstreamEUR:  money.FormatEUR(t.UpstreamCostNano),
		EstimatedCalls:   t.EstimatedCalls,
		CostEstimatedEUR: money.FormatEUR(t.EstimatedCostNano),
		CacheHits:        t.CacheHits,
		CacheSavedTokens: t.CacheSavedTokens,
	}
}

// tableHeads are the value columns' titles in the table.
var tableHeads = []string{
	"CALLS", "INPUT TOKENS", "OUTPUT TOKENS",
	"EUR", "LOCAL EUR", "UPSTREAM EUR",
	"ESTIMATED", "ESTIMATED EUR",
	"CACHE READ", "CACHE WRITE",
	"CACHE HITS", "CACHE SAVED",
}

// WriteTable writes the report for people: a title with the period, the
// rows with keys left-aligned (an empty key shows as "-") and numbers
// right-aligned, euros exact and aligned on the decimal point, a TOTAL row,
// and notes on cache tiers, response cache hits and estimated usage when
// there are some.
//
// The columns are aligned here, not by text/tabwriter: a tabwriter aligns
// every column the same way (left, or right with AlignRight), and this
// table aligns keys left and numbers right, and draws the rule above TOTAL
// across the widths it computes.
func (r *Report) WriteTable(w io.Writer) error {
	bw := bufio.NewWriter(w)
	by := make([]string, len(r.By))
	for i, d := range r.By {
		by[i] = string(d)
	}
	fmt.Fprintf(bw, "Flexway chargeback, %s, by %s\n", r.periodText(), strings.Join(by, ", "))
	fmt.Fprintf(bw, "%d calls in the period out of %d audit lines in %d %s\n\n",
		r.InPeriod, r.Lines, len(r.Files), plural(len(r.Files), "file", "files"))

	nk := len(r.By)
	cells := [][]string{}
	head := make([]string, 0, nk+len(columns))
	for _, d := range r.By {
		head = append(head, strings.ToUpper(strings.ReplaceAll(string(d), "_", " ")))
	}
	cells = append(cells, append(head, tableHeads...))
	for _, row := range r.Rows {
		keys := make([]string, nk)
		for i, k := range row.Keys {
			if k == "" {
				k = "-"
			}
			keys[i] = k
		}
		cells = append(cells, append(keys, row.values()...))
	}
	total := make([]string, nk)
	total[0] = "TOTAL"
	cells = append(cells, append(total, r.Total.values()...))

	// Align euros on the decimal point: pad the decimals on the right.
	for c := range columns {
		if !isCost(c) {
			continue
		}
		frac := 0
		for _, row := range cells[1:] {
			_, f, _ := strings.Cut(row[nk+c], ".")
			frac = max(frac, len(f))
		}
		for _, row := range cells[1:] {
			_, f, _ := strings.Cut(row[nk+c], ".")
			row[nk+c] += strings.Repeat(" ", frac-len(f))
		}
	}
	width := make([]int, len(cells[0]))
	for _, row := range cells {
		for i, s := range row {
			width[i] = max(width[i], utf8.RuneCountInString(s))
		}
	}
	line := func(row []string) {
		var b strings.Builder
		for i, s := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(s))
			if i < nk {
				b.WriteString(s + pad)
			} else {
				b.WriteString(pad + s)
			}
		}
		bw.WriteString(strings.TrimRight(b.String(), " ") + "\n")
	}
	for i, row := range cells {
		if i == len(cells)-1 {
			total := 0
			for _, w := range width {
				total += w + 2
			}
			bw.WriteString(strings.Repeat("-", total-2) + "\n")
		}
		line(row)
	}
	bw.WriteString("\nEUR = LOCAL EUR (metered and billed by this gateway) + UPSTREAM EUR (by a relay's peer: metering: upstream).\n")
	if r.SkipBad {
		fmt.Fprintf(bw, "BAD LINES: %d malformed audit %s left out (--skip-bad), in no total above; stderr names them.\n",
			r.BadLines, plural(int(r.BadLines), "line", "lines"))
	}
	if r.Total.CacheReadTokens > 0 || r.Total.CacheWriteTokens > 0 {
		bw.WriteString("CACHE READ, CACHE WRITE: input tokens the providers read from and wrote to their prompt caches, counted in INPUT TOKENS and charged at each backend's cache_read and cache_write prices.\n")
	}
	if r.Total.CacheHits > 0 {
		bw.WriteString("CACHE HITS, CACHE SAVED: calls answered from Flexway's response cache (counted in CALLS, with no input or output tokens, charged their policy's hit_price in EUR), and the input plus output tokens of the calls that filled those entries: tokens the hits did not spend.\n")
	}
	if r.Total.EstimatedCalls > 0 {
		fmt.Fprintf(bw, "ESTIMATED: %d %s charged %s EUR on usage Flexway estimated because the upstream never reported it (a cut stream); included in EUR.\n",
			r.Total.EstimatedCalls, plural(int(r.Total.EstimatedCalls), "call was", "calls were"), money.FormatEUR(r.Total.EstimatedCostNano))
	}
	return bw.Flush()
}

// periodText is the period as whole days when it is, else as instants.
func (r *Report) periodText() string {
	from, to := r.From, r.To
	midnight := func(t time.Time) bool {
		return t.Hour() == 0 && t.Minute() == 0 && t.Second() == 0 && t.Nanosecond() == 0
	}
	if midnight(from) && midnight(to) && from.Location() == to.Location() {
		last := to.AddDate(0, 0, -1)
		zone := from.Location().String()
		if from.Day() == 1 && to.Day() == 1 && from.AddDate(0, 1, 0).Equal(to) {
			return fmt.Sprintf("%s (%s)", from.Format("January 2006"), zone)
		}
		return fmt.Sprintf("%s to %s inclusive (%s)", from.Format(time.DateOnly), last.Format(time.DateOnly), zone)
	}
	return fmt.Sprintf("from %s to %s (excluded)", from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
