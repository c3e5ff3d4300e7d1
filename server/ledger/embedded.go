package ledger

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
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

var (
	boltCommitted = []byte("committed") // bucket id → committed total, 8 bytes big-endian
	boltMeta      = []byte("meta")
	// metaAppliedSeq is the seq of the last journal record whose amounts the
	// committed totals include (8 bytes big-endian, absent = 0).
	metaAppliedSeq = []byte("applied_seq")
	// metaJournalK is the number of the newest journal file when the file
	// was last written, so that journal numbers never go back even when
	// every journal file was deleted.
	metaJournalK = []byte("journal_k")
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

// WithNote returns ctx carrying note, for [Ledger.Commit]: with the
// embedded store, note is called once per commit that charges anything,
// before the store's lock is taken, and what it returns (at most 8 KiB;
// longer, or nil, journals none) is written in the commit's journal
// record, in the same write(2), so that it survives whatever kills the
// process after the commit; the bytes are copied, not kept once Commit
// returns. A later open hands the notes of the records
// still in the journal to [EmbeddedOptions.Notes]. The gateway's note is
// the call's audit line, so that a crash between the commit and the
// audit write loses neither. The Redis store with local files
// ([RedisOptions.Path]) writes the note, under the commit's id, in its
// notes file before the commit runs in Redis, and hands those of the
// commits Redis holds to [RedisOptions.Notes] at its next open; without
// local files it ignores notes.
func WithNote(ctx context.Context, note func() []byte) context.Context {
	return context.WithValue(ctx, noteKey{}, note)
}

type noteKey struct{}

// noteOf calls the note ctx carries; nil when none.
func noteOf(ctx context.Context) []byte {
	f, _ := ctx.Value(noteKey{}).(func() []byte)
	if f == nil {
		return nil
	}
	n := f()
	if len(n) > maxNote {
		return nil
	}
	return n
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

// openBolt opens the bbolt file. A damaged file can make bbolt panic:
// that is turned into an error; a truncated one, which would fault on its
// memory map in a goroutine of bbolt's own, is refused first (checkLength).
func openBolt(path string) (db *bolt.DB, err error) {
	if err := checkLength(path); err != nil {
		return nil, err
	}
	err = guard(func() error {
		db, err = bolt.Open(path, 0o600, &bolt.Options{
			Timeout:        embeddedLockWait,
			NoFreelistSync: true,
			FreelistType:   bolt.FreelistMapType,
		})
		return err
	})
	return db, err
}

// checkLength refuses a bbolt file shorter than its meta pages say it is
// (the high-water page id times the page size, bbolt's file format: magic at
// byte 16 of each meta page, page size at 24, high-water page id at 56). A
// missing or new file passes.
func checkLength(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	// meta reads the meta page at off: its page size and the bytes its
	// pages need; ok false when it is not a meta page.
	meta := func(off int64) (pageSize, need uint64, ok bool) {
		var hdr [64]byte
		if n, _ := f.ReadAt(hdr[:], off); n < len(hdr) || binary.LittleEndian.Uint32(hdr[16:]) != 0xED0CDAED {
			return 0, 0, false
		}
		pageSize = uint64(binary.LittleEndian.Uint32(hdr[24:]))
		return pageSize, binary.LittleEndian.Uint64(hdr[56:]) * pageSize, true
	}
	pageSize, need, ok := meta(0)
	if !ok || pageSize == 0 || pageSize > 1<<20 {
		return nil // bbolt says what is wrong
	}
	if _, n, ok := meta(int64(pageSize)); ok {
		need = max(need, n)
	}
	if need > uint64(st.Size()) {
		return fmt.Errorf("the ledger file is truncated (%d bytes, its pages need %d): restore it from a copy", st.Size(), need)
	}
	return nil
}

// guard runs f, turning a panic or a memory fault (a damaged bbolt file)
// into an error saying the file is damaged.
func guard(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the ledger file is damaged (%v): restore it from a copy", r)
		}
	}()
	return f()
}

// recover replays the journal files into the bbolt file (the records it
// does not hold yet: seq > applied_seq), deletes them and starts a new one.
func (s *embedded) recover() error {
	var applied, lastK uint64
	err := s.db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(boltCommitted); err != nil {
			return err
		}
		m, err := tx.CreateBucketIfNotExists(boltMeta)
		if err != nil {
			return err
		}
		applied, lastK = getUint64(m, metaAppliedSeq), getUint64(m, metaJournalK)
		return nil
	})
	if err != nil {
		return s.unusable("cannot initialise: %v", err)
	}
	ks, err := journalFiles(s.path)
	if err != nil {
		return s.unusable("cannot list the journal files: %v", err)
	}
	deltas := make(map[string]int64)
	var notes [][]byte
	var last uint64 // seq of the last record read
	for i, k := range ks {
		if last, err = s.replay(journalName(s.path, k), i == len(ks)-1, applied, last, deltas, &notes); err != nil {
			return err
		}
		lastK = max(lastK, k)
	}
	seq, k := max(applied, last), lastK+1
	if err := s.db.Update(func(tx *bolt.Tx) error { return applyCheckpoint(tx, deltas, seq, k) }); err != nil {
		return s.unusable("cannot write the replayed journal: %v", err)
	}
	if len(notes) > 0 && s.onNotes != nil {
		// The journal files are the notes' only copy: they are deleted
		// only once the notes are kept.
		if err := s.onNotes(notes); err != nil {
			return s.unusable("the notes of the journal's commits could not be kept (the journal files stay): %v", err)
		}
	}
	for _, k := range ks {
		if err := os.Remove(journalName(s.path, k)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.old = append(s.old, k) // the next checkpoint retries
		}
	}
	f, err := s.openJournal(k)
	if err != nil {
		return s.unusable("%v", err)
	}
	s.jf, s.jk, s.seq, s.applied = f, k, seq, seq
	return nil
}

// replay adds to deltas the records of the journal file name with seq >
// applied, and to notes the notes of all its records, checking that seqs
// increase from after (the previous file's last). A corrupt or incomplete record ends the last file (torn by a
// crash: the file is truncated before it, and anything after it is taken
// for garbage the crash left); elsewhere it is an error: a file followed by
// another was fsynced before the next one got records.
func (s *embedded) replay(name string, lastFile bool, applied, after uint64, deltas map[string]int64, notes *[][]byte) (uint64, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return 0, s.unusable("cannot open the journal %s: %v", name, err)
	}
	defer f.Close()
	jr := newJournalReader(f)
	for {
		rec, ok := jr.next()
		if !ok {
			break
		}
		if rec.seq <= after {
			return 0, s.unusable("journal %s: record %d follows record %d", name, rec.seq, after)
		}
		// Records are numbered without gaps, and the ledger file holds every
		// record before the journal's first: a gap means lost records (a
		// ledger file restored from an older copy, a journal file removed).
		if after != 0 && rec.seq != after+1 || after == 0 && rec.seq > applied+1 {
			prev := max(after, applied)
			return 0, s.unusable("journal %s: record %d follows record %d: the records in between are missing (was the ledger file restored from an older copy, or a journal file removed?); restore them, or remove the journal files to accept the loss", name, rec.seq, prev)
		}
		after = rec.seq
		if rec.note != nil {
			*notes = append(*notes, rec.note)
		}
		if rec.seq <= applied {
			continue // already in the bbolt file: a crash before its journal was deleted
		}
		for _, d := range rec.deltas {
			deltas[d.bucket] = satAdd(deltas[d.bucket], d.delta)
		}
	}
	if jr.err != nil {
		return 0, s.unusable("cannot read the journal %s: %v", name, jr.err)
	}
	good, clean := jr.end()
	if clean {
		return after, nil
	}
	if !lastFile {
		return 0, s.unusable("the journal %s is corrupt at offset %d (not the last journal file, so not a torn write)", name, good)
	}
	// A torn end is garbage to the end of the file; a good record after
	// the bad bytes means they are corruption, and dropping the records
	// after them would lose usage.
	if _, err := f.Seek(good+1, io.SeekStart); err != nil {
		return 0, s.unusable("cannot read the journal %s: %v", name, err)
	}
	rest, err := io.ReadAll(io.LimitReader(f, 8<<20))
	if err != nil {
		return 0, s.unusable("cannot read the journal %s: %v", name, err)
	}
	if recordAfter(rest, after) {
		return 0, s.unusable("the journal %s is corrupt at offset %d: good records follow the bad bytes, so they are not a torn write; restore the file, or truncate it at that offset to drop every record after it", name, good)
	}
	if err := f.Truncate(good); err != nil {
		return 0, s.unusable("cannot truncate the torn end of the journal %s: %v", name, err)
	}
	if s.warn != nil {
		s.warn(fmt.Sprintf("dropped the torn end of the journal %s at offset %d (a record cut by a crash)", name, good))
	}
	if err := f.Sync(); err != nil {
		return 0, s.unusable("cannot truncate the torn end of the journal %s: %v", name, err)
	}
	return after, nil
}

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

// applyCheckpoint adds deltas to the committed totals and records seq as
// applied and k as the newest journal file, in tx.
func applyCheckpoint(tx *bolt.Tx, deltas map[string]int64, seq, k uint64) error {
	bk := tx.Bucket(boltCommitted)
	for id, d := range deltas {
		key := []byte(id)
		var cur int64
		if v := bk.Get(key); len(v) == 8 {
			cur = int64(binary.BigEndian.Uint64(v))
		}
		if err := bk.Put(key, binary.BigEndian.AppendUint64(nil, uint64(satAdd(cur, d)))); err != nil {
			return err
		}
	}
	m := tx.Bucket(boltMeta)
	if err := m.Put(metaAppliedSeq, binary.BigEndian.AppendUint64(nil, seq)); err != nil {
		return err
	}
	return m.Put(metaJournalK, binary.BigEndian.AppendUint64(nil, k))
}

func getUint64(b *bolt.Bucket, key []byte) uint64 {
	if v := b.Get(key); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
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
	expireAt            int64 // unix seconds; 0 = unknown
}

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
	r := &eres{id: id, deadline: deadline.UnixNano(), lines: make([]eline, len(lines))}
	for i, l := range lines {
		b, err := s.bucket(l.bucket, l.expireAt)
		if err != nil {
			return 0, balance{}, err
		}
		used := satAdd(b.committed, b.reserved)
		if l.limit >= 0 && satAdd(used, l.amount) > l.limit {
			return i, balance{committed: b.committed, reserved: b.reserved}, nil
		}
		r.lines[i] = eline{b: b, amount: l.amount}
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
	type held struct{ deadline, amount int64 }
	var hs []held
	for _, r := range s.res {
		for _, l := range r.lines {
			if l.b == b && l.amount > 0 {
				hs = append(hs, held{r.deadline, l.amount})
			}
		}
	}
	slices.SortFunc(hs, func(x, y held) int { return cmp.Compare(x.deadline, y.deadline) })
	var freed int64
	for _, h := range hs {
		if freed = satAdd(freed, h.amount); freed >= need {
			return time.Unix(0, h.deadline), nil
		}
	}
	return time.Time{}, nil
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
		if l.amount != 0 {
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
		if l.amount != 0 {
			bs[i].committed = satAdd(bs[i].committed, l.amount)
			s.pending[l.bucket] = satAdd(s.pending[l.bucket], l.amount)
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
			s.pending[id] = satAdd(s.pending[id], d)
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
// checkpoint): reloading one gives its whole committed total.
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
		b, err := s.bucket(id, 0)
		if err != nil {
			return nil, err
		}
		out[i] = balance{committed: b.committed, reserved: b.reserved}
	}
	return out, nil
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
