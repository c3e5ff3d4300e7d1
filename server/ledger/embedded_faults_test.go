package ledger

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

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
