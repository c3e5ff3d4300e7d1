package auditlog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Encode returns l encoded as [Writer.Write] writes it, without the
// newline: the bytes the budget ledger journals with a call's commit (see
// [Rebuild]). It fails, as Write does, for a line JSON cannot hold.
func Encode(l *Line) ([]byte, error) { return AppendEncoded(nil, l) }

// AppendEncoded is [Encode] appending to dst (returned unchanged with the
// error).
func AppendEncoded(dst []byte, l *Line) ([]byte, error) {
	if l == nil {
		return dst, errors.New("audit: nil line")
	}
	if err := encodeError(l); err != nil {
		return dst, err
	}
	return appendLine(dst, l), nil
}

// lineKey is what identifies a call's audit line, and every field
// `flexway report` sums or groups by: a line of the same call written at
// its commit (the journaled one) and after it (the audit interceptor's)
// differ only in outcome, status and duration_ms. Two calls with the same
// key would be charged the same, so matching by key keeps the report's
// totals exact even then.
type lineKey struct {
	Time           string `json:"time"`
	RequestID      string `json:"request_id"`
	Operation      string `json:"operation"`
	Tenant         string `json:"tenant"`
	Agent          string `json:"agent"`
	Backend        string `json:"backend"`
	ModelRequested string `json:"model_requested"`
	ModelServed    string `json:"model_served"`
	Capability     string `json:"capability"`
	InputTokens    int64  `json:"input_tokens"`
	OutputTokens   int64  `json:"output_tokens"`
	CacheRead      int64  `json:"cache_read_tokens"`
	CacheWrite     int64  `json:"cache_write_tokens"`
	CostEUR        string `json:"cost_eur"`
	UsageEstimated bool   `json:"usage_estimated"`
	MeteredBy      string `json:"metered_by"`
	KeyHash        string `json:"key_hash"`
	UserHash       string `json:"user_hash"`
}

// rebuildSlack is how much earlier than the earliest call a rotated backup
// may have been rotated and still be read (clock steps).
const rebuildSlack = time.Minute

// Rebuild appends to the audit file at path (not "-") the lines of calls
// (encoded by [Encode]: the notes the budget ledger journaled with their
// commits and handed back after a crash) that neither it nor the rotated
// backups beside it hold, and fsyncs it: after a kill -9 between a
// commit and the audit's write of its line, the call is then audited as
// it was charged. It returns how many lines it appended. A call's line is
// found by its time, request id, identity, backend, models and charge
// (see lineKey); a journaled line has the outcome and status of a call
// that ended at its commit (ok 200, or canceled 499 for usage estimated on
// a cut stream) and the duration up to it. Backups rotated before the
// earliest call began are not read; an incomplete last line (a write cut
// short) is removed first, as [Open] does. lines that are no audit line
// are skipped and logged (count only).
//
// It runs before the audit's [Writer] opens the file (the gateway calls
// it while opening its ledger), and it is idempotent: called again with
// the same lines it appends none.
func Rebuild(path string, lines [][]byte, log *slog.Logger) (int, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	want := make(map[lineKey]int, len(lines))
	keys := make([]lineKey, len(lines))
	times := make(map[string]bool, len(lines))
	var earliest time.Time
	bad := 0
	for i, l := range lines {
		var k lineKey
		if err := json.Unmarshal(l, &k); err != nil || k.Time == "" {
			bad++ // keys[i] stays zero: never matched, never written
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, k.Time); err == nil && (earliest.IsZero() || t.Before(earliest)) {
			earliest = t
		}
		keys[i] = k
		want[k]++
		times[k.Time] = true
	}
	if bad > 0 {
		log.Warn("audit lines to rebuild after a crash: some are no audit line and were skipped", "skipped", bad)
	}
	if len(want) == 0 {
		return 0, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return 0, fmt.Errorf("audit.path: %w", err)
	}
	if err := (&Writer{path: path, log: log}).repairTail(); err != nil {
		return 0, fmt.Errorf("audit.path: %w", err)
	}
	files, err := rebuildFiles(path, earliest.Add(-rebuildSlack))
	if err != nil {
		return 0, err
	}
	found := make(map[lineKey]int, len(want))
	for _, f := range files {
		if err := scanKeys(f, times, want, found); err != nil {
			return 0, err
		}
	}
	var out []byte
	n := 0
	for i, k := range keys {
		if k.Time == "" {
			continue
		}
		if found[k] > 0 {
			found[k]--
			continue
		}
		out = append(append(out, lines[i]...), '\n')
		n++
	}
	if n == 0 {
		return 0, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
	if err != nil {
		return 0, fmt.Errorf("audit.path: %w", err)
	}
	_, err = f.Write(out)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("audit.path: writing the audit lines of calls committed before a crash: %w", err)
	}
	log.Warn("audit lines rebuilt from the budget ledger's journal: calls committed before a crash whose line was not written", "path", path, "lines", n)
	return n, nil
}

// rebuildFiles lists path, when it exists, and the rotated backups beside
// it (lumberjack's names, UTC: base-2006-01-02T15-04-05.000.ext and its
// .gz) rotated at or after since.
func rebuildFiles(path string, since time.Time) ([]string, error) {
	var files []string
	if _, err := os.Stat(path); err == nil {
		files = append(files, path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("audit.path: %w", err)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("audit.path: %w", err)
	}
	ext := filepath.Ext(base)
	prefix := strings.TrimSuffix(base, ext) + "-"
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		rest = strings.TrimSuffix(rest, ".gz")
		stamp, ok := strings.CutSuffix(rest, ext)
		if !ok {
			continue
		}
		t, err := time.Parse("2006-01-02T15-04-05.000", stamp)
		if err != nil || t.Before(since) {
			continue
		}
		files = append(files, filepath.Join(dir, e.Name()))
	}
	return files, nil
}

// scanKeys counts in found the lines of the file at name whose key is in
// want; only lines whose time is in times are decoded.
func scanKeys(name string, times map[string]bool, want, found map[lineKey]int) error {
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil // rotated or compressed meanwhile: nothing writes it now
	}
	if err != nil {
		return fmt.Errorf("audit.path: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(name, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer zr.Close()
		r = zr
	}
	br := bufio.NewReaderSize(r, 64<<10)
	const prefix = `{"time":"`
	for {
		ln, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// Longer than any audit line: not one of the calls'.
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
			if err == nil {
				continue
			}
		}
		if rest, ok := bytes.CutPrefix(ln, []byte(prefix)); ok {
			if i := bytes.IndexByte(rest, '"'); i > 0 && times[string(rest[:i])] {
				var k lineKey
				if json.Unmarshal(ln, &k) == nil && want[k] > 0 {
					found[k]++
				}
			}
		}
		switch {
		case err == io.EOF:
			return nil
		case err != nil:
			return fmt.Errorf("%s: %w", name, err)
		}
	}
}
