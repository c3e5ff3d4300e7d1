package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexway/flexway/server/money"
)

// Dimension is a key rows can be grouped by (--by).
type Dimension string

// The dimensions of --by.
const (
	// Tenant is the tenant as declared in the configuration.
	Tenant Dimension = "tenant"
	// Agent is the agent as declared in the configuration.
	Agent Dimension = "agent"
	// Backend is the backend that served (or last tried) the call.
	Backend Dimension = "backend"
	// Model is model_served, or model_requested when nothing was served.
	Model Dimension = "model"
	// MeteredBy is local or upstream: who counted the tokens.
	MeteredBy Dimension = "metered_by"
)

// Dimensions lists every Dimension in the order --help shows them.
var Dimensions = []Dimension{Tenant, Agent, Backend, Model, MeteredBy}

// Query says what to report on.
type Query struct {
	// Audit is the audit file (audit.path); its rotated backups beside it
	// are read too.
	Audit string
	// From and To bound the period: a line counts when From <= time < To.
	From, To time.Time
	// By lists the grouping keys, at least one, each at most once.
	By []Dimension
	// SkipBad leaves malformed lines out, counted in [Report.BadLines],
	// instead of failing at the first one (--skip-bad).
	SkipBad bool
}

// BadLine is a malformed audit line left out under [Query.SkipBad].
type BadLine struct {
	// File is the audit file, as named in messages; Line its line number,
	// from 1.
	File string
	Line int64
	// Reason says what is wrong with it ("not an audit line: ...").
	Reason string
}

// String is "file:line: reason".
func (b BadLine) String() string { return fmt.Sprintf("%s:%d: %s", b.File, b.Line, b.Reason) }

// maxBadListed bounds how many bad lines a report lists (it counts them
// all).
const maxBadListed = 20

// Totals are the sums over a set of audit lines. Costs are in nano-euros;
// CostNano == LocalCostNano + UpstreamCostNano always.
type Totals struct {
	// Calls is the number of audit lines.
	Calls int64
	// InputTokens and OutputTokens are the tokens charged; InputTokens
	// counts every input token, cached ones included.
	InputTokens, OutputTokens int64
	// CacheReadTokens and CacheWriteTokens are how many of InputTokens
	// the providers read from and wrote to their prompt caches.
	CacheReadTokens, CacheWriteTokens int64
	// CostNano is what the ledger charged, in nano-euros.
	CostNano int64
	// LocalCostNano is the part of CostNano this gateway meters and bills
	// (metered_by local).
	LocalCostNano int64
	// UpstreamCostNano is the part of CostNano a relay's peer meters and
	// bills (metered_by upstream).
	UpstreamCostNano int64
	// EstimatedCalls counts the calls whose usage was estimated
	// (usage_estimated: the upstream never reported it, e.g. a cut stream).
	EstimatedCalls int64
	// EstimatedCostNano is the part of CostNano charged on estimated usage.
	EstimatedCostNano int64
	// CacheHits counts the calls answered from the response cache (audit
	// cache "hit"); each is also one of Calls, with 0 input and output
	// tokens and its policy's hit_price in CostNano.
	CacheHits int64
	// CacheSavedTokens is, summed over the CacheHits, the input plus
	// output tokens of the calls that filled the entries: tokens the hits
	// did not spend, in none of InputTokens and OutputTokens.
	CacheSavedTokens int64
}

// Row is one group of the report.
type Row struct {
	// Keys are the group's values, one per Report.By dimension, in order.
	Keys []string
	Totals
}

// Report is the result of [Compute].
type Report struct {
	// By, From and To are the query's.
	By       []Dimension
	From, To time.Time
	// Files are the audit files read.
	Files []string
	// Lines is the number of audit lines read; InPeriod of those counted.
	Lines, InPeriod int64
	// Rows are the groups, sorted by their keys.
	Rows []Row
	// Total sums every row.
	Total Totals
	// Warnings are things the reader left out, such as the live file's
	// half-written last line; Run prints them on stderr.
	Warnings []string
	// SkipBad is the query's: bad lines were left out, not fatal.
	SkipBad bool
	// BadLines counts the malformed lines left out under SkipBad (they
	// are in none of the totals); Bad lists the first maxBadListed of
	// them, in file and line order.
	BadLines int64
	Bad      []BadLine
}

// Compute reads the audit files of q.Audit and sums the lines of the period
// by q.By. A malformed line makes it fail with the file, the line number
// and what is wrong with it, unless q.SkipBad: it is then left out and
// counted in [Report.BadLines].
func Compute(q Query) (*Report, error) {
	if len(q.By) == 0 {
		return nil, errors.New("no grouping dimension")
	}
	seen := map[Dimension]bool{}
	for _, d := range q.By {
		if !validDimension(d) {
			return nil, fmt.Errorf("unknown dimension %q", d)
		}
		if seen[d] {
			return nil, fmt.Errorf("dimension %q given twice", d)
		}
		seen[d] = true
	}
	if !q.From.Before(q.To) {
		return nil, fmt.Errorf("empty period: %s is not before %s", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	srcs, err := openAudit(q.Audit)
	if err != nil {
		return nil, err
	}
	defer closeAll(srcs)
	return compute(srcs, q)
}

func validDimension(d Dimension) bool {
	for _, v := range Dimensions {
		if d == v {
			return true
		}
	}
	return false
}

// batchSize is about how many bytes of whole lines a worker gets at once.
const batchSize = 256 << 10

// maxLine bounds a line: an audit line is a few hundred bytes.
const maxLine = 1 << 20

// batch is a run of whole lines of one source.
type batch struct {
	src          int
	first        int64 // number of the first line, from 1
	data         []byte
	unterminated bool // the last line has no newline (end of file)
}

// lineError is an error at a position; the earliest one is reported.
type lineError struct {
	src  int
	line int64
	err  error
}

// skipHint ends the message of a malformed line.
const skipHint = "fix or remove the line, or run with --skip-bad to leave bad lines out (counted and reported)"

func (e *lineError) before(o *lineError) bool {
	return o == nil || e.src < o.src || (e.src == o.src && e.line < o.line)
}

// partial is one worker's sums.
type partial struct {
	groups   map[string]*Totals
	lines    int64
	inPeriod int64
	warnings []string
	bad      []lineError // under SkipBad, the first maxBadListed of this worker's
	nbad     int64
	key      []byte
}

// skip records a bad line left out under SkipBad.
func (p *partial) skip(e lineError) {
	p.nbad++
	p.bad = append(p.bad, e)
	if len(p.bad) > 2*maxBadListed {
		sortBad(p.bad)
		p.bad = p.bad[:maxBadListed]
	}
}

func sortBad(b []lineError) {
	sort.Slice(b, func(i, j int) bool { return b[i].before(&b[j]) })
}

// job is the shared state of one computation.
type job struct {
	q     Query
	srcs  []*source
	stop  atomic.Bool
	mu    sync.Mutex
	first *lineError
	// skipped are the lines too long to read, left out under SkipBad by
	// the reader.
	skipped []lineError
}

func (r *job) fail(e *lineError) {
	r.mu.Lock()
	if e.before(r.first) {
		r.first = e
	}
	r.mu.Unlock()
	r.stop.Store(true)
}

func compute(srcs []*source, q Query) (*Report, error) {
	r := &job{q: q, srcs: srcs}
	workers := runtime.GOMAXPROCS(0)
	batches := make(chan batch, workers*2)
	parts := make([]*partial, workers)
	var wg sync.WaitGroup
	for i := range parts {
		p := &partial{groups: map[string]*Totals{}}
		parts[i] = p
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				r.consume(p, b)
			}
		}()
	}
	// Sources are read one after the other (the disk is sequential); their
	// lines are parsed in parallel. Every batch sent is consumed, so the
	// earliest error among them is the earliest error of the input.
	var readErr error
	for i := range srcs {
		if r.stop.Load() {
			break
		}
		if err := r.read(i, batches); err != nil {
			readErr = err
			break
		}
	}
	close(batches)
	wg.Wait()
	if r.first != nil {
		return nil, fmt.Errorf("%s:%d: %w; %s", srcs[r.first.src].name, r.first.line, r.first.err, skipHint)
	}
	if readErr != nil {
		return nil, readErr
	}

	rep := &Report{By: q.By, From: q.From, To: q.To, SkipBad: q.SkipBad}
	bad := r.skipped
	rep.BadLines = int64(len(r.skipped))
	for _, s := range srcs {
		rep.Files = append(rep.Files, s.name)
	}
	merged := map[string]*Totals{}
	for _, p := range parts {
		rep.Lines += p.lines
		rep.InPeriod += p.inPeriod
		rep.Warnings = append(rep.Warnings, p.warnings...)
		rep.BadLines += p.nbad
		bad = append(bad, p.bad...)
		for k, t := range p.groups {
			m := merged[k]
			if m == nil {
				m = &Totals{}
				merged[k] = m
			}
			if err := m.add(t); err != nil {
				return nil, err
			}
		}
	}
	for k, t := range merged {
		rep.Rows = append(rep.Rows, Row{Keys: strings.Split(k, "\x00"), Totals: *t})
		if err := rep.Total.add(t); err != nil {
			return nil, err
		}
	}
	sort.Slice(rep.Rows, func(i, j int) bool {
		a, b := rep.Rows[i].Keys, rep.Rows[j].Keys
		for k := range a {
			if a[k] != b[k] {
				return a[k] < b[k]
			}
		}
		return false
	})
	sort.Strings(rep.Warnings)
	sortBad(bad)
	for _, e := range bad[:min(len(bad), maxBadListed)] {
		rep.Bad = append(rep.Bad, BadLine{File: srcs[e.src].name, Line: e.line, Reason: e.err.Error()})
	}
	return rep, nil
}

// read splits source i into batches of whole lines.
func (r *job) read(i int, out chan<- batch) error {
	s := r.srcs[i]
	rd, done, err := s.open()
	if err != nil {
		return err
	}
	defer done()
	br := bufio.NewReaderSize(rd, 64<<10)
	line := int64(1)
	b := batch{src: i, first: line, data: make([]byte, 0, batchSize+4096)}
	lineStart := 0
	for {
		chunk, err := br.ReadSlice('\n')
		b.data = append(b.data, chunk...)
		if n := len(b.data) - lineStart; n > maxLine && (n > maxLine+1 || b.data[len(b.data)-1] != '\n') {
			e := lineError{src: i, line: line, err: fmt.Errorf("line longer than %d bytes: not an audit line", maxLine)}
			b.data = b.data[:lineStart]
			if !r.q.SkipBad {
				// The lines before it are read first: one of them may be
				// the earliest error.
				if len(b.data) > 0 {
					out <- b
				}
				r.fail(&e)
				return nil
			}
			r.skip(e)
			if err == bufio.ErrBufferFull {
				err = skipLine(br)
			}
			if err != nil {
				if err != io.EOF {
					return fmt.Errorf("%s: %w", s.name, err)
				}
				if len(b.data) > 0 {
					out <- b
				}
				return nil
			}
			// The lines of a batch are numbered from its first: the lines
			// after the one left out start a new batch.
			line++
			if len(b.data) > 0 {
				out <- b
			}
			b = batch{src: i, first: line, data: make([]byte, 0, batchSize+4096)}
			lineStart = 0
			continue
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF:
			b.unterminated = len(b.data) > lineStart
			if len(b.data) > 0 {
				out <- b
			}
			return nil
		case err != nil:
			return fmt.Errorf("%s: %w", s.name, err)
		}
		line++
		lineStart = len(b.data)
		if len(b.data) >= batchSize {
			if r.stop.Load() {
				return nil
			}
			out <- b
			b = batch{src: i, first: line, data: make([]byte, 0, batchSize+4096)}
			lineStart = 0
		}
	}
}

// skipLine reads past the end of the current line: nil after its
// newline, io.EOF when the data ends first.
func skipLine(br *bufio.Reader) error {
	for {
		_, err := br.ReadSlice('\n')
		if err != bufio.ErrBufferFull {
			return err
		}
	}
}

// skip records a line the reader left out under SkipBad.
func (r *job) skip(e lineError) {
	r.mu.Lock()
	r.skipped = append(r.skipped, e)
	r.mu.Unlock()
}

// auditLine is the part of an audit line the report reads.
type auditLine struct {
	Time           string  `json:"time"`
	Tenant         string  `json:"tenant"`
	Agent          string  `json:"agent"`
	Backend        string  `json:"backend"`
	ModelRequested string  `json:"model_requested"`
	ModelServed    string  `json:"model_served"`
	InputTokens    int64   `json:"input_tokens"`
	OutputTokens   int64   `json:"output_tokens"`
	CacheRead      int64   `json:"cache_read_tokens"`
	CacheWrite     int64   `json:"cache_write_tokens"`
	Cache          string  `json:"cache"`              // "" when absent: no cache policy, or a line from before it
	CacheSaved     int64   `json:"cache_saved_tokens"` // 0 when absent
	CostEUR        *string `json:"cost_eur"`
	UsageEstimated bool    `json:"usage_estimated"`
	MeteredBy      string  `json:"metered_by"`
}

// consume parses and sums the lines of b into p.
func (r *job) consume(p *partial, b batch) {
	data := b.data
	n := b.first
	for len(data) > 0 {
		var ln []byte
		last := false
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			ln, data = data[:i], data[i+1:]
		} else {
			ln, data, last = data, nil, true
		}
		if err := r.line(p, ln); err != nil {
			if last && b.unterminated && r.srcs[b.src].active {
				p.warnings = append(p.warnings, fmt.Sprintf("%s:%d: left out the last line, still being written (%v)", r.srcs[b.src].name, n, err))
			} else if r.q.SkipBad {
				p.skip(lineError{src: b.src, line: n, err: err})
			} else {
				r.fail(&lineError{src: b.src, line: n, err: err})
				return
			}
		}
		n++
	}
}

// line sums one audit line into p; a blank line is skipped.
func (r *job) line(p *partial, ln []byte) error {
	ln = bytes.TrimSpace(ln)
	if len(ln) == 0 {
		return nil
	}
	if ln[0] != '{' {
		// null, a number, an array: JSON, but no object (a null line was
		// what the audit writer's race of issue 12 left).
		return fmt.Errorf("not an audit line: want a JSON object, got %s", quoteStart(ln))
	}
	var a auditLine
	if err := json.Unmarshal(ln, &a); err != nil {
		return fmt.Errorf("not an audit line: %v", err)
	}
	if a.Time == "" {
		return errors.New("no time")
	}
	t, err := time.Parse(time.RFC3339Nano, a.Time)
	if err != nil {
		return fmt.Errorf("time %q: want RFC 3339, such as 2026-11-30T19:40:00.123456Z", a.Time)
	}
	if a.CostEUR == nil {
		return errors.New("no cost_eur")
	}
	cost, err := money.ParseEURFixed(*a.CostEUR)
	if err != nil {
		return fmt.Errorf("cost_eur %q: %v", *a.CostEUR, err)
	}
	if a.InputTokens < 0 || a.OutputTokens < 0 {
		return fmt.Errorf("negative tokens (%d in, %d out)", a.InputTokens, a.OutputTokens)
	}
	if a.CacheRead < 0 || a.CacheWrite < 0 || a.CacheRead > a.InputTokens-a.CacheWrite {
		return fmt.Errorf("cache tokens (%d read, %d written) are not part of input_tokens %d", a.CacheRead, a.CacheWrite, a.InputTokens)
	}
	var hits int64
	switch a.Cache {
	case "hit":
		hits = 1
	case "miss", "bypass", "":
	default:
		return fmt.Errorf("cache %q: want hit, miss or bypass, or no cache field", a.Cache)
	}
	if a.CacheSaved < 0 {
		return fmt.Errorf("negative cache_saved_tokens %d", a.CacheSaved)
	}
	if a.CacheSaved != 0 && hits == 0 {
		if a.Cache == "" {
			return fmt.Errorf("cache_saved_tokens %d with no cache field: only a cache hit saves tokens", a.CacheSaved)
		}
		return fmt.Errorf("cache_saved_tokens %d on a cache %s: only a cache hit saves tokens", a.CacheSaved, a.Cache)
	}
	var local, upstream int64
	switch a.MeteredBy {
	case "local":
		local = cost
	case "upstream":
		upstream = cost
	case "":
		if cost != 0 {
			return fmt.Errorf("cost_eur %q with no metered_by: want local or upstream", *a.CostEUR)
		}
	default:
		return fmt.Errorf("metered_by %q: want local or upstream", a.MeteredBy)
	}
	p.lines++
	if t.Before(r.q.From) || !t.Before(r.q.To) {
		return nil
	}
	p.inPeriod++

	p.key = p.key[:0]
	for i, d := range r.q.By {
		if i > 0 {
			p.key = append(p.key, 0)
		}
		var v string
		switch d {
		case Tenant:
			v = a.Tenant
		case Agent:
			v = a.Agent
		case Backend:
			v = a.Backend
		case Model:
			v = a.ModelServed
			if v == "" {
				v = a.ModelRequested
			}
		case MeteredBy:
			v = a.MeteredBy
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%s contains a NUL byte", d)
		}
		p.key = append(p.key, v...)
	}
	g := p.groups[string(p.key)]
	if g == nil {
		g = &Totals{}
		p.groups[string(p.key)] = g
	}
	one := Totals{
		Calls:            1,
		InputTokens:      a.InputTokens,
		OutputTokens:     a.OutputTokens,
		CacheReadTokens:  a.CacheRead,
		CacheWriteTokens: a.CacheWrite,
		CostNano:         cost,
		LocalCostNano:    local,
		UpstreamCostNano: upstream,
		CacheHits:        hits,
		CacheSavedTokens: a.CacheSaved,
	}
	if a.UsageEstimated {
		one.EstimatedCalls = 1
		one.EstimatedCostNano = cost
	}
	return g.add(&one)
}

// quoteStart is the start of a bad line for a message: at most 40 bytes,
// quoted. A bad line is no audit line, so no identifier is shown whole.
func quoteStart(ln []byte) string {
	if len(ln) > 40 {
		return strconv.Quote(string(ln[:40])) + "…"
	}
	return strconv.Quote(string(ln))
}

// add adds o to t, failing rather than wrapping around.
func (t *Totals) add(o *Totals) error {
	for _, f := range [...]struct {
		dst *int64
		v   int64
	}{
		{&t.Calls, o.Calls},
		{&t.InputTokens, o.InputTokens},
		{&t.OutputTokens, o.OutputTokens},
		{&t.CacheReadTokens, o.CacheReadTokens},
		{&t.CacheWriteTokens, o.CacheWriteTokens},
		{&t.CostNano, o.CostNano},
		{&t.LocalCostNano, o.LocalCostNano},
		{&t.UpstreamCostNano, o.UpstreamCostNano},
		{&t.EstimatedCalls, o.EstimatedCalls},
		{&t.EstimatedCostNano, o.EstimatedCostNano},
		{&t.CacheHits, o.CacheHits},
		{&t.CacheSavedTokens, o.CacheSavedTokens},
	} {
		sum := *f.dst + f.v
		if (f.v > 0 && sum < *f.dst) || (f.v < 0 && sum > *f.dst) {
			return errors.New("a total does not fit an int64")
		}
		*f.dst = sum
	}
	return nil
}
