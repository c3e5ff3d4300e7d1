package ledger

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

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
