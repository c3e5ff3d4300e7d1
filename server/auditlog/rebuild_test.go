package auditlog

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexway/flexway/server/money"
)

// noteOf is the line of call id as the ledger journals it at the commit
// (ended there: ok, 200), and final the one the interceptor writes after
// (another outcome and duration): Rebuild takes them for the same call.
func noteOf(t *testing.T, id string, tokens int64) (note, final []byte) {
	t.Helper()
	l := &Line{Time: time.Date(2026, 12, 1, 21, 0, 0, 123456789, time.UTC), RequestID: id, Operation: "ai.chatCompletions",
		Tenant: "acme", Agent: "bot", Backend: "main", ModelRequested: "m", ModelServed: "m", Capability: "chat",
		InputTokens: tokens, OutputTokens: 5, CostEUR: money.FormatEURFixed(tokens * 1000), MeteredBy: "local",
		Outcome: "ok", Status: 200, DurationMS: 1.5, KeyHash: "kh"}
	note, err := Encode(l)
	if err != nil {
		t.Fatal(err)
	}
	l.Outcome, l.Status, l.DurationMS = "canceled", 499, 2.25
	final, err = Encode(l)
	if err != nil {
		t.Fatal(err)
	}
	return note, final
}

// TestRebuild: the journaled lines of calls whose line the audit files do
// not hold are appended, once, after repairing a torn last line; those
// whose line is in the file or in a backup rotated since are not, nor
// twice for two calls of the same key when one line is there.
func TestRebuild(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	n1, f1 := noteOf(t, "in-file", 1)
	n2, _ := noteOf(t, "lost", 2)
	n3, f3 := noteOf(t, "in-backup", 3)
	n4, f4 := noteOf(t, "twice", 4) // two calls with one key; one line written
	n5, _ := noteOf(t, "in-old-backup", 5)
	other, _ := noteOf(t, "other", 6)
	// The live file: f1, f4, another call's line, and a torn line.
	if err := os.WriteFile(path, []byte(string(f1)+"\n"+string(f4)+"\n"+string(other)+"\n"+`{"time":"2026-12-01T21:0`), 0o640); err != nil {
		t.Fatal(err)
	}
	// A backup rotated since the calls began (compressed), and one
	// rotated before: not read, so its line does not count.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(append(f3, '\n'))
	zw.Close()
	if err := os.WriteFile(filepath.Join(dir, "audit-2026-12-01T21-00-05.000.jsonl.gz"), gz.Bytes(), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "audit-2026-11-30T10-00-00.000.jsonl"), append(bytes.Clone(n5), '\n'), 0o640); err != nil {
		t.Fatal(err)
	}
	notes := [][]byte{n1, n2, n3, n4, n4, n5, []byte("not a line")}
	n, err := Rebuild(path, notes, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("appended %d lines, want 3 (lost, the second twice, in-old-backup)", n)
	}
	raw, _ := os.ReadFile(path)
	want := string(f1) + "\n" + string(f4) + "\n" + string(other) + "\n" + string(n2) + "\n" + string(n4) + "\n" + string(n5) + "\n"
	if string(raw) != want {
		t.Errorf("audit file:\n%s\nwant:\n%s", raw, want)
	}
	// Again: nothing more.
	if n, err := Rebuild(path, notes, nil); err != nil || n != 0 {
		t.Errorf("second Rebuild: %d lines, %v; want none", n, err)
	}
	// No audit file yet: it is created with the lines.
	fresh := filepath.Join(t.TempDir(), "sub", "audit.jsonl")
	if n, err := Rebuild(fresh, [][]byte{n1}, nil); err != nil || n != 1 {
		t.Fatalf("Rebuild of a missing file: %d, %v", n, err)
	}
	if raw, _ := os.ReadFile(fresh); string(raw) != string(n1)+"\n" {
		t.Errorf("new file: %q", raw)
	}
	// The appended lines read back as lines.
	w, err := Open(path, []byte("k"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if ls := readLines(t, path); len(ls) != 6 || ls[3].RequestID != "lost" || !strings.HasPrefix(ls[5].RequestID, "in-old") {
		t.Errorf("lines: %+v", ls)
	}
}

// TestEncodeIsWhatWriteWrites: the journaled line is byte for byte what
// the writer writes, and an unencodable line is an error.
func TestEncodeIsWhatWriteWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := Open(path, []byte("k"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := sampleLine()
	if err := w.Write(l); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b, err := Encode(l)
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(path); string(raw) != string(b)+"\n" {
		t.Errorf("written %q, encoded %q", raw, b)
	}
	if _, err := Encode(&Line{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Error("Encode of a year-10000 line did not fail")
	}
	if _, err := Encode(nil); err == nil {
		t.Error("Encode(nil) did not fail")
	}
}
