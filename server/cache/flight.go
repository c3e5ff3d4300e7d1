package cache

import (
	"context"
	"sync"
	"time"
)

// passFor is how long a key whose answer could not be stored is not
// coalesced: identical calls whose answers are not storable (tool calls,
// a length stop) then go upstream at once rather than one after the
// other, as Varnish's hit-for-pass.
const passFor = 30 * time.Second

// maxPasses bounds the keys remembered as not storable: past it a key is
// no longer remembered (its callers wait for a leader again).
const maxPasses = 4096

// Flights coalesces identical concurrent misses (request collapsing):
// the first call to miss a key is its leader and goes upstream; the
// calls that miss the same key while it runs wait for it and are
// answered by what it stored, or go upstream themselves once it ends
// without storing. The zero value is ready to use; it is safe for
// concurrent use.
type Flights struct {
	mu     sync.Mutex
	flying map[StoreKey]*Flight
	passed map[StoreKey]time.Time // keys whose answer could not be stored, until when
}

// Flight is one leader's fill of a key, from [Flights.Join] to its Land
// Pass or Abandon (whichever comes first: the rest do nothing).
type Flight struct {
	fs    *Flights
	key   StoreKey
	done  chan struct{}
	once  sync.Once
	entry *Entry // set before done is closed; nil when abandoned
}

// Join reports how a call that missed k goes on: as the leader of k's
// fill (f, true: it must Land, Pass or Abandon f once its call ends), as
// a follower (f, false: it waits with [Flight.Wait]), or, when k's last
// leader's answer could not be stored less than 30 s ago, alone (nil, false: it goes
// upstream without waiting and fills nothing for others).
func (fs *Flights) Join(k StoreKey) (f *Flight, leader bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.flying[k]; f != nil {
		return f, false
	}
	if until, ok := fs.passed[k]; ok {
		if time.Now().Before(until) {
			return nil, false
		}
		delete(fs.passed, k)
	}
	if fs.flying == nil {
		fs.flying = map[StoreKey]*Flight{}
	}
	f = &Flight{fs: fs, key: k, done: make(chan struct{})}
	fs.flying[k] = f
	return f, true
}

// Wait waits for f's leader to end, or for ctx to be done: the entry the
// leader stored, or false (it stored nothing, or ctx ended first).
func (f *Flight) Wait(ctx context.Context) (*Entry, bool) {
	select {
	case <-f.done:
		return f.entry, f.entry != nil
	case <-ctx.Done():
		return nil, false
	}
}

// Land ends f with e, the entry its leader stored: its followers are
// answered by e.
func (f *Flight) Land(e *Entry) { f.end(e, false) }

// Abandon ends f with nothing stored, because its leader failed (its
// client left, a refusal, an upstream error): its followers go upstream
// themselves, and the next miss of the key leads again.
func (f *Flight) Abandon() { f.end(nil, false) }

// Pass ends f with nothing stored, because its leader's answer, complete,
// may not be stored (a tool call, a length stop, a redaction, too big):
// its followers go upstream, and the key is not coalesced for 30 s.
func (f *Flight) Pass() { f.end(nil, true) }

func (f *Flight) end(e *Entry, pass bool) {
	if f == nil {
		return
	}
	f.once.Do(func() {
		fs := f.fs
		fs.mu.Lock()
		delete(fs.flying, f.key)
		if pass && len(fs.passed) < maxPasses {
			if fs.passed == nil {
				fs.passed = map[StoreKey]time.Time{}
			}
			fs.passed[f.key] = time.Now().Add(passFor)
		}
		fs.mu.Unlock()
		f.entry = e
		close(f.done)
	})
}

// Sweep forgets the keys whose not-storable mark has expired; it returns
// how many.
func (fs *Flights) Sweep() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, now := 0, time.Now()
	for k, until := range fs.passed {
		if !now.Before(until) {
			delete(fs.passed, k)
			n++
		}
	}
	return n
}
