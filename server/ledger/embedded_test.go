package ledger

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestEmbeddedPersistence(t *testing.T) {
	for _, noSync := range []bool{true, false} {
		t.Run(fmt.Sprintf("noSync=%v", noSync), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "nested", "dir", "ledger.db") // parent created
			p := Policy{
				Default: Limits{TokensPerDay: i64(1000), NanoEURPerMonth: i64(1_000_000)},
				Tenants: map[string]TenantPolicy{"acme": {Agents: map[string]Limits{"bot": {TokensPerMonth: i64(5000)}}}},
			}
			clk := newClock(t0)
			s, err := openEmbedded(path, noSync)
			if err != nil {
				t.Fatal(err)
			}
			l := New(p, s, Options{Now: clk.Now})
			mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 100, NanoEUR: 1000}), Amount{Tokens: 90, NanoEUR: 900})
			mustCommit(t, l, mustReserve(t, l, acBot, Amount{Tokens: 10, NanoEUR: 100}), Amount{Tokens: 7, NanoEUR: 70})
			mustReserve(t, l, acme, Amount{Tokens: 500}) // reservations die with the process
			before := map[Account][]CapUsage{}
			for _, a := range []Account{acme, acBot} {
				us, err := l.Usage(ctx, a)
				if err != nil {
					t.Fatal(err)
				}
				before[a] = us
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}

			s2, err := OpenEmbedded(path)
			if err != nil {
				t.Fatal(err)
			}
			l = New(p, s2, Options{Now: clk.Now})
			defer l.Close()
			for a, want := range before {
				got, err := l.Usage(ctx, a)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					want[i].Reserved = 0
					want[i].Remaining = want[i].Limit - want[i].Committed
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%v after reopen:\n got %+v\nwant %+v", a, got, want)
				}
			}
			if got := usageOf(t, l, acme, TokensPerDay); got.Committed != 97 || got.Reserved != 0 {
				t.Errorf("tenant day after reopen: %+v", got)
			}
			if got := committedIn(t, s2, acBot, true, EURPerMonth, "2026-11"); got != 70 {
				t.Errorf("agent nano-euros after reopen: %d", got)
			}
		})
	}
}

func TestEmbeddedLockedByAnotherOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s1, err := OpenEmbedded(path)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s2, err := OpenEmbedded(path)
	took := time.Since(start)
	if err == nil {
		s2.Close()
		t.Fatal("second open of a held ledger file succeeded")
	}
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "locked by another process") {
		t.Errorf("error %q: want ErrUnavailable naming %s and the lock", err, path)
	}
	if took < 900*time.Millisecond || took > 3*time.Second {
		t.Errorf("gave up after %v, want about 1s", took)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err = OpenEmbedded(path)
	if err != nil {
		t.Fatalf("open after the first closed: %v", err)
	}
	s2.Close()
}

func TestEmbeddedClosed(t *testing.T) {
	l := New(Policy{Default: Limits{TokensPerDay: i64(10)}}, embeddedKind().open(t), Options{})
	r := mustReserve(t, l, acme, Amount{Tokens: 1})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := l.Reserve(ctx, acme, Amount{Tokens: 1}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Reserve after Close: %v", err)
	}
	if err := l.Commit(ctx, r, Amount{Tokens: 1}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Commit after Close: %v", err)
	}
	if _, err := l.Check(ctx, acme); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Check after Close: %v", err)
	}
}

const kill9Env = "FLEXWAY_BUDGET_KILL9_LEDGER"

const kill9Workers, kill9Tokens = 8, 7

// TestEmbeddedKill9Child is the child of TestEmbeddedKill9: it commits calls
// until killed, printing "begin W" before and "done W" after each Commit.
func TestEmbeddedKill9Child(t *testing.T) {
	path := os.Getenv(kill9Env)
	if path == "" {
		t.Skip("child of TestEmbeddedKill9")
	}
	s, err := OpenEmbedded(path)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	l := New(Policy{Default: Limits{TokensPerMonth: i64(1 << 60)}}, s, Options{Now: func() time.Time { return t0 }})
	var mu sync.Mutex
	say := func(s string) {
		mu.Lock()
		os.Stdout.WriteString(s + "\n") // one write(2) per line
		mu.Unlock()
	}
	for w := 0; w < kill9Workers; w++ {
		go func() {
			a := Account{Tenant: "t" + strconv.Itoa(w)}
			for {
				r, err := l.Reserve(ctx, a, Amount{Tokens: kill9Tokens})
				if err != nil {
					say("error " + err.Error())
					return
				}
				say("begin " + strconv.Itoa(w))
				if err := l.Commit(ctx, r, Amount{Tokens: kill9Tokens}); err != nil {
					say("error " + err.Error())
					return
				}
				say("done " + strconv.Itoa(w))
			}
		}()
	}
	select {}
}

// TestEmbeddedKill9 kills a process committing under load with SIGKILL and
// checks that every commit it reported done is in the file — and nothing
// else but the commits it had begun.
func TestEmbeddedKill9(t *testing.T) {
	if os.Getenv(kill9Env) != "" {
		t.Skip("in the child")
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestEmbeddedKill9Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), kill9Env+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var begun, done [kill9Workers]int64
	sc := bufio.NewScanner(out)
	killed := false
	total := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] != "begin" && f[0] != "done" {
			if strings.HasPrefix(f[0], "error") {
				t.Errorf("child: %s", sc.Text())
			}
			continue
		}
		w, _ := strconv.Atoi(f[1])
		if f[0] == "begin" {
			begun[w]++
		} else {
			done[w]++
			total++
		}
		if total == 3000 && !killed {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	cmd.Wait()
	if !killed {
		t.Fatalf("the child stopped before 3000 commits (%d)", total)
	}
	s, err := OpenEmbedded(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	month := t0.Format("2006-01")
	var sumDone, sumDisk int64
	for w := range kill9Workers {
		got := committedIn(t, s, Account{Tenant: "t" + strconv.Itoa(w)}, false, TokensPerMonth, month)
		want := done[w] * kill9Tokens
		inFlight := begun[w] - done[w] // 0 or 1: killed between "begin" and "done"
		if got != want && (inFlight != 1 || got != want+kill9Tokens) {
			t.Errorf("worker %d: %d tokens in the file, reported done %d (%d calls, %d in flight)", w, got, want, done[w], inFlight)
		}
		sumDone += want
		sumDisk += got
	}
	t.Logf("killed after %d reported commits: %d tokens reported, %d in the file", total, sumDone, sumDisk)
}

// BenchmarkEmbeddedReserveCommitSerial measures one reserve+commit pair at
// concurrency 1 (ns/op = one pair): the latency a single call pays.
func BenchmarkEmbeddedReserveCommitSerial(b *testing.B) {
	s, err := openEmbedded(filepath.Join(b.TempDir(), "ledger.db"), true)
	if err != nil {
		b.Fatal(err)
	}
	p := Policy{Default: Limits{TokensPerDay: i64(1 << 60), TokensPerMonth: i64(1 << 60), NanoEURPerMonth: i64(1 << 60)}}
	l := New(p, s, Options{})
	defer l.Close()
	a := Account{Tenant: "tenant", Agent: "agent"}
	for b.Loop() {
		r, err := l.Reserve(ctx, a, Amount{Tokens: 1500, NanoEUR: 2_000_000})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Commit(ctx, r, Amount{Tokens: 700, NanoEUR: 550_000}); err != nil {
			b.Fatal(err)
		}
	}
}

// cline is a commit line of amount to bucket, with no reservation and an
// expiry in the past (the bucket may be evicted as soon as nothing of it
// is pending).
func cline(bucket string, amount int64) line {
	return line{bucket: bucket, limit: -1, amount: amount, held: -1, expireAt: 1}
}

// openManual opens a store without its background goroutine: the test
// runs checkpoint and evict itself.
func openManual(t *testing.T, path string, noSync bool) *embedded {
	t.Helper()
	s, err := openEmbeddedWith(path, noSync, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// commitSome commits n calls of two lines each (one of buckets b0-b2, and
// b3) with amounts derived from seed, adding them to want.
func commitSome(t *testing.T, s *embedded, want map[string]int64, n, seed int) {
	t.Helper()
	for i := range n {
		a, b := int64((i*7+seed)%100+1), int64((i*13+seed)%1000+1)
		ba := "b" + strconv.Itoa(i%3)
		if err := s.commit(ctx, "", []line{cline(ba, a), cline("b3", b)}, time.Now()); err != nil {
			t.Fatal(err)
		}
		want[ba] += a
		want["b3"] += b
	}
}

// checkSums checks the committed totals of want's buckets (and that b9,
// never committed, is 0).
func checkSums(t *testing.T, s *embedded, want map[string]int64) {
	t.Helper()
	ids := []string{"b0", "b1", "b2", "b3", "b9"}
	bs, err := s.balances(ctx, ids, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if bs[i].committed != want[id] {
			t.Errorf("%s: committed %d, want %d", id, bs[i].committed, want[id])
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// crashCopy copies the bbolt file and the journal files of the open store s
// to a new directory: what a kill -9 leaves (everything written is in the
// page cache). It returns the copy's bbolt path.
func crashCopy(t *testing.T, s *embedded) string {
	t.Helper()
	s.cpMu.Lock() // no checkpoint halfway
	defer s.cpMu.Unlock()
	dst := filepath.Join(t.TempDir(), "ledger.db")
	copyFile(t, s.path, dst)
	ks, err := journalFiles(s.path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		copyFile(t, journalName(s.path, k), journalName(dst, k))
	}
	return dst
}

func listJournals(t *testing.T, path string) []uint64 {
	t.Helper()
	ks, err := journalFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

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

func TestEmbeddedCloseLeavesNoJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := openManual(t, path, true)
	want := map[string]int64{}
	commitSome(t, s, want, 30, 10)
	if err := s.checkpoint(false); err != nil {
		t.Fatal(err)
	}
	commitSome(t, s, want, 30, 11)
	lastK := s.jk
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ks := listJournals(t, path); len(ks) != 0 {
		t.Fatalf("journal files after Close: %v, want none", ks)
	}
	// The bbolt file alone holds every commit: a copy of it alone opens
	// with the totals.
	alone := filepath.Join(t.TempDir(), "ledger.db")
	copyFile(t, path, alone)
	checkSums(t, openManual(t, alone, true), want)

	s2 := openManual(t, path, true)
	checkSums(t, s2, want)
	if ks := listJournals(t, path); len(ks) != 1 || ks[0] != lastK+1 || s2.jk != lastK+1 {
		t.Errorf("journal files after reopening: %v (current %d), want only a fresh %d", ks, s2.jk, lastK+1)
	}
	if st, err := os.Stat(journalName(path, s2.jk)); err != nil || st.Size() != 0 {
		t.Errorf("fresh journal: %v %v", st, err)
	}
	// Seqs go on from the bbolt file's.
	if s2.seq != s.seq || s2.applied != s.seq {
		t.Errorf("reopened at seq %d (applied %d), want %d", s2.seq, s2.applied, s.seq)
	}
	// An idle Close also leaves none.
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if ks := listJournals(t, path); len(ks) != 0 {
		t.Errorf("journal files after an idle Close: %v", ks)
	}
}

func TestEmbeddedConcurrentCheckpoints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := openEmbeddedWith(path, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	const workers, perWorker = 64, 150
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var checkpoints, ckptErrs atomic.Int64
	var bg sync.WaitGroup
	bg.Add(2)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.checkpoint(false); err != nil {
				ckptErrs.Add(1)
				t.Error(err)
			}
			checkpoints.Add(1)
		}
	}()
	go func() { // during checkpoints too
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s.evict(time.Now().Unix()) // every bucket is past its expiry
			runtime.Gosched()
		}
	}()
	var want [5]atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				a, b := int64(w*perWorker+i)%97+1, int64(i%5)
				lines := []line{cline("b"+strconv.Itoa(w%4), a), cline("b4", b)}
				if err := s.commit(ctx, "", lines, time.Now()); err != nil {
					t.Error(err)
					return
				}
				want[w%4].Add(a)
				want[4].Add(b)
			}
		}()
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	ids := []string{"b0", "b1", "b2", "b3", "b4"}
	check := func(s *embedded, when string) {
		t.Helper()
		bs, err := s.balances(ctx, ids, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			if bs[i].committed != want[i].Load() {
				t.Errorf("%s: %s committed %d, want %d", when, id, bs[i].committed, want[i].Load())
			}
		}
	}
	check(s, "before Close")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d checkpoints during %d commits", checkpoints.Load(), workers*perWorker)
	s2 := openManual(t, path, true)
	check(s2, "after reopening")
}

func TestEmbeddedEvictKeepsPendingDeltas(t *testing.T) {
	s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), true)
	want := map[string]int64{}
	commitSome(t, s, want, 10, 12) // buckets expired long ago
	now := time.Now().Unix()
	s.evict(now)
	s.mu.Lock()
	cached := len(s.buckets)
	s.mu.Unlock()
	if cached != 4 {
		t.Errorf("%d buckets cached after evict, want the 4 with pending deltas", cached)
	}
	checkSums(t, s, want)
	if err := s.checkpoint(false); err != nil {
		t.Fatal(err)
	}
	s.evict(now)
	s.mu.Lock()
	cached = len(s.buckets)
	s.mu.Unlock()
	if cached != 0 {
		t.Errorf("%d buckets cached after checkpoint and evict, want none", cached)
	}
	checkSums(t, s, want) // reloaded from the bbolt file
	// A bucket with an unexpired reservation stays; one still in its
	// period too.
	if _, _, err := s.reserve(ctx, "r", []line{{bucket: "b0", limit: -1, amount: 5, expireAt: 1}}, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.commit(ctx, "", []line{{bucket: "b8", limit: -1, amount: 3, held: -1, expireAt: now + 3600}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.checkpoint(false); err != nil {
		t.Fatal(err)
	}
	s.evict(now)
	s.mu.Lock()
	_, r := s.buckets["b0"]
	_, p := s.buckets["b8"]
	s.mu.Unlock()
	if !r || !p {
		t.Errorf("evicted a bucket holding a reservation (%v) or not expired (%v)", !r, !p)
	}
}

// faultyJournal makes the journal's writes and truncations fail on demand.
type faultyJournal struct {
	*os.File
	short     atomic.Int64 // >= 0: the next Write writes that many bytes, then fails
	truncFail atomic.Bool
}

func (f *faultyJournal) Write(b []byte) (int, error) {
	if n := f.short.Swap(-1); n >= 0 {
		m, _ := f.File.Write(b[:min(int(n), len(b))])
		return m, errors.New("injected write failure")
	}
	return f.File.Write(b)
}

func (f *faultyJournal) Truncate(size int64) error {
	if f.truncFail.Load() {
		return errors.New("injected truncate failure")
	}
	return f.File.Truncate(size)
}

func injectFaults(s *embedded) *faultyJournal {
	s.mu.Lock()
	defer s.mu.Unlock()
	fj := &faultyJournal{File: s.jf.(*os.File)}
	fj.short.Store(-1)
	s.jf = fj
	return fj
}

func journalSize(t *testing.T, s *embedded) int64 {
	t.Helper()
	st, err := os.Stat(journalName(s.path, s.jk))
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestEmbeddedJournalWriteFailure: when the journal cannot be written (a
// full disk), the commit's usage is still counted (ErrNotDurable), the
// reservation is settled, and new reservations and ping are refused until
// a checkpoint has written the usage to the bbolt file.
func TestEmbeddedJournalWriteFailure(t *testing.T) {
	refused := func(t *testing.T, s *embedded) {
		t.Helper()
		if _, _, err := s.reserve(ctx, "other", []line{{bucket: "b2", limit: -1, amount: 1, expireAt: 1}}, time.Now(), time.Now().Add(time.Hour)); !errors.Is(err, ErrUnavailable) {
			t.Errorf("reserve while the journal cannot be written: %v", err)
		}
		if err := s.ping(ctx); !errors.Is(err, ErrUnavailable) {
			t.Errorf("ping while the journal cannot be written: %v", err)
		}
		if err := s.writable(); !errors.Is(err, ErrUnavailable) {
			t.Errorf("writable while the journal cannot be written: %v", err)
		}
	}
	usable := func(t *testing.T, s *embedded) {
		t.Helper()
		if err := s.ping(ctx); err != nil {
			t.Errorf("ping: %v", err)
		}
		if err := s.writable(); err != nil {
			t.Errorf("writable: %v", err)
		}
	}
	notDurable := func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, ErrNotDurable) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("commit with a failing journal: %v, want ErrNotDurable and ErrUnavailable", err)
		}
	}
	t.Run("short write", func(t *testing.T) {
		s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), true)
		want := map[string]int64{}
		commitSome(t, s, want, 5, 13)
		for _, n := range []int64{0, 1, 7} {
			fj := injectFaults(s) // each checkpoint starts a new file
			durable := maps.Clone(want)
			size := journalSize(t, s)
			if _, _, err := s.reserve(ctx, "r", []line{{bucket: "b0", limit: -1, amount: 50, expireAt: 1}}, time.Now(), time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			fj.short.Store(n)
			notDurable(t, s.commit(ctx, "r", []line{{bucket: "b0", limit: -1, amount: 40, held: 50, expireAt: 1}, cline("b3", 9)}, time.Now()))
			want["b0"] += 40
			want["b3"] += 9
			if got := journalSize(t, s); got != size {
				t.Errorf("journal %d bytes after a failed write of %d, want %d", got, n, size)
			}
			checkSums(t, s, want) // counted in memory
			bs, _ := s.balances(ctx, []string{"b0"}, time.Now())
			if bs[0].reserved != 0 {
				t.Errorf("reservation after the commit: %d, want settled", bs[0].reserved)
			}
			refused(t, s)
			// Commits of calls already admitted are counted too, without
			// trying the journal.
			notDurable(t, s.commit(ctx, "", []line{cline("b1", 5)}, time.Now()))
			want["b1"] += 5
			checkSums(t, s, want)
			// A crash now loses what is not durable, and only that.
			checkSums(t, openManual(t, crashCopy(t, s), true), durable)
			// A checkpoint writes it to the bbolt file; the ledger is usable
			// again.
			if err := s.checkpoint(false); err != nil {
				t.Fatal(err)
			}
			usable(t, s)
			checkSums(t, openManual(t, crashCopy(t, s), true), want)
			commitSome(t, s, want, 3, int(n))
		}
		checkSums(t, s, want)
		checkSums(t, openManual(t, crashCopy(t, s), true), want)
	})
	t.Run("truncate fails too", func(t *testing.T) {
		s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), true)
		want := map[string]int64{}
		commitSome(t, s, want, 5, 14)
		durable := maps.Clone(want)
		fj := injectFaults(s)
		fj.truncFail.Store(true)
		fj.short.Store(5)
		notDurable(t, s.commit(ctx, "", []line{cline("b1", 1000)}, time.Now()))
		notDurable(t, s.commit(ctx, "", []line{cline("b1", 1000)}, time.Now()))
		want["b1"] += 2000
		checkSums(t, s, want)
		refused(t, s)
		// A crash now: the partial record is the torn end of the last file.
		checkSums(t, openManual(t, crashCopy(t, s), true), durable)
		// A checkpoint that cannot repair the journal still writes the
		// usage to the bbolt file, but does not start a new journal after
		// the broken one, and the ledger stays refused.
		k := s.jk
		if err := s.checkpoint(false); err == nil {
			t.Error("checkpoint repaired the journal though truncation fails")
		}
		if s.jk != k || s.applied != s.seq {
			t.Errorf("after the checkpoint: journal %d (was %d), applied %d of %d", s.jk, k, s.applied, s.seq)
		}
		refused(t, s)
		checkSums(t, openManual(t, crashCopy(t, s), true), want)
		// Once truncation works, the next checkpoint repairs it.
		fj.truncFail.Store(false)
		if err := s.checkpoint(false); err != nil {
			t.Fatal(err)
		}
		usable(t, s)
		commitSome(t, s, want, 5, 15)
		checkSums(t, s, want)
		checkSums(t, openManual(t, crashCopy(t, s), true), want)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		checkSums(t, openManual(t, s.path, true), want)
	})
}

// TestLedgerRefusesWhileNotDurable: through the Ledger, a call without any
// cap is refused too while the journal cannot be written, and a Commit
// that returned ErrNotDurable is settled (a retry counts nothing more).
func TestLedgerRefusesWhileNotDurable(t *testing.T) {
	s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), true)
	l := New(Policy{}, s, Options{})
	a := Account{Tenant: "acme"}
	r, err := l.Reserve(ctx, a, Amount{Tokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	fj := injectFaults(s)
	fj.short.Store(0)
	err = l.Commit(ctx, r, Amount{Tokens: 7, NanoEUR: 70})
	if !errors.Is(err, ErrNotDurable) {
		t.Fatalf("Commit: %v", err)
	}
	if err := l.Commit(ctx, r, Amount{Tokens: 7, NanoEUR: 70}); err != nil {
		t.Fatalf("retried Commit: %v, want nil (settled)", err)
	}
	if _, err := l.Reserve(ctx, a, Amount{Tokens: 10}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Reserve of an uncapped account while not durable: %v", err)
	}
	if err := l.Ping(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Ping while not durable: %v", err)
	}
	u, err := l.Usage(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range u {
		if want := map[Unit]int64{UnitTokens: 7, UnitNanoEUR: 70}[c.Unit]; c.Committed != want {
			t.Errorf("%s committed %d, want %d (counted once)", c.Cap, c.Committed, want)
		}
	}
	if err := s.checkpoint(false); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(ctx, a, Amount{Tokens: 10}); err != nil {
		t.Fatalf("Reserve after the checkpoint: %v", err)
	}
}

// failBolt makes s's bbolt writes fail (a closed database in its place)
// and returns a function putting the real one back.
func failBolt(t *testing.T, s *embedded) (restore func()) {
	t.Helper()
	closed, err := bolt.Open(filepath.Join(t.TempDir(), "closed.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	real := s.db
	s.cpMu.Lock()
	s.db = closed
	s.cpMu.Unlock()
	return func() {
		s.cpMu.Lock()
		s.db = real
		s.cpMu.Unlock()
	}
}

func TestEmbeddedCheckpointFailure(t *testing.T) {
	t.Run("retried", func(t *testing.T) {
		s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), true)
		want := map[string]int64{}
		commitSome(t, s, want, 20, 16)
		first := s.jk
		restore := failBolt(t, s)
		if err := s.checkpoint(false); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("checkpoint with bbolt failing: %v", err)
		}
		// The deltas are pending again, the journal kept; the next
		// checkpoint does not start yet another file.
		if s.applied != 0 || len(s.pending) != 4 || fmt.Sprint(s.old) != fmt.Sprint([]uint64{first}) {
			t.Errorf("after the failure: applied %d, pending %v, old %v", s.applied, s.pending, s.old)
		}
		commitSome(t, s, want, 10, 17)
		second := s.jk
		if err := s.checkpoint(false); err == nil {
			t.Fatal("checkpoint with bbolt failing succeeded")
		}
		if s.jk != second {
			t.Errorf("a failing checkpoint after a failed one started journal %d", s.jk)
		}
		s.evict(time.Now().Unix()) // nothing is in bbolt: nothing may go
		checkSums(t, openManual(t, crashCopy(t, s), true), want)
		restore()
		checkSums(t, s, want)
		commitSome(t, s, want, 10, 18)
		if err := s.checkpoint(false); err != nil {
			t.Fatal(err)
		}
		if ks := listJournals(t, s.path); fmt.Sprint(ks) != fmt.Sprint([]uint64{s.jk}) || s.applied != s.seq || len(s.pending) != 0 {
			t.Errorf("after the retry: journals %v (current %d), applied %d of %d, pending %v", ks, s.jk, s.applied, s.seq, s.pending)
		}
		s.evict(time.Now().Unix())
		checkSums(t, s, want)
		checkSums(t, openManual(t, crashCopy(t, s), true), want)
	})
	t.Run("at Close", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		s, err := openEmbeddedWith(path, true, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{}
		commitSome(t, s, want, 20, 19)
		real := s.db
		failBolt(t, s)
		if err := s.Close(); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Close with bbolt failing: %v", err)
		}
		real.Close()
		if ks := listJournals(t, path); len(ks) != 1 {
			t.Fatalf("journal files after a failed Close: %v, want the one kept", ks)
		}
		checkSums(t, openManual(t, path, true), want)
	})
}

// TestEmbeddedDamagedLedgerFile: a ledger file restored from an older copy
// (its records end before the journal's first) and a truncated ledger file
// are refused with ErrUnavailable, not replayed with a gap or crashed on.
func TestEmbeddedDamagedLedgerFile(t *testing.T) {
	t.Run("older copy", func(t *testing.T) {
		s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), true)
		commitSome(t, s, map[string]int64{}, 10, 31)
		if err := s.checkpoint(false); err != nil {
			t.Fatal(err)
		}
		older := crashCopy(t, s) // its bbolt file holds records 1-10
		commitSome(t, s, map[string]int64{}, 10, 32)
		if err := s.checkpoint(false); err != nil {
			t.Fatal(err)
		}
		commitSome(t, s, map[string]int64{}, 10, 34)
		if err := s.checkpoint(false); err != nil {
			t.Fatal(err)
		}
		commitSome(t, s, map[string]int64{}, 5, 33) // the journal: 21-30 (kept), 31-35
		cp := crashCopy(t, s)
		copyFile(t, older, cp)
		s2, err := openEmbedded(cp, true)
		if err == nil {
			s2.Close()
			t.Fatal("opened a ledger file older than its journal")
		}
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "missing") {
			t.Errorf("error %q: want ErrUnavailable saying records are missing", err)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), true)
		commitSome(t, s, map[string]int64{}, 10, 34)
		if err := s.checkpoint(false); err != nil {
			t.Fatal(err)
		}
		cp := crashCopy(t, s)
		if err := os.Truncate(cp, 8192); err != nil {
			t.Fatal(err)
		}
		s2, err := openEmbedded(cp, true)
		if err == nil {
			s2.Close()
			t.Fatal("opened a truncated ledger file")
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("error %q: want ErrUnavailable", err)
		}
	})
}

// TestEmbeddedWarns: a checkpoint that starts failing, one that succeeds
// again, and a torn journal end dropped at open are told to Warn, once each.
func TestEmbeddedWarns(t *testing.T) {
	var msgs []string
	warn := func(m string) { msgs = append(msgs, m) }
	s, err := openEmbeddedWith(filepath.Join(t.TempDir(), "ledger.db"), true, false, warn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	commitSome(t, s, map[string]int64{}, 3, 41)
	restore := failBolt(t, s)
	s.report(s.checkpoint(false))
	s.report(s.checkpoint(false))
	restore()
	s.report(s.checkpoint(false))
	if len(msgs) != 2 || !strings.Contains(msgs[0], "checkpoints fail") || !strings.Contains(msgs[1], "succeed again") {
		t.Fatalf("warnings %q", msgs)
	}
	commitSome(t, s, map[string]int64{}, 3, 42)
	cp := crashCopy(t, s)
	f, err := os.OpenFile(journalName(cp, s.jk), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0x05, 0x01})
	f.Close()
	msgs = nil
	s2, err := openEmbeddedWith(cp, true, false, warn)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if len(msgs) != 1 || !strings.Contains(msgs[0], "torn end") {
		t.Fatalf("warnings at open %q", msgs)
	}
}

// TestEmbeddedNotesSurviveACrash: the notes of commits (the gateway's
// audit lines) are journaled with them and handed, in commit order, to
// EmbeddedOptions.Notes by the open after a crash, those of the journal
// file a checkpoint just applied included; when Notes fails, the open
// fails and the journal files stay for the next one.
func TestEmbeddedNotesSurviveACrash(t *testing.T) {
	s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), true)
	calls := 0
	commit := func(note []byte, amount int64) {
		t.Helper()
		nctx := WithNote(ctx, func() []byte { calls++; return note })
		if err := s.commit(nctx, "", []line{cline("b0", amount)}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for i := range 5 {
		n := fmt.Sprintf(`{"request_id":"r%d"}`, i)
		commit([]byte(n), 10)
		want = append(want, n)
	}
	if err := s.checkpoint(false); err != nil {
		t.Fatal(err)
	}
	for i := 5; i < 8; i++ {
		n := fmt.Sprintf(`{"request_id":"r%d"}`, i)
		commit([]byte(n), 10)
		want = append(want, n)
	}
	commit(bytes.Repeat([]byte("x"), maxNote+1), 10) // too long: journaled without it
	commit(nil, 10)
	before := calls
	commit([]byte("never asked"), 0) // charges nothing: no record, no note
	if calls != before {
		t.Error("the note of a commit that charges nothing was built")
	}
	cp := crashCopy(t, s)

	refuse := errors.New("audit directory not writable")
	if _, err := openEmbeddedFull(cp, true, false, nil, func([][]byte) error { return refuse }); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), refuse.Error()) {
		t.Fatalf("open with Notes failing: %v", err)
	}
	if ks := listJournals(t, cp); len(ks) != 2 {
		t.Fatalf("journal files after a failed open: %v, want both kept", ks)
	}
	var got []string
	s2, err := openEmbeddedFull(cp, true, false, nil, func(notes [][]byte) error {
		for _, n := range notes {
			got = append(got, string(n))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("notes after the crash:\n got %v\nwant %v", got, want)
	}
	checkSums(t, s2, map[string]int64{"b0": 100})
	// A clean close leaves no journal: the next open has no note to give.
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	s3, err := openEmbeddedFull(cp, true, false, nil, func([][]byte) error { t.Error("notes after a clean close"); return nil })
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, s3, map[string]int64{"b0": 100})
	s3.Close()
}
