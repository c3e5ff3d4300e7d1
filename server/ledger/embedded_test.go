package ledger

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
			accounts := []Account{acme, acBot}
			before := make([][]CapUsage, len(accounts))
			for i, a := range accounts {
				us, err := l.Usage(ctx, a)
				if err != nil {
					t.Fatal(err)
				}
				before[i] = us
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
			for ai, want := range before {
				a := accounts[ai]
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
func BenchmarkEmbeddedReserveCommitSerial(b *testing.B) { benchSerial(b, false) }

// BenchmarkEmbeddedReserveCommitSerialPerMinute is
// BenchmarkEmbeddedReserveCommitSerial with tokens_per_minute and
// requests_per_minute on the tenant and on the agent (issue 16's target:
// at most 2 µs more per pair).
func BenchmarkEmbeddedReserveCommitSerialPerMinute(b *testing.B) { benchSerial(b, true) }

func benchSerial(b *testing.B, perMinute bool) {
	s, err := openEmbedded(filepath.Join(b.TempDir(), "ledger.db"), true)
	if err != nil {
		b.Fatal(err)
	}
	p := Policy{Default: Limits{TokensPerDay: i64(1 << 60), TokensPerMonth: i64(1 << 60), NanoEURPerMonth: i64(1 << 60)}}
	if perMinute {
		p.Default.TokensPerMinute, p.Default.RequestsPerMinute = i64(1<<60), i64(1<<60)
		p.Tenants = map[string]TenantPolicy{"tenant": {Agents: map[string]Limits{
			"agent": {TokensPerMinute: i64(1 << 60), RequestsPerMinute: i64(1 << 60)},
		}}}
	}
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
