package ledger

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flexway/flexway/server/money"
)

// bucket returns the cached bucket, loading it from the file. Called with
// mu held.
func (s *embedded) bucket(id string, expireAt int64) (*ebucket, error) {
	if b, ok := s.buckets[id]; ok {
		if expireAt > b.expireAt {
			b.expireAt = expireAt
		}
		return b, nil
	}
	b := &ebucket{expireAt: expireAt}
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(boltCommitted).Get([]byte(id)); len(v) == 8 {
			b.committed = int64(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	if err != nil {
		return nil, s.unusable("cannot read: %v", err)
	}
	s.buckets[id] = b
	return b, nil
}

// window returns the per-minute window id, creating it. Called with mu
// held.
func (s *embedded) window(id string, expireAt int64) *ebucket {
	b, ok := s.windows[id]
	if !ok {
		b = &ebucket{win: &window{}}
		s.windows[id] = b
	}
	b.expireAt = max(b.expireAt, expireAt)
	return b
}

// sweep drops reservations whose deadline is at or before now. Called with
// mu held.
func (s *embedded) sweep(now time.Time) {
	n := now.UnixNano()
	for len(s.expiry) > 0 && s.expiry[0].deadline <= n {
		r := heap.Pop(&s.expiry).(*eres)
		s.drop(r)
	}
}

// drop returns a reservation's amounts (it is already out of the heap).
func (s *embedded) drop(r *eres) {
	delete(s.res, r.id)
	for _, l := range r.lines {
		l.b.reserved -= l.amount
	}
}

func (s *embedded) reserve(_ context.Context, id string, lines []line, now, deadline time.Time) (int, balance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, balance{}, s.unusable("closed")
	}
	if err := s.failure(); err != nil {
		return 0, balance{}, s.refusing(err)
	}
	s.sweep(now)
	sec := now.Unix()
	r := &eres{id: id, deadline: deadline.UnixNano(), lines: make([]eline, len(lines))}
	refused, rbal := -1, balance{}
	for i := range lines {
		l := &lines[i]
		var b *ebucket
		committed := int64(0)
		if l.slot != 0 {
			b = s.window(l.bucket, l.expireAt)
			committed = b.win.used(sec)
		} else {
			var err error
			if b, err = s.bucket(l.bucket, l.expireAt); err != nil {
				return 0, balance{}, err
			}
			committed = b.committed
		}
		used := money.AddSat(committed, b.reserved)
		if l.slot != 0 {
			l.used = used
		}
		if refused < 0 && l.limit >= 0 && money.AddSat(used, l.amount) > l.limit {
			refused, rbal = i, balance{committed: committed, reserved: b.reserved}
		}
		r.lines[i] = eline{b: b, amount: l.amount}
	}
	if refused >= 0 {
		return refused, rbal, nil
	}
	for _, l := range r.lines {
		l.b.reserved += l.amount
	}
	s.res[id] = r
	heap.Push(&s.expiry, r)
	return -1, balance{}, nil
}

// renew implements Store: the leases of the reservations still held move
// to deadline. (A crash frees every reservation here anyway: they live in
// this process's memory; the lease bounds a call that never settles.)
func (s *embedded) renew(_ context.Context, leases []lease, now, deadline time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.unusable("closed")
	}
	s.sweep(now)
	for _, l := range leases {
		if r, ok := s.res[l.id]; ok {
			r.deadline = deadline.UnixNano()
			heap.Fix(&s.expiry, r.index)
		}
	}
	return nil
}

// leaseEnd implements Store, from the reservations in memory (only on a
// refusal's path: it looks at every reservation held).
func (s *embedded) leaseEnd(_ context.Context, bucket string, need int64, now time.Time) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return time.Time{}, s.unusable("closed")
	}
	s.sweep(now)
	b, ok := s.buckets[bucket]
	if !ok {
		return time.Time{}, nil
	}
	return whenFreed(s.holds(b, nil, 0), need), nil
}

// freeing is an amount that leaves a bucket at a time (unix nanoseconds):
// a reservation's hold at its lease's end, a window slot's amount when it
// ages out.
type freeing struct{ at, amount int64 }

// holds appends to fs the holds on b of the reservations in memory, each
// freed at its deadline; with ttl > 0 (b is a per-minute window) at the
// latest of its deadline and the end of its commit's slot, as
// [Store.windowFree] says. Called with mu held.
func (s *embedded) holds(b *ebucket, fs []freeing, ttl time.Duration) []freeing {
	for _, r := range s.res {
		for _, l := range r.lines {
			if l.b == b && l.amount > 0 {
				fs = append(fs, freeing{holdEnd(r.deadline, ttl), l.amount})
			}
		}
	}
	return fs
}

// holdEnd is when a hold with lease deadline (unix nanoseconds) leaves a
// bucket: at the deadline, or for a per-minute window's (ttl > 0) at the
// latest of it and the end of the slot of its birth second (deadline -
// ttl), where a commit would count it for 61 s.
func holdEnd(deadline int64, ttl time.Duration) int64 {
	if ttl <= 0 {
		return deadline
	}
	born := time.Unix(0, deadline-int64(ttl)).Unix()
	return max(deadline, time.Unix(born+windowSlots, 0).UnixNano())
}

// whenFreed returns the earliest time at which fs (in any order) free need
// in total, the zero time when they free less.
func whenFreed(fs []freeing, need int64) time.Time {
	slices.SortFunc(fs, func(x, y freeing) int { return cmp.Compare(x.at, y.at) })
	var freed int64
	for _, f := range fs {
		if freed = money.AddSat(freed, f.amount); freed >= need {
			return time.Unix(0, f.at)
		}
	}
	return time.Time{}
}

// windowFree implements Store, from the window's slots and the
// reservations in memory (only on a refusal's path: it looks at every
// reservation held).
func (s *embedded) windowFree(_ context.Context, bucket string, need int64, now time.Time, ttl time.Duration) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return time.Time{}, s.unusable("closed")
	}
	s.sweep(now)
	b, ok := s.windows[bucket]
	if !ok {
		return time.Time{}, nil
	}
	var fs []freeing
	b.win.advance(now.Unix())
	for _, sl := range b.win.slots {
		if sl.amount > 0 {
			fs = append(fs, freeing{time.Unix(sl.sec+windowSlots, 0).UnixNano(), sl.amount})
		}
	}
	return whenFreed(s.holds(b, fs, ttl), need), nil
}

func (s *embedded) release(_ context.Context, id string, _ []line, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.unusable("closed")
	}
	if r, ok := s.res[id]; ok {
		heap.Remove(&s.expiry, r.index)
		s.drop(r)
	}
	s.sweep(now)
	return nil
}

// commit appends the commit's record to the journal, then applies it to the
// cache and to pending. When the journal cannot be written (now, or since
// an earlier failure) the usage is applied all the same and the error
// wraps ErrNotDurable; see the type's doc.
func (s *embedded) commit(ctx context.Context, id string, lines []line, _ time.Time) error {
	var note []byte
	for _, l := range lines {
		if l.amount != 0 && l.slot == 0 {
			note = noteOf(ctx) // outside the lock: it builds an audit line
			break
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.unusable("closed")
	}
	var arr [8]*ebucket
	bs := arr[:0]
	s.jdel = s.jdel[:0]
	for _, l := range lines {
		if l.slot != 0 {
			bs = append(bs, s.windows[l.bucket]) // nil once evicted: its slot aged out
			continue
		}
		b, err := s.bucket(l.bucket, l.expireAt)
		if err != nil {
			return err
		}
		bs = append(bs, b)
		if l.amount != 0 {
			s.jdel = append(s.jdel, jdelta{bucket: l.bucket, delta: l.amount})
		}
	}
	var werr error
	if len(s.jdel) > 0 {
		if werr = s.failure(); werr == nil {
			s.jbuf = appendRecord(s.jbuf[:0], s.seq+1, s.jdel, note)
			if werr = s.appendJournal(s.jbuf); werr == nil {
				s.seq++
			} else {
				s.setFailed(werr)
			}
		}
		clear(s.jdel) // keep no bucket ids alive
	}
	if r, ok := s.res[id]; ok {
		heap.Remove(&s.expiry, r.index)
		s.drop(r)
	}
	for i, l := range lines {
		if l.slot != 0 {
			if b := bs[i]; b != nil && l.amount != 0 {
				b.win.add(l.slot, l.amount)
				b.expireAt = max(b.expireAt, l.expireAt)
			}
			continue
		}
		if l.amount != 0 {
			bs[i].committed = money.AddSat(bs[i].committed, l.amount)
			s.pending[l.bucket] = money.AddSat(s.pending[l.bucket], l.amount)
		}
	}
	if werr != nil {
		return fmt.Errorf("%w: %w: embedded ledger %s: the journal cannot be written (%v); the usage is kept by this process and written at the next checkpoint that can write; metered calls are refused until then",
			ErrUnavailable, ErrNotDurable, s.path, werr)
	}
	return nil
}

// appendJournal writes rec to the current journal file with one write(2),
// and fsyncs it when noSync is false (fsync: package os has no fdatasync,
// which would have to write the grown size anyway). On failure the file is
// truncated back to its size before the write; when that fails too, the
// journal is broken. Called with mu held.
func (s *embedded) appendJournal(rec []byte) error {
	n, err := s.jf.Write(rec)
	if err == nil && !s.noSync {
		err = s.jf.Sync()
	}
	if err == nil {
		s.jsize += int64(n)
		return nil
	}
	if n > 0 {
		if terr := s.jf.Truncate(s.jsize); terr != nil {
			s.jbroken = fmt.Errorf("%s: a partial record could not be truncated away: %w", journalName(s.path, s.jk), terr)
			s.publishFailure()
		}
	}
	return err
}

func (s *embedded) balances(_ context.Context, ids []string, now time.Time) ([]balance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, s.unusable("closed")
	}
	s.sweep(now)
	out := make([]balance, len(ids))
	for i, id := range ids {
		if isWindowBucket(id) {
			if b, ok := s.windows[id]; ok {
				out[i] = balance{committed: b.win.used(now.Unix()), reserved: b.reserved}
			}
			continue
		}
		b, err := s.bucket(id, 0)
		if err != nil {
			return nil, err
		}
		out[i] = balance{committed: b.committed, reserved: b.reserved}
	}
	return out, nil
}

// resHeap orders reservations by deadline.
type resHeap []*eres

// Len implements heap.Interface.
func (h resHeap) Len() int { return len(h) }

// Less implements heap.Interface: the earlier deadline first.
func (h resHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }

// Swap implements heap.Interface, keeping each reservation's index.
func (h resHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

// Push implements heap.Interface.
func (h *resHeap) Push(x any) {
	r := x.(*eres)
	r.index = len(*h)
	*h = append(*h, r)
}

// Pop implements heap.Interface.
func (h *resHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	r.index = -1
	return r
}

// ping implements Store: the ledger is usable until Close, except while
// its journal cannot be written.
func (s *embedded) ping(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.unusable("closed")
	}
	if err := s.failure(); err != nil {
		return s.refusing(err)
	}
	return nil
}
