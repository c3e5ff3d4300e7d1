package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// noteFailed logs the first failure to write a note or rotate the notes
// files since the last success.
func (s *redisStore) noteFailed(err error) {
	if s.noteErr.CompareAndSwap(false, true) {
		s.log.Warn("budget ledger: the audit notes of Redis commits cannot be written on this machine: a crash before a call's audit line is written leaves it without one", "notes", s.local.notesPath(), "error", err.Error())
	}
}

func (s *redisStore) noteOK() {
	if s.noteErr.Load() {
		s.noteErr.Store(false)
	}
}

// handNotes, at open, hands to notes those of the notes files whose
// commits Redis holds (tombstone "c") or the journal holds (it will be
// replayed), then removes the files and opens a new one.
func (s *redisStore) handNotes(ctx context.Context, notes func([][]byte) error) error {
	fail := func(err error) error {
		return fmt.Errorf("%w: redis ledger's notes files %s: %v", ErrUnavailable, s.local.notesPath(), err)
	}
	found, err := s.local.readNotes()
	if err != nil {
		return fail(err)
	}
	if len(found) > 0 && notes != nil {
		journaled := map[string]bool{}
		for _, r := range s.local.pending() {
			journaled[r.ID] = true
		}
		keep := make([]bool, len(found))
		var ask []int // indexes of found only Redis can tell about
		for i, n := range found {
			if journaled[n.id] {
				keep[i] = true
			} else {
				ask = append(ask, i)
			}
		}
		if len(ask) > 0 {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			pipe := s.c.Pipeline()
			gets := make([]*redis.StringCmd, len(ask))
			for j, i := range ask {
				gets[j] = pipe.Get(cctx, keyPrefix+"d:"+found[i].id)
			}
			_, perr := pipe.Exec(cctx)
			cancel()
			if perr != nil && !errors.Is(perr, redis.Nil) {
				s.log.Warn("budget ledger: Redis cannot be asked which of this replica's last commits before it stopped it holds: their audit lines, if they were not written, are not rebuilt", "redis", s.addr, "notes", len(ask), "error", s.fail(ctx, "notes check", perr).Error())
				ask = nil
			}
			for j, i := range ask {
				if v, err := gets[j].Result(); err == nil && v == "c" {
					keep[i] = true
				}
			}
		}
		var kept [][]byte
		for i, n := range found {
			if keep[i] {
				kept = append(kept, n.note)
			}
		}
		if len(kept) > 0 {
			if err := notes(kept); err != nil {
				return fail(fmt.Errorf("the notes of the last commits could not be kept (the files stay): %w", err))
			}
		}
	}
	if err := s.local.openNotes(); err != nil {
		return fail(err)
	}
	return nil
}
