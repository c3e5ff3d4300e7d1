package auditlog

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexway/flexway/server/money"
)

func readLines(t *testing.T, path string) []Line {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// TestCloseWritesEveryAcceptedLine: lines are written in batches off the
// caller's path, and Close writes all of them.
func TestCloseWritesEveryAcceptedLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "audit.jsonl")
	w, err := Open(path, []byte("k"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		if err := w.Write(&Line{RequestID: "r", InputTokens: int64(i), CostEUR: money.FormatEURFixed(int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 5000 || lines[4999].InputTokens != 4999 || lines[4999].CostEUR != "0.000004999" {
		t.Fatalf("%d lines written, want 5000 in order", len(lines))
	}
	if err := w.Write(&Line{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Write after Close: %v", err)
	}
}

func TestHash(t *testing.T) {
	w, err := Open(filepath.Join(t.TempDir(), "a.jsonl"), []byte("secret"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	m := hmac.New(sha256.New, []byte("secret"))
	m.Write([]byte("acme-support"))
	if got, want := w.Hash("acme-support"), hex.EncodeToString(m.Sum(nil)); got != want {
		t.Fatalf("hash %q, want HMAC-SHA256 %q", got, want)
	}
	if w.Hash("acme-support") != w.Hash("acme-support") || w.Hash("a") == w.Hash("b") || w.Hash("") != "" {
		t.Fatal("hash not stable, not distinct, or not empty for empty")
	}
	other, _ := Open(filepath.Join(t.TempDir(), "b.jsonl"), []byte("other key"), Options{})
	defer other.Close()
	if other.Hash("acme-support") == w.Hash("acme-support") {
		t.Fatal("the hash does not depend on the key")
	}
	// HashName gives the same hashes, kept, and past its bound still right.
	for i := range maxNameHashes + 10 {
		name := fmt.Sprintf("key-%d", i)
		if got, want := w.HashName(name), w.Hash(name); got != want {
			t.Fatalf("HashName(%q) = %q, want %q", name, got, want)
		}
	}
	if got, want := w.HashName("key-1"), w.Hash("key-1"); got != want {
		t.Fatalf("kept HashName %q, want %q", got, want)
	}
	if _, kept := w.names.Load(fmt.Sprintf("key-%d", maxNameHashes+5)); kept {
		t.Fatal("HashName kept more names than maxNameHashes")
	}
}

// TestUnwritableAuditIsReported: when the file cannot be written (a full
// disk: /dev/full), Healthy says so and the failure is reported; accepted
// lines are kept.
func TestUnwritableAuditIsReported(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system")
	}
	reasons := make(chan string, 10)
	w, err := Open("/dev/full", []byte("k"), Options{OnFailure: func(r string) { reasons <- r }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Healthy(); err != nil {
		t.Fatalf("healthy before any write: %v", err)
	}
	_ = w.Write(&Line{RequestID: "r1"})
	select {
	case r := <-reasons:
		if r == "" {
			t.Fatal("empty failure reason")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no failure reported")
	}
	if err := w.Healthy(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Healthy after a failed write: %v", err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close did not report the lines it could not write")
	}
}

// TestRemovedFileStartsANewOne: lines written after the file was removed
// go to a new file at the same path, not to the unlinked one.
func TestRemovedFileStartsANewOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := Open(path, []byte("k"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Write(&Line{RequestID: "before"})
	time.Sleep(100 * time.Millisecond)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_ = w.Write(&Line{RequestID: "after"})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 1 || lines[0].RequestID != "after" {
		t.Fatalf("lines in the new file: %+v, want the one written after the removal", lines)
	}
}

// BenchmarkWrite is what an audit line costs the call: encoding and
// queueing (the write itself is off the call's path).
func BenchmarkWrite(b *testing.B) {
	w, err := Open(filepath.Join(b.TempDir(), "a.jsonl"), []byte("k"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	l := &Line{Time: time.Now(), RequestID: "req_0123456789abcdef", Operation: "ai.chatCompletions", Tenant: "acme", Agent: "bot",
		Backend: "main", ModelRequested: "m", ModelServed: "m-1", Capability: "chat", InputTokens: 100, OutputTokens: 50,
		CostEUR: money.FormatEURFixed(24_000), MeteredBy: "local", Outcome: "ok", Status: 200, DurationMS: 12.5,
		KeyHash: w.Hash("acme-bot")}
	b.ReportAllocs()
	for b.Loop() {
		_ = w.Write(l)
	}
}

// TestReplacedFile: a file swapped at the path is written to; a directory
// put in its place makes the audit unwritable (not a silent loss into the
// unlinked file).
func TestReplacedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := Open(path, []byte("k"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_ = w.Write(&Line{RequestID: "one"})
	time.Sleep(100 * time.Millisecond)
	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	_ = w.Write(&Line{RequestID: "two"})
	time.Sleep(100 * time.Millisecond)
	if lines := readLines(t, path); len(lines) != 1 || lines[0].RequestID != "two" {
		t.Fatalf("new file holds %+v, want the line written after the swap", lines)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o750); err != nil {
		t.Fatal(err)
	}
	_ = w.Write(&Line{RequestID: "three"})
	deadline := time.Now().Add(2 * time.Second)
	for w.Healthy() == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := w.Healthy(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a directory at the audit path: Healthy = %v, want unavailable", err)
	}
}

// TestOpenRemovesIncompleteLastLine: a file that ends in the middle of a
// line (a short write on a full disk, then a stop) is cut back to its last
// whole line before anything is appended, with a warning that says how
// many bytes were removed but not what they were.
func TestOpenRemovesIncompleteLastLine(t *testing.T) {
	const fragment = `{"time":"20`
	long := strings.Repeat("x", 100<<10) // more than one block read back from the end
	for _, c := range []struct {
		name, before, kept string
		removed            int
	}{
		{"partial last line", `{"a":1}` + "\n" + fragment, `{"a":1}` + "\n", len(fragment)},
		{"no whole line", fragment, "", len(fragment)},
		{"long partial line", `{"a":1}` + "\n" + fragment + long, `{"a":1}` + "\n", len(fragment) + len(long)},
		{"whole lines", `{"a":1}` + "\n", `{"a":1}` + "\n", 0},
		{"empty", "", "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			if err := os.WriteFile(path, []byte(c.before), 0o640); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			// Without the record's time, which starts as the fragment does.
			noTime := func(groups []string, a slog.Attr) slog.Attr {
				if len(groups) == 0 && a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}
			w, err := Open(path, []byte("k"), Options{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{ReplaceAttr: noTime}))})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(&Line{RequestID: "new"}); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := c.kept + string(appendLine(nil, &Line{RequestID: "new"})) + "\n"
			if string(raw) != want {
				t.Fatalf("file holds\n%q\nwant\n%q", raw, want)
			}
			out := logs.String()
			if strings.Contains(out, fragment) || strings.Contains(out, `\"time\"`) || strings.Contains(out, "xxxx") {
				t.Errorf("the log holds the removed bytes:\n%s", out)
			}
			if c.removed == 0 {
				if strings.Contains(out, "incomplete line") {
					t.Errorf("a warning with nothing removed:\n%s", out)
				}
				return
			}
			var warned bool
			for _, ln := range strings.Split(strings.TrimSpace(out), "\n") {
				var rec map[string]any
				if json.Unmarshal([]byte(ln), &rec) == nil && rec["level"] == "WARN" &&
					strings.Contains(fmt.Sprint(rec["msg"]), "incomplete line") && rec["bytes_removed"] == float64(c.removed) {
					warned = true
				}
			}
			if !warned {
				t.Errorf("no WARN saying %d bytes of an incomplete line were removed:\n%s", c.removed, out)
			}
		})
	}
}

// flakyWriter is the writer under a Writer's file, failing on demand as a
// full disk does: the first failing write writes cut bytes, the others
// none.
type flakyWriter struct {
	w       io.Writer
	mu      sync.Mutex
	failing bool
	cut     int
}

func (f *flakyWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	failing, cut := f.failing, min(f.cut, len(p)-1)
	f.cut = 0
	f.mu.Unlock()
	if !failing {
		return f.w.Write(p)
	}
	n, err := f.w.Write(p[:max(cut, 0)])
	if err != nil {
		return n, err
	}
	return n, errors.New("no space left on device")
}

func (f *flakyWriter) fail(cut int) {
	f.mu.Lock()
	f.failing, f.cut = true, cut
	f.mu.Unlock()
}

func (f *flakyWriter) heal() {
	f.mu.Lock()
	f.failing = false
	f.mu.Unlock()
}

// openFlaky opens the audit at path with a flakyWriter under it; failures
// are sent on the returned channel.
func openFlaky(t *testing.T, path string, o Options) (*Writer, *flakyWriter, chan string) {
	t.Helper()
	reasons := make(chan string, 100)
	o.OnFailure = func(r string) {
		select {
		case reasons <- r:
		default:
		}
	}
	w, err := Open(path, []byte("k"), o)
	if err != nil {
		t.Fatal(err)
	}
	// Set before the first Write, which wakes the writer's goroutine.
	f := &flakyWriter{w: w.file}
	w.out = f
	return w, f, reasons
}

// waitFor waits until a failure whose reason contains want is reported.
func waitFor(t *testing.T, reasons chan string, want string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case r := <-reasons:
			if strings.Contains(r, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no failure %q reported", want)
		}
	}
}

// waitHealthy waits until w writes again.
func waitHealthy(t *testing.T, w *Writer) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for w.Healthy() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the audit is not written again: %v", w.Healthy())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func requestIDs(t *testing.T, path string) []string {
	t.Helper()
	var ids []string
	for _, l := range readLines(t, path) {
		ids = append(ids, l.RequestID)
	}
	return ids
}

// TestShortWriteIsFinished: after a short write, the retry writes the rest
// of the line cut short, then the lines after it: whole lines, once each.
func TestShortWriteIsFinished(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, f, reasons := openFlaky(t, path, Options{})
	f.fail(30)
	_ = w.Write(&Line{RequestID: "one"})
	waitFor(t, reasons, "no space")
	_ = w.Write(&Line{RequestID: "two"})
	f.heal()
	waitHealthy(t, w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if ids := requestIDs(t, path); !slices.Equal(ids, []string{"one", "two"}) {
		t.Fatalf("lines %v, want one, two", ids)
	}
}

// TestCutLineWrittenWholeWhenStartingOver: when, after a short write,
// writing starts over on a file, the line cut short is written whole to
// it: to a new file when the old one was removed; to the file put back at
// the path, once the incomplete line at its end is removed.
func TestCutLineWrittenWholeWhenStartingOver(t *testing.T) {
	t.Run("file removed", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "audit.jsonl")
		w, f, reasons := openFlaky(t, path, Options{})
		_ = w.Write(&Line{RequestID: "zero"})
		waitLines(t, path, 1)
		f.fail(30)
		_ = w.Write(&Line{RequestID: "one"})
		waitFor(t, reasons, "no space")
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		f.heal()
		_ = w.Write(&Line{RequestID: "two"})
		waitHealthy(t, w)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if ids := requestIDs(t, path); !slices.Equal(ids, []string{"one", "two"}) {
			t.Fatalf("lines %v in the new file, want one, two", ids)
		}
	})
	t.Run("directory, then the file put back", testCutLineFilePutBack)
}

func testCutLineFilePutBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	var logs syncBuffer
	w, f, reasons := openFlaky(t, path, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	_ = w.Write(&Line{RequestID: "zero"})
	waitLines(t, path, 1)
	f.fail(30)
	_ = w.Write(&Line{RequestID: "one"})
	waitFor(t, reasons, "no space")
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o750); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reasons, "not a regular file")
	f.heal()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".moved", path); err != nil {
		t.Fatal(err)
	}
	_ = w.Write(&Line{RequestID: "two"})
	waitHealthy(t, w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if ids := requestIDs(t, path); !slices.Equal(ids, []string{"zero", "one", "two"}) {
		t.Fatalf("lines %v, want zero, one, two", ids)
	}
	if !strings.Contains(logs.String(), `"bytes_removed":30`) {
		t.Errorf("no warning that the 30 bytes of the cut line were removed:\n%s", logs.String())
	}
}

// TestCutLineNotSplitByRotation: the rest of a line cut short goes to the
// file the line started in, even when the lines queued after it make
// lumberjack rotate.
func TestCutLineNotSplitByRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	line := func(id string) string { return string(appendLine(nil, &Line{RequestID: id})) + "\n" }
	// Room for about one more line before the 1 MB rotation.
	filler := `{"request_id":"filler"}` + "\n"
	room := len(line("one")) + len(line("two"))/2
	var b strings.Builder
	for b.Len()+len(filler) <= 1<<20-room-40 {
		b.WriteString(filler)
	}
	pad := `{"request_id":"pad","agent":""}` + "\n"
	b.WriteString(strings.Replace(pad, `""}`, `"`+strings.Repeat("p", 1<<20-room-b.Len()-len(pad))+`"}`, 1))
	if err := os.WriteFile(path, []byte(b.String()), 0o640); err != nil {
		t.Fatal(err)
	}
	w, f, reasons := openFlaky(t, path, Options{MaxSizeMB: 1})
	f.fail(30)
	_ = w.Write(&Line{RequestID: "one"})
	waitFor(t, reasons, "no space")
	_ = w.Write(&Line{RequestID: "two"})
	f.heal()
	waitHealthy(t, w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "audit-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("rotated files %v, want one", files)
	}
	if ids := requestIDs(t, files[0]); ids[len(ids)-1] != "one" {
		t.Fatalf("the rotated file ends with %q, want one", ids[len(ids)-1])
	}
	if ids := requestIDs(t, path); !slices.Equal(ids, []string{"two"}) {
		t.Fatalf("the new file holds %v, want two", ids)
	}
}

// waitLines waits until the file at path holds n lines.
func waitLines(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		raw, _ := os.ReadFile(path)
		if bytes.Count(raw, []byte("\n")) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d lines not written", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
