package ledger

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flexway/flexway/server/money"
)

// openJournal creates journal file k. With noSync false its directory entry
// is made durable at once, as its records will be.
func (s *embedded) openJournal(k uint64) (*os.File, error) {
	f, err := createJournal(s.path, k)
	if err != nil {
		return nil, fmt.Errorf("cannot create a journal file: %w", err)
	}
	if !s.noSync {
		if err := syncDir(filepath.Dir(s.path)); err != nil {
			f.Close()
			os.Remove(f.Name())
			return nil, fmt.Errorf("cannot create a journal file: fsync of its directory: %w", err)
		}
	}
	return f, nil
}

// closeAndRemove closes and removes an unused, empty journal file.
func closeAndRemove(f *os.File) error {
	cerr := f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return fmt.Errorf("removing an unused journal file: %w", err)
	}
	if cerr != nil {
		return fmt.Errorf("closing an unused journal file: %w", cerr)
	}
	return nil
}

// checkpoint moves the journaled deltas into the bbolt file: it takes
// pending and the last seq, starts a new journal file (when the last
// checkpoint succeeded and the current one holds records), writes them in
// one fsynced bbolt transaction and deletes the older journal files (but
// the one it stopped writing, kept until the next checkpoint). On
// failure the deltas go back to pending and the files stay, for the next
// checkpoint. final (Close) closes the journal and starts none, so that on
// success no journal file remains. Errors are returned, not recorded.
func (s *embedded) checkpoint(final bool) error {
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	dir := filepath.Dir(s.path)
	var errs []error

	s.mu.Lock()
	jf := s.jf
	idle := len(s.pending) == 0 && s.seq == s.applied && len(s.old) == 0 && s.jbroken == nil
	switchTo := s.jk + 1 // s.jk changes only here, under cpMu
	wantSwitch := !final && s.rotate && s.jbroken == nil && s.jsize > 0
	s.mu.Unlock()
	if jf == nil || idle && !final {
		return nil
	}
	// The next journal file is created before the lock is taken: creating
	// a file can wait on the filesystem's journal for milliseconds, and
	// every commit waits on the lock.
	var next *os.File
	if wantSwitch {
		f, err := s.openJournal(switchTo)
		if err != nil {
			errs = append(errs, err) // go on with the current file
		}
		next = f
	}
	s.mu.Lock()
	if s.jbroken != nil {
		if err := s.jf.Truncate(s.jsize); err != nil {
			errs = append(errs, fmt.Errorf("repairing the journal: %w", err))
		} else {
			s.jbroken = nil
			s.publishFailure()
		}
	}
	taken, seq, oldK := s.pending, s.seq, s.jk
	s.pending = make(map[string]int64, len(taken))
	var old journalFile // the file this checkpoint stops writing
	switch {
	case final:
		old, s.jf = s.jf, nil
	case next != nil && s.jbroken == nil:
		old = s.jf
		s.jf, s.jk, s.jsize = next, switchTo, 0
		next = nil
	}
	s.ckpt = taken
	k := s.jk
	write := len(taken) > 0 || seq != s.applied || old != nil
	cur := s.jf
	s.mu.Unlock()
	if next != nil { // not switched to: the journal broke meanwhile
		if err := closeAndRemove(next); err != nil {
			errs = append(errs, err)
		}
	}

	// The file this checkpoint stopped writing is complete: it is made
	// durable before its records go to bbolt, so that an OS crash can tear
	// only the last journal file, which the next open accepts. Without a
	// switch the current file is synced instead: either way, the commits of
	// the last second become durable. The directory is synced for the
	// files created and deleted.
	if s.noSync && !final {
		f := old
		if f == nil {
			f = cur
		}
		if f != nil {
			if err := f.Sync(); err != nil {
				errs = append(errs, fmt.Errorf("fsync of the journal: %w", err))
			}
			if err := syncDir(dir); err != nil {
				errs = append(errs, fmt.Errorf("fsync of the directory: %w", err))
			}
		}
	}

	var err error
	if write {
		err = s.db.Update(func(tx *bolt.Tx) error { return applyCheckpoint(tx, taken, seq, k) })
	}

	var del []uint64
	s.mu.Lock()
	s.ckpt = nil
	if err != nil {
		for id, d := range taken {
			s.pending[id] = money.AddSat(s.pending[id], d)
		}
		if old != nil && !final {
			s.old = append(s.old, oldK)
		}
		s.rotate = false
	} else {
		s.applied, s.rotate = seq, true
		if s.wfail != nil {
			// The bbolt file took every usage the journal could not, and
			// the disk took a write: commits may try the journal again.
			s.setFailed(nil)
		}
		del, s.old = s.old, nil
		switch {
		case old != nil && final:
			del = append(del, oldK)
		case old != nil:
			// Kept until the next checkpoint: the notes of its last
			// commits (their audit lines) must outlive those calls' audit
			// writes, which follow the commit within milliseconds.
			s.old = []uint64{oldK}
		}
	}
	s.mu.Unlock()

	if old != nil {
		if err != nil && s.noSync && final { // the file keeps the only copy of its records
			if serr := old.Sync(); serr != nil {
				errs = append(errs, fmt.Errorf("fsync of the journal: %w", serr))
			}
			if serr := syncDir(dir); serr != nil {
				errs = append(errs, fmt.Errorf("fsync of the directory: %w", serr))
			}
		}
		if cerr := old.Close(); cerr != nil {
			errs = append(errs, fmt.Errorf("closing the journal: %w", cerr))
		}
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("cannot write to the bbolt file: %w", err))
	}
	for i, k := range del {
		if rerr := os.Remove(journalName(s.path, k)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cannot delete an applied journal file: %w", rerr))
			s.mu.Lock()
			s.old = append(s.old, del[i:]...) // retried by the next checkpoint
			s.mu.Unlock()
			break
		}
	}
	if len(errs) > 0 {
		return s.unusable("checkpoint: %v", errors.Join(errs...))
	}
	return nil
}

// maintain checkpoints every second and evicts buckets of past periods
// from memory every minute.
func (s *embedded) maintain() {
	defer s.bg.Done()
	syncT := time.NewTicker(embeddedSyncEvery)
	defer syncT.Stop()
	evictT := time.NewTicker(embeddedEvictEvery)
	defer evictT.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-syncT.C:
			err := s.checkpoint(false)
			if err != nil {
				s.ckptErr.Store(&err)
			}
			s.report(err)
		case now := <-evictT.C:
			s.evict(now.Unix())
		}
	}
}

// report tells warn when checkpoints start failing and when they succeed
// again; maintain's goroutine only.
func (s *embedded) report(err error) {
	failing := err != nil
	if failing == s.failing {
		return
	}
	s.failing = failing
	switch {
	case s.warn == nil:
	case failing:
		s.warn(fmt.Sprintf("checkpoints fail, so commits stay in the journal, which grows, until one succeeds: %v", err))
	default:
		s.warn("checkpoints succeed again: the journal's commits are in the ledger file")
	}
}

// evict forgets cached buckets past their expiry that hold no reservation
// and no delta missing from the bbolt file (pending, or being written by a
// checkpoint): reloading one gives its whole committed total. It forgets
// the per-minute windows idle for windowLife (nothing in them counts any
// more) that hold no reservation.
func (s *embedded) evict(now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, b := range s.buckets {
		if b.reserved != 0 || b.expireAt >= now {
			continue
		}
		if _, ok := s.pending[id]; ok {
			continue
		}
		if _, ok := s.ckpt[id]; ok {
			continue
		}
		delete(s.buckets, id)
	}
	for id, b := range s.windows {
		if b.reserved == 0 && b.expireAt < now {
			delete(s.windows, id)
		}
	}
}
