package promptlog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// readLines decodes every line of the files in dir whose name starts with
// base's stem, failing on a line that is not one whole JSON object.
func readLines(t *testing.T, dir string) []map[string]any {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "prompts*.jsonl"))
	var out []map[string]any
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, st.Mode().Perm())
		}
		fh, _ := os.Open(f)
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 8<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%s: not a whole line: %q", f, sc.Text())
			}
			out = append(out, m)
		}
		fh.Close()
	}
	return out
}

func TestLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w, err := Open(filepath.Join(dir, "sub", "prompts.jsonl"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 11, 0, 0, 5e8, time.FixedZone("CET", 3600))
	w.Write(&Entry{Time: at, RequestID: "r1", Tenant: "acme", Agent: "bot", Model: "fast",
		Messages: json.RawMessage("[\n {\"role\": \"user\", \"content\": \"card [REDACTED:credit_card] <x>\"}\n]"), Answer: "hi\nthere"})
	w.Write(&Entry{RequestID: "r2", Messages: json.RawMessage(`[]`), AnswerJSON: json.RawMessage(`[{"id":"c1","type":"function"}]`)})
	w.Write(&Entry{RequestID: "bad", Messages: json.RawMessage(`[{`)})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(&Entry{}); err != ErrClosed {
		t.Errorf("Write after Close = %v", err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "sub", "prompts.jsonl"))
	want := `{"time":"2026-12-02T10:00:00.5Z","request_id":"r1","tenant":"acme","agent":"bot","model":"fast","messages":[{"role":"user","content":"card [REDACTED:credit_card] <x>"}],"answer":"hi\nthere"}` + "\n"
	lines := strings.SplitAfter(string(raw), "\n")
	if len(lines) != 3 || lines[0] != want || !strings.Contains(lines[1], `"messages":[],"answer":[{"id":"c1","type":"function"}]}`) {
		t.Errorf("file:\n%s\nwant first line:\n%s", raw, want)
	}
	if w.Failed() != 1 {
		t.Errorf("Failed = %d, want 1 (the entry whose messages are not JSON)", w.Failed())
	}
	st, _ := os.Stat(filepath.Join(dir, "sub", "prompts.jsonl"))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
}

// TestConcurrentWritersAndRotation: entries from many goroutines are whole
// lines, every one written, across rotated files that keep mode 0600.
func TestConcurrentWritersAndRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w, err := Open(filepath.Join(dir, "prompts.jsonl"), Options{MaxSizeMB: 1, QueueLen: 100000})
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 400
	text := strings.Repeat("x", 1000)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				w.Write(&Entry{RequestID: fmt.Sprintf("%d-%d", g, i), Messages: json.RawMessage(`[]`), Answer: text})
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, dir)
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l["request_id"].(string)] = true
	}
	if len(lines) != writers*each || len(seen) != writers*each || w.Dropped() != 0 {
		t.Errorf("%d lines, %d distinct, %d dropped; want %d", len(lines), len(seen), w.Dropped(), writers*each)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "prompts*.jsonl"))
	if len(files) < 3 {
		t.Errorf("%d files after ~3.3 MB at 1 MB: not rotated", len(files))
	}
}

// TestQueueFullDrops: with the writer's goroutine unable to drain (the
// queue held), Write never blocks and counts what it drops.
func TestQueueFullDrops(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w, err := Open(filepath.Join(dir, "prompts.jsonl"), Options{QueueLen: 4})
	if err != nil {
		t.Fatal(err)
	}
	// The writer's goroutine takes the first entry and blocks writing it:
	// the queue then fills up and nothing drains it.
	block, entered := make(chan struct{}), make(chan struct{}, 1)
	w.out = blockingWriter{block, entered}
	w.Write(&Entry{RequestID: "first"})
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer never wrote")
	}
	start := time.Now()
	for i := range 10 {
		w.Write(&Entry{RequestID: fmt.Sprint(i)})
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("10 writes on a full queue took %s", took)
	}
	if w.Dropped() != 6 {
		t.Errorf("Dropped = %d, want 6 (10 writes, room for 4)", w.Dropped())
	}
	close(block)
	w.Close()
}

// blockingWriter signals entered once, then blocks each write until block
// is closed.
type blockingWriter struct{ block, entered chan struct{} }

func (b blockingWriter) Write(p []byte) (int, error) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.block
	return len(p), nil
}

func TestOpenRepairsAndNarrows(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "prompts.jsonl")
	os.WriteFile(p, []byte(`{"request_id":"old"}`+"\n"+`{"request_id":"cu`), 0o644)
	os.Chmod(p, 0o644)
	w, err := Open(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(&Entry{RequestID: "new"})
	w.Close()
	raw, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[2], `{"time":`) || !strings.Contains(lines[2], `"request_id":"new"`) {
		t.Errorf("file:\n%s", raw)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
}

func TestSetSharesAWriterPerPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := NewSet(Options{})
	a, err := s.Writer(filepath.Join(dir, "prompts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Writer(filepath.Join(dir, ".", "x", "..", "prompts.jsonl"))
	c, _ := s.Writer(filepath.Join(dir, "prompts-other.jsonl"))
	if a != b || a == c {
		t.Errorf("same path: %p %p; other path %p", a, b, c)
	}
	a.Write(&Entry{RequestID: "a"})
	b.Write(&Entry{RequestID: "b"})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "prompts.jsonl"))
	if strings.Count(string(raw), "\n") != 2 {
		t.Errorf("shared file:\n%s", raw)
	}
}
