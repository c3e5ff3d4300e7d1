package ledger

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Embedded store durability. A commit appends one record of its amounts to
// the current journal file, next to the bbolt file, with one write(2)
// before it returns: the record is then in the OS page cache, so a kill -9
// of the process loses nothing committed (the next open replays the
// journal). Every embeddedSyncEvery in which something was committed, a
// checkpoint fsyncs the journal, starts a new journal file, writes the
// journaled amounts to the bbolt file in one fsynced transaction and then
// deletes the older journal files but the one it just stopped writing,
// which the next checkpoint deletes (so that the notes of its records,
// the calls' audit lines, outlive the audit's own writes by a second);
// Close does a last one, after which no journal file remains. An OS crash or power loss can therefore lose the
// commits of about the last second (those fsynced in neither file); a
// record torn by it at the end of the journal is dropped at the next open.
// The commit path costs a write(2) (about 2 µs) instead of a bbolt
// transaction: BenchmarkEmbeddedReserveCommitSerial went from 19-24 µs per
// reserve+commit pair to 7-8 µs (the store's commit about 3.5 µs of it).
// An fsync per record (openEmbedded(path, false)) would queue every commit
// behind the disk: BenchmarkEmbeddedReserveCommitFsync does about 2,000
// pairs/s at concurrency 64 on 2 cores.
const (
	embeddedSyncEvery  = time.Second
	embeddedEvictEvery = time.Minute
	embeddedLockWait   = time.Second
)

// OpenEmbedded opens (creating it and its parent directory if needed) the
// embedded ledger file at path, a bbolt database owned by this process,
// and its journal files path.journal.<16 hex digits>.
//
// Committed totals are persisted; reservations live in memory only, so they
// die with the process and a crash strands no budget. Each commit is
// appended to the journal before [Ledger.Commit] returns, so it survives
// kill -9; once a second the journaled commits are fsynced and moved into
// the bbolt file, and at Close all of them are (no journal file then
// remains), so an OS crash or power loss can lose up to the last second of
// commits. Opening replays the journal files left by a crash.
//
// When another process holds the file, OpenEmbedded gives up after one
// second with an error naming the path and wrapping [ErrUnavailable]; other
// failures (directory not creatable, file not a ledger, a journal file
// corrupt other than by a torn last record) also wrap ErrUnavailable.
func OpenEmbedded(path string) (Store, error) {
	return openEmbedded(path, true)
}

// EmbeddedOptions are the options of [OpenEmbeddedWithOptions].
type EmbeddedOptions struct {
	// Warn, when set, is told (in a sentence, from a background goroutine)
	// when a checkpoint starts failing — commits then stay in the journal,
	// which grows, until one succeeds — and when one succeeds again, and
	// at open when a torn record at the end of the journal was dropped.
	Warn func(msg string)
	// Notes, when set, is given at open the notes ([WithNote]) of the
	// commits the journal files left by the previous process hold, in
	// commit order — every commit of at least its last second, the
	// records already in the ledger file included — after their amounts
	// are in the ledger file and before the journal files are deleted.
	// It returns an error when it could not keep them (the gateway
	// rebuilds from them the audit lines a crash lost); the open then
	// fails, and the journal files stay for the next one. Not called when
	// no note was found.
	Notes func(notes [][]byte) error
}

// OpenEmbeddedWithOptions is [OpenEmbedded] with options.
func OpenEmbeddedWithOptions(path string, o EmbeddedOptions) (Store, error) {
	s, err := openEmbeddedFull(path, true, true, o.Warn, o.Notes)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// openEmbedded opens the store; noSync false fsyncs the journal after every
// record, inside commit (the alternative not taken, for the benchmark).
func openEmbedded(path string, noSync bool) (*embedded, error) {
	return openEmbeddedWith(path, noSync, true, nil)
}

// openEmbeddedWith opens the store, starting the goroutine that checkpoints
// every second and evicts every minute only when background is true (tests
// call checkpoint and evict themselves).
func openEmbeddedWith(path string, noSync, background bool, warn func(string)) (*embedded, error) {
	return openEmbeddedFull(path, noSync, background, warn, nil)
}

// openEmbeddedFull is openEmbeddedWith with the receiver of the notes
// found at open (see EmbeddedOptions.Notes).
func openEmbeddedFull(path string, noSync, background bool, warn func(string), notes func([][]byte) error) (*embedded, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("%w: cannot create the directory of the embedded ledger %s: %w", ErrUnavailable, path, err)
	}
	db, err := openBolt(path)
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: the embedded ledger %s is locked by another process (is another flexway running on it?)", ErrUnavailable, path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: cannot open the embedded ledger %s: %w", ErrUnavailable, path, err)
	}
	s := &embedded{
		path:    path,
		db:      db,
		noSync:  noSync,
		warn:    warn,
		onNotes: notes,
		buckets: make(map[string]*ebucket),
		windows: make(map[string]*ebucket),
		res:     make(map[string]*eres),
		pending: make(map[string]int64),
		rotate:  true,
		stop:    make(chan struct{}),
	}
	if err := guard(s.recover); err != nil {
		db.Close()
		return nil, s.unusable("%v", err)
	}
	if background {
		s.bg.Add(1)
		go s.maintain()
	}
	return s, nil
}

// embedded is the bbolt-backed Store, with a journal in front of it.
//
// The in-memory bucket cache is authoritative for reads: this process owns
// the file (flock). Under mu, a commit appends its record to the current
// journal file (nothing else changes when that fails), then adds its
// amounts to the cache and to pending, the deltas journaled but not yet in
// the bbolt file. A checkpoint takes pending (as ckpt while it writes it)
// and the seq of the last record, and starts a new journal file; then,
// outside mu, it writes the deltas and that seq to the bbolt file in one
// transaction, and deletes the older journal files. When that fails the
// deltas go back to pending and the files stay. A bucket is loaded from
// the bbolt file only when not cached, and evicted only when no delta of
// it is in pending or ckpt, so the file then holds its whole total.
//
// When a journal write fails (a full or unwritable disk), the commit's
// usage is still counted in the cache and in pending, so the process keeps
// it and the next checkpoint that can write puts it in the bbolt file; the
// commit returns ErrNotDurable. From then until such a checkpoint, new
// reservations and ping are refused (ErrUnavailable): no call is served
// that could not be recorded, and /readyz says so.
//
// A write to the journal that fails after writing part of a record is
// undone by truncating the file back to jsize. When even that fails the
// journal is broken: commits are refused until a checkpoint manages the
// truncation, and the broken file is never followed by another, so that if
// the process dies first, the partial record is the torn end of the last
// journal file, which the next open drops.
type embedded struct {
	path    string
	db      *bolt.DB
	noSync  bool // false: fsync the journal after every record
	warn    func(string)
	onNotes func([][]byte) error // EmbeddedOptions.Notes

	mu      sync.Mutex
	closed  bool
	buckets map[string]*ebucket
	windows map[string]*ebucket // per-minute windows: in memory only, never journaled
	res     map[string]*eres
	expiry  resHeap
	jf      journalFile      // current journal file; nil after the final checkpoint
	jk      uint64           // its number
	jsize   int64            // its size: the end of its last record
	jbroken error            // a partial record could not be truncated away
	wfail   error            // a journal write failed: see failure
	seq     uint64           // seq of the last record written
	applied uint64           // seq of the last record in the bbolt file
	pending map[string]int64 // journaled deltas not yet in the bbolt file
	ckpt    map[string]int64 // deltas being written by the checkpoint in progress
	old     []uint64         // journal files older than jk to delete once a checkpoint succeeds
	rotate  bool             // the next checkpoint starts a new journal file: the last one succeeded
	jbuf    []byte           // a commit's record
	jdel    []jdelta         // a commit's deltas

	cpMu sync.Mutex // one checkpoint at a time

	stop      chan struct{}
	bg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
	ckptErr   atomic.Pointer[error] // a background checkpoint's failure, reported by Close
	failing   bool                  // the last background checkpoint failed; maintain's only
	failed    atomic.Pointer[error] // failure(), readable without mu (writable)
}

type ebucket struct {
	committed, reserved int64
	expireAt            int64   // unix seconds; 0 = unknown
	win                 *window // a per-minute window's slots (committed unused); nil for a period's bucket
}

// windowSlots is the number of one-second slots of a per-minute window:
// an amount of second s counts while now < s+61, so that no 60-second
// span holds more than the cap whatever the fraction of the seconds.
const windowSlots = 61

// window is a per-minute window's committed amounts, a ring of
// windowSlots one-second slots with their running sum. It lives in the
// embedded store's memory only: a restart forgets the last minute (the
// day and month caps are durable), which costs no write per commit.
type window struct {
	last  int64 // the latest second advanced to (unix s): slots hold seconds in [last-60, last]
	sum   int64 // the slots' total
	slots [windowSlots]wslot
}

type wslot struct{ sec, amount int64 }

// advance moves the window to second sec, dropping the slots that aged out
// (nothing when sec is not after last: a clock that went back keeps
// counting them).
func (w *window) advance(sec int64) {
	if sec <= w.last {
		return
	}
	if sec-w.last >= windowSlots {
		w.slots, w.sum = [windowSlots]wslot{}, 0
	} else {
		for t := w.last + 1; t <= sec; t++ {
			sl := &w.slots[t%windowSlots]
			w.sum -= sl.amount
			*sl = wslot{}
		}
	}
	w.last = sec
}

// used returns the live slots' total at second now.
func (w *window) used(now int64) int64 {
	w.advance(now)
	return w.sum
}

// add counts amount in the slot of second sec, unless sec aged out of the
// window already.
func (w *window) add(sec, amount int64) {
	w.advance(sec)
	if sec < w.last-(windowSlots-1) {
		return
	}
	sl := &w.slots[sec%windowSlots]
	if sl.sec != sec {
		w.sum -= sl.amount
		*sl = wslot{sec: sec}
	}
	// A slot holds at most maxSlotAmount, so that the sum of every slot
	// never overflows and taking an aged slot out of it is exact (a
	// saturated sum would drop below what the live slots hold). Any cap
	// below it is passed by a full slot all the same.
	amount = min(max(amount, 0), maxSlotAmount-sl.amount)
	sl.amount += amount
	w.sum += amount
}

// maxSlotAmount bounds one window slot's amount (about 7.6e16 tokens):
// windowSlots of them sum below math.MaxInt64.
const maxSlotAmount = math.MaxInt64 / (2 * windowSlots)

type eres struct {
	id       string
	deadline int64 // unix nanoseconds
	lines    []eline
	index    int // in the heap
}

type eline struct {
	b      *ebucket
	amount int64
}

func (s *embedded) unusable(format string, args ...any) error {
	return fmt.Errorf("%w: embedded ledger %s: %s", ErrUnavailable, s.path, fmt.Sprintf(format, args...))
}

// failure is why the journal cannot take records now, nil when it can.
// Called with mu held; setFailed publishes it for writable.
func (s *embedded) failure() error {
	if s.jbroken != nil {
		return s.jbroken
	}
	return s.wfail
}

// setFailed records a failed journal write (nil: the ledger can write
// again). Called with mu held.
func (s *embedded) setFailed(err error) {
	s.wfail = err
	s.publishFailure()
}

// publishFailure makes failure() visible to writable. Called with mu held.
func (s *embedded) publishFailure() {
	if err := s.failure(); err != nil {
		s.failed.Store(&err)
	} else {
		s.failed.Store(nil)
	}
}

// refusing is the error for a reservation while the journal cannot be
// written.
func (s *embedded) refusing(err error) error {
	return s.unusable("it cannot be written (%v): metered calls are refused until it can", err)
}

// writable implements Store.
func (s *embedded) writable() error {
	if p := s.failed.Load(); p != nil {
		return s.refusing(*p)
	}
	return nil
}

// Close refuses further calls, stops the background goroutine, does a
// final checkpoint (after which the bbolt file alone holds every commit and
// no journal file remains; when it fails, the journal files stay for the
// next open to replay) and closes the file. It reports a failure of an
// earlier checkpoint too, as a sign of a failing disk, though no commit was
// lost by it when the final one succeeded.
func (s *embedded) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true // no commit is in progress: commits run under mu
		s.mu.Unlock()
		close(s.stop)
		s.bg.Wait()
		var errs []error
		if p := s.ckptErr.Load(); p != nil {
			errs = append(errs, fmt.Errorf("a checkpoint failed earlier: %w", *p))
		}
		if err := s.checkpoint(true); err != nil {
			errs = append(errs, err)
		}
		if err := s.db.Close(); err != nil {
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			s.closeErr = fmt.Errorf("budget: closing the embedded ledger %s: %w", s.path, errors.Join(errs...))
		}
	})
	return s.closeErr
}
