package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEmbeddedCrashRecovery(t *testing.T) {
	for _, noSync := range []bool{true, false} {
		t.Run(fmt.Sprintf("noSync=%v", noSync), func(t *testing.T) {
			t.Run("before any checkpoint", func(t *testing.T) {
				s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), noSync)
				want := map[string]int64{}
				commitSome(t, s, want, 50, 1)
				cp := crashCopy(t, s)
				if ks := listJournals(t, cp); len(ks) != 1 {
					t.Fatalf("journal files: %v, want one", ks)
				}
				s2 := openManual(t, cp, noSync)
				checkSums(t, s2, want)
				if ks := listJournals(t, cp); len(ks) != 1 || ks[0] != s.jk+1 {
					t.Errorf("journal files after recovery: %v, want only %d", ks, s.jk+1)
				}
				checkSums(t, s, want) // the original is unaffected
			})
			t.Run("after a checkpoint", func(t *testing.T) {
				s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), noSync)
				want := map[string]int64{}
				commitSome(t, s, want, 40, 2)
				if err := s.checkpoint(false); err != nil {
					t.Fatal(err)
				}
				// The file it stopped writing is kept one checkpoint
				// longer (the notes of its commits), then deleted.
				if ks := listJournals(t, s.path); len(ks) != 2 || ks[0] != s.jk-1 || ks[1] != s.jk {
					t.Errorf("journal files after a checkpoint: %v, want the one just applied and the current %d", ks, s.jk)
				}
				commitSome(t, s, want, 30, 3)
				s2 := openManual(t, crashCopy(t, s), noSync)
				checkSums(t, s2, want)
				if err := s.checkpoint(false); err != nil {
					t.Fatal(err)
				}
				if ks := listJournals(t, s.path); len(ks) != 2 || ks[0] != s.jk-1 {
					t.Errorf("journal files after a second checkpoint: %v, want %d and %d", ks, s.jk-1, s.jk)
				}
				if err := s.checkpoint(false); err != nil { // nothing committed since
					t.Fatal(err)
				}
				if ks := listJournals(t, s.path); len(ks) != 1 || ks[0] != s.jk {
					t.Errorf("journal files after an idle checkpoint: %v, want only the current %d", ks, s.jk)
				}
				s3 := openManual(t, crashCopy(t, s), noSync)
				checkSums(t, s3, want)
			})
		})
	}
	t.Run("torn tail", func(t *testing.T) {
		s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), true)
		want := map[string]int64{}
		commitSome(t, s, want, 20, 4)
		if err := s.checkpoint(false); err != nil {
			t.Fatal(err)
		}
		commitSome(t, s, want, 20, 5)
		torn := appendRecord(nil, s.seq+1, []jdelta{{"b0", 1000}, {"b3", 1000}}, nil)
		for _, tail := range [][]byte{torn[:len(torn)-3], torn[:2], []byte("garbage after the last record"), make([]byte, 100)} {
			cp := crashCopy(t, s)
			name := journalName(cp, s.jk)
			st, err := os.Stat(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(tail)
			f.Close()
			// The replay truncates the torn end away (before the open
			// deletes the file).
			scratch := map[string]int64{}
			if _, err := (&embedded{path: cp}).replay(name, true, s.applied, 0, scratch, new([][]byte)); err != nil {
				t.Fatalf("tail %q: %v", tail, err)
			}
			if st2, err := os.Stat(name); err != nil || st2.Size() != st.Size() {
				t.Errorf("tail %q: journal size %v after the replay, want %d (%v)", tail, st2.Size(), st.Size(), err)
			}
			f, _ = os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
			f.Write(tail)
			f.Close()
			s2 := openManual(t, cp, true)
			checkSums(t, s2, want)
			s2.Close()
			if ks := listJournals(t, cp); len(ks) != 0 {
				t.Errorf("journal files after Close: %v", ks)
			}
		}
	})
	t.Run("applied journal copied back", func(t *testing.T) {
		// A crash between a checkpoint's bbolt update and its deletion
		// of the journal: the journal's records must not count twice.
		s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), true)
		want := map[string]int64{}
		commitSome(t, s, want, 30, 6)
		applied := journalName(s.path, s.jk)
		saved, err := os.ReadFile(applied)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.checkpoint(false); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(applied); err != nil {
			t.Fatalf("applied journal not kept until the next checkpoint: %v", err)
		}
		if err := s.checkpoint(false); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(applied); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("applied journal not deleted by the next checkpoint: %v", err)
		}
		commitSome(t, s, want, 10, 7)
		cp := crashCopy(t, s)
		if err := os.WriteFile(filepath.Join(filepath.Dir(cp), filepath.Base(applied)), saved, 0o600); err != nil {
			t.Fatal(err)
		}
		s2 := openManual(t, cp, true)
		checkSums(t, s2, want)
		// And once more after the recovery itself (idempotent).
		s2.Close()
		s3 := openManual(t, cp, true)
		checkSums(t, s3, want)
	})
	t.Run("crash between rotation and bbolt update", func(t *testing.T) {
		// Two journal files, none applied: both are replayed in order.
		dir, want := twoJournals(t)
		s2 := openManual(t, filepath.Join(dir, "ledger.db"), true)
		checkSums(t, s2, want)
	})
}

// twoJournals leaves in a new directory what a crash during a checkpoint
// leaves: the bbolt file as it was before, the journal file the checkpoint
// rotated away from, and the new current one, both with records. It
// returns the directory and the committed totals.
func twoJournals(t *testing.T) (string, map[string]int64) {
	t.Helper()
	s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), true)
	want := map[string]int64{}
	commitSome(t, s, want, 25, 8)
	cp := crashCopy(t, s) // the bbolt file and the first journal
	if err := s.checkpoint(false); err != nil {
		t.Fatal(err)
	}
	commitSome(t, s, want, 25, 9)
	copyFile(t, journalName(s.path, s.jk), journalName(cp, s.jk))
	if ks := listJournals(t, cp); len(ks) != 2 {
		t.Fatalf("journal files: %v, want 2", ks)
	}
	return filepath.Dir(cp), want
}

func TestEmbeddedCorruptJournalRefused(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(b []byte) []byte
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }},
		{"torn end", func(b []byte) []byte { return b[:len(b)-2] }},
		{"garbage after", func(b []byte) []byte { return append(b, 0, 0, 0, 0) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := twoJournals(t)
			path := filepath.Join(dir, "ledger.db")
			ks := listJournals(t, path)
			first := journalName(path, ks[0])
			b, err := os.ReadFile(first)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(first, c.spoil(b), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := openEmbedded(path, true)
			if err == nil {
				s.Close()
				t.Fatal("opened with a corrupt journal file that is not the last")
			}
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), first) {
				t.Errorf("error %q: want ErrUnavailable naming %s", err, first)
			}
			if got := listJournals(t, path); fmt.Sprint(got) != fmt.Sprint(ks) {
				t.Errorf("journal files after the refusal: %v, want %v untouched", got, ks)
			}
		})
	}
	// In the last file, bad bytes followed by good records are corruption,
	// not a torn end: refused, and nothing dropped.
	t.Run("corrupt middle of the last file", func(t *testing.T) {
		s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), true)
		commitSome(t, s, map[string]int64{}, 10, 21)
		cp := crashCopy(t, s)
		last := journalName(cp, s.jk)
		b, err := os.ReadFile(last)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/3] ^= 0x10
		if err := os.WriteFile(last, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s2, err := openEmbedded(cp, true)
		if err == nil {
			s2.Close()
			t.Fatal("opened a last journal file corrupt in its middle")
		}
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), last) || !strings.Contains(err.Error(), "good records follow") {
			t.Errorf("error %q: want ErrUnavailable naming %s and saying good records follow", err, last)
		}
		if got, _ := os.ReadFile(last); !bytes.Equal(got, b) {
			t.Error("the corrupt journal file was changed")
		}
	})
	t.Run("records out of order", func(t *testing.T) {
		dir, _ := twoJournals(t)
		path := filepath.Join(dir, "ledger.db")
		ks := listJournals(t, path)
		copyFile(t, journalName(path, ks[0]), journalName(path, ks[1]+1)) // seqs go back
		s, err := openEmbedded(path, true)
		if err == nil {
			s.Close()
			t.Fatal("opened with journal records out of order")
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("error %q: want ErrUnavailable", err)
		}
	})
}
