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
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
}

// Totals are the sums over a set of audit lines. Costs are in nano-euros;
// CostNano == LocalCostNano + UpstreamCostNano always.
type Totals struct {
	// Calls is the number of audit lines.
	Calls int64
	// InputTokens and OutputTokens are the tokens charged.
	InputTokens, OutputTokens int64
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
}

// Compute reads the audit files of q.Audit and sums the lines of the period
// by q.By. A malformed line makes it fail with the file and line number.
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

func (e *lineError) before(o *lineError) bool {
	return o == nil || e.src < o.src || (e.src == o.src && e.line < o.line)
}

// partial is one worker's sums.
type partial struct {
	groups   map[string]*Totals
	lines    int64
	inPeriod int64
	warnings []string
	key      []byte
}

// job is the shared state of one computation.
type job struct {
	q     Query
	srcs  []*source
	stop  atomic.Bool
	mu    sync.Mutex
	first *lineError
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
		return nil, fmt.Errorf("%s:%d: %w", srcs[r.first.src].name, r.first.line, r.first.err)
	}
	if readErr != nil {
		return nil, readErr
	}

	rep := &Report{By: q.By, From: q.From, To: q.To}
	for _, s := range srcs {
		rep.Files = append(rep.Files, s.name)
	}
	merged := map[string]*Totals{}
	for _, p := range parts {
		rep.Lines += p.lines
		rep.InPeriod += p.inPeriod
		rep.Warnings = append(rep.Warnings, p.warnings...)
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
		switch {
		case err == bufio.ErrBufferFull:
			if len(b.data)-lineStart > maxLine {
				r.fail(&lineError{src: i, line: line, err: fmt.Errorf("line longer than %d bytes: not an audit file?", maxLine)})
				return nil
			}
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
	cost, err := ParseCost(*a.CostEUR)
	if err != nil {
		return fmt.Errorf("cost_eur %q: %v", *a.CostEUR, err)
	}
	if a.InputTokens < 0 || a.OutputTokens < 0 {
		return fmt.Errorf("negative tokens (%d in, %d out)", a.InputTokens, a.OutputTokens)
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
		CostNano:         cost,
		LocalCostNano:    local,
		UpstreamCostNano: upstream,
	}
	if a.UsageEstimated {
		one.EstimatedCalls = 1
		one.EstimatedCostNano = cost
	}
	return g.add(&one)
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
		{&t.CostNano, o.CostNano},
		{&t.LocalCostNano, o.LocalCostNano},
		{&t.UpstreamCostNano, o.UpstreamCostNano},
		{&t.EstimatedCalls, o.EstimatedCalls},
		{&t.EstimatedCostNano, o.EstimatedCostNano},
	} {
		sum := *f.dst + f.v
		if (f.v > 0 && sum < *f.dst) || (f.v < 0 && sum > *f.dst) {
			return errors.New("a total does not fit an int64")
		}
		*f.dst = sum
	}
	return nil
}
