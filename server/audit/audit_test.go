package audit

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFormatNanoEUR(t *testing.T) {
	for nano, want := range map[int64]string{
		0: "0.000000000", 24_000: "0.000024000", 1: "0.000000001", 2_500_000_000: "2.500000000",
		-5: "-0.000000005", 1_000_000_000_000: "1000.000000000",
	} {
		if got := FormatNanoEUR(nano); got != want {
			t.Errorf("FormatNanoEUR(%d) = %q, want %q", nano, got, want)
		}
	}
}

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
		if err := w.Write(&Line{RequestID: "r", InputTokens: int64(i), CostEUR: FormatNanoEUR(int64(i))}); err != nil {
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
		CostEUR: FormatNanoEUR(24_000), MeteredBy: "local", Outcome: "ok", Status: 200, DurationMS: 12.5,
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
