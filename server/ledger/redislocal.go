package ledger

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// A Redis replica's own files (see [RedisOptions.Path]): the state file,
// the commit journal, and the lock that keeps them to one process.

// jcommit is one journaled commit: the finish script's input, and when it
// was first tried (unix ms).
type jcommit struct {
	ID    string  `json:"id"`
	At    int64   `json:"at"`
	Lines []jline `json:"lines"`
}

// jline is one line of a journaled commit: the bucket, what was reserved
// there (-1: nothing), the amount to add, the bucket's expiry (unix s),
// and for a per-minute window its slot (unix s; absent: a period's bucket).
type jline struct {
	Bucket   string `json:"b"`
	Held     int64  `json:"h"`
	Amount   int64  `json:"a"`
	ExpireAt int64  `json:"x"`
	Slot     int64  `json:"w,omitempty"`
}

func toJLines(ls []line) []jline {
	out := make([]jline, len(ls))
	for i, l := range ls {
		out[i] = jline{Bucket: l.bucket, Held: l.held, Amount: l.amount, ExpireAt: l.expireAt, Slot: l.slot}
	}
	return out
}

func (c jcommit) lines() []line {
	out := make([]line, len(c.Lines))
	for i, l := range c.Lines {
		out[i] = line{bucket: l.Bucket, limit: noLimit, held: l.Held, amount: l.Amount, expireAt: l.ExpireAt, slot: l.Slot}
	}
	return out
}

// newJournalID names a journaled commit that had no reservation id.
func newJournalID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "j." + hex.EncodeToString(b[:])
}

// redisLocal holds the files; its methods are safe for concurrent use.
type redisLocal struct {
	path string
	lock *os.File

	mu   sync.Mutex
	jf   *os.File // the journal, opened for appending
	recs []jcommit
	n    atomic.Int64 // len(recs)

	nmu   sync.Mutex
	nf    *os.File // the current notes file; nil when none is open
	nopen bool     // between openNotes and close
	nbuf  []byte   // a note's line, reused
}

func (l *redisLocal) journalPath() string { return l.path + ".journal" }
func (l *redisLocal) statePath() string   { return l.path + ".state" }

// openRedisLocal locks path+".lock", reads the state file and the journal
// (a torn last line, from a crash while appending it, is dropped and log
// told), and opens the journal for appending.
func openRedisLocal(path string, log *slog.Logger) (*redisLocal, redisState, error) {
	var st redisState
	unusable := func(format string, args ...any) (*redisLocal, redisState, error) {
		return nil, st, fmt.Errorf("%w: redis ledger's local files %s: %s", ErrUnavailable, path, fmt.Sprintf(format, args...))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return unusable("cannot create their directory: %v", err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return unusable("%v", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return unusable("locked by another process (each replica needs its own ai.budget.store.path)")
	}
	l := &redisLocal{path: path, lock: lock}
	fail := func(format string, args ...any) (*redisLocal, redisState, error) {
		lock.Close()
		return unusable(format, args...)
	}
	switch raw, err := os.ReadFile(l.statePath()); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fail("%v", err)
	default:
		if err := json.Unmarshal(raw, &st); err != nil {
			return fail("%s is not a state file (%v): restore it, or remove it to forget the commit sequence this replica saw", l.statePath(), err)
		}
	}
	raw, err := os.ReadFile(l.journalPath())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail("%v", err)
	}
	recs, good, err := parseJournal(raw)
	if err != nil {
		return fail("%s: %v: restore it; it holds commits Redis has not applied", l.journalPath(), err)
	}
	jf, err := os.OpenFile(l.journalPath(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fail("%v", err)
	}
	if good < len(raw) {
		log.Warn("budget ledger: a torn last line of the Redis commit journal (a crash while writing it) was dropped", "journal", l.journalPath(), "bytes", len(raw)-good)
		if err := jf.Truncate(int64(good)); err != nil {
			jf.Close()
			return fail("%v", err)
		}
	}
	if _, err := jf.Seek(0, 2); err != nil {
		jf.Close()
		return fail("%v", err)
	}
	l.jf, l.recs = jf, recs
	l.n.Store(int64(len(recs)))
	return l, st, nil
}

// parseJournal decodes the journal's lines; good is the length of the
// whole good lines. Only the last line may be bad (torn); a bad line
// before a good one is corruption.
func parseJournal(raw []byte) (recs []jcommit, good int, err error) {
	for no := 1; good < len(raw); no++ {
		rest := raw[good:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return recs, good, nil // torn: no newline yet
		}
		rec, ok := decodeJournalLine(rest[:i])
		if !ok {
			if bytes.IndexByte(rest[i+1:], '\n') < 0 && len(bytes.TrimSpace(rest[i+1:])) == 0 {
				return recs, good, nil // a damaged last line
			}
			return nil, 0, fmt.Errorf("line %d is damaged", no)
		}
		recs = append(recs, rec)
		good += i + 1
	}
	return recs, good, nil
}

func decodeJournalLine(b []byte) (jcommit, bool) {
	var rec jcommit
	if len(b) < 10 || b[8] != ' ' {
		return rec, false
	}
	sum, err := strconv.ParseUint(string(b[:8]), 16, 32)
	if err != nil || uint32(sum) != crc32.Checksum(b[9:], castagnoli) {
		return rec, false
	}
	return rec, json.Unmarshal(b[9:], &rec) == nil && rec.ID != ""
}

func appendJournalLine(dst []byte, rec jcommit) []byte {
	js, _ := json.Marshal(rec) // plain strings and integers: never fails
	dst = fmt.Appendf(dst, "%08x ", crc32.Checksum(js, castagnoli))
	dst = append(dst, js...)
	return append(dst, '\n')
}

func (l *redisLocal) count() int { return int(l.n.Load()) }

// append writes rec to the journal with one write and fsyncs it: an
// outage's commits are few, and each is then on disk before the commit
// returns. first is true when the journal was empty.
func (l *redisLocal) append(rec jcommit) (first bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.jf == nil {
		return false, errors.New("closed")
	}
	if _, err := l.jf.Write(appendJournalLine(nil, rec)); err != nil {
		return false, err
	}
	if err := l.jf.Sync(); err != nil {
		return false, err
	}
	first = len(l.recs) == 0
	l.recs = append(l.recs, rec)
	l.n.Store(int64(len(l.recs)))
	return first, nil
}

// pending returns the journaled commits, oldest first.
func (l *redisLocal) pending() []jcommit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]jcommit(nil), l.recs...)
}

// drop removes the n oldest commits (applied in Redis): the rest is written
// to a new file, fsynced, and renamed over the journal.
func (l *redisLocal) drop(n int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.jf == nil {
		return errors.New("closed")
	}
	rest := l.recs[min(n, len(l.recs)):]
	var buf []byte
	for _, r := range rest {
		buf = appendJournalLine(buf, r)
	}
	tmp := l.journalPath() + ".tmp"
	if err := writeFileSync(tmp, buf); err != nil {
		return err
	}
	jf, err := os.OpenFile(tmp, os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if _, err := jf.Seek(0, 2); err != nil {
		jf.Close()
		return err
	}
	if err := os.Rename(tmp, l.journalPath()); err != nil {
		jf.Close()
		return err
	}
	_ = syncDir(filepath.Dir(l.path))
	l.jf.Close()
	l.jf = jf
	l.recs = append([]jcommit(nil), rest...)
	l.n.Store(int64(len(l.recs)))
	return nil
}

// saveState writes st to the state file: a new file, fsynced, renamed
// over the old one.
func (l *redisLocal) saveState(st redisState) error {
	js, _ := json.Marshal(st)
	tmp := l.statePath() + ".tmp"
	if err := writeFileSync(tmp, append(js, '\n')); err != nil {
		return err
	}
	if err := os.Rename(tmp, l.statePath()); err != nil {
		return err
	}
	return syncDir(filepath.Dir(l.path))
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// close closes the journal and releases the lock. The journal file stays
// (empty, or with the commits still to replay at the next start).
func (l *redisLocal) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if l.jf != nil {
		err = l.jf.Close()
		l.jf = nil
	}
	l.nmu.Lock()
	if l.nf != nil {
		l.nf.Close()
		l.nf = nil
	}
	l.nopen = false
	l.nmu.Unlock()
	if l.lock != nil {
		l.lock.Close()
		l.lock = nil
	}
	return err
}

// The notes files: Path+".notes" (the current) and Path+".notes.old" (the
// one before), each line "<crc32c of the rest, 8 hex digits> <commit id>
// <the note, base64>". A commit's note ([WithNote]) is appended to the
// current file with one write(2), without fsync, before the commit runs
// in Redis; every redisMaintainEvery the current file becomes the old one
// (the old one is replaced), so that a note stays one to two seconds,
// long after its call's audit line was written (within ~10 ms). A kill -9
// keeps what was written (the page cache); an OS crash or power loss can
// lose the last second's notes, as for the embedded store.

func (l *redisLocal) notesPath() string    { return l.path + ".notes" }
func (l *redisLocal) oldNotesPath() string { return l.path + ".notes.old" }

// rnote is one kept note: the commit id it belongs to and the note.
type rnote struct {
	id   string
	note []byte
}

// readNotes reads both notes files, oldest first; a damaged or torn line
// (a kill while writing it) is skipped.
func (l *redisLocal) readNotes() ([]rnote, error) {
	var out []rnote
	for _, p := range []string{l.oldNotesPath(), l.notesPath()} {
		raw, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for len(raw) > 0 {
			i := bytes.IndexByte(raw, '\n')
			if i < 0 {
				break // torn last line
			}
			if n, ok := decodeNoteLine(raw[:i]); ok {
				out = append(out, n)
			}
			raw = raw[i+1:]
		}
	}
	return out, nil
}

func decodeNoteLine(b []byte) (rnote, bool) {
	if len(b) < 12 || b[8] != ' ' {
		return rnote{}, false
	}
	sum, err := strconv.ParseUint(string(b[:8]), 16, 32)
	if err != nil || uint32(sum) != crc32.Checksum(b[9:], castagnoli) {
		return rnote{}, false
	}
	id, enc, ok := bytes.Cut(b[9:], []byte{' '})
	if !ok || len(id) == 0 {
		return rnote{}, false
	}
	note := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
	n, err := base64.StdEncoding.Decode(note, enc)
	if err != nil || n == 0 {
		return rnote{}, false
	}
	return rnote{id: string(id), note: note[:n]}, true
}

// appendNoteLine appends the notes file line of (id, note) to dst.
func appendNoteLine(dst []byte, id string, note []byte) []byte {
	start := len(dst)
	dst = append(dst, "00000000 "...)
	dst = append(dst, id...)
	dst = append(dst, ' ')
	dst = base64.StdEncoding.AppendEncode(dst, note)
	sum := crc32.Checksum(dst[start+9:], castagnoli)
	const hexd = "0123456789abcdef"
	for i := 7; i >= 0; i-- {
		dst[start+i] = hexd[sum&0xf]
		sum >>= 4
	}
	return append(dst, '\n')
}

// openNotes removes the notes files (their notes were handed on at open)
// and opens a new current one.
func (l *redisLocal) openNotes() error {
	for _, p := range []string{l.oldNotesPath(), l.notesPath()} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	f, err := l.createNotes()
	if err != nil {
		return err
	}
	l.nmu.Lock()
	l.nf, l.nopen = f, true
	l.nmu.Unlock()
	return nil
}

// createNotes creates the current notes file, empty, for appending.
func (l *redisLocal) createNotes() (*os.File, error) {
	return os.OpenFile(l.notesPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o600)
}

// note appends (id, note) to the current notes file with one write(2).
func (l *redisLocal) note(id string, note []byte) error {
	l.nmu.Lock()
	defer l.nmu.Unlock()
	if l.nf == nil {
		return errors.New("closed")
	}
	l.nbuf = appendNoteLine(l.nbuf[:0], id, note)
	_, err := l.nf.Write(l.nbuf)
	if cap(l.nbuf) > 4*maxNote {
		l.nbuf = nil
	}
	return err
}

// rotateNotes makes the current notes file the old one (replacing the
// old one) and starts a new current one.
func (l *redisLocal) rotateNotes() error {
	l.nmu.Lock()
	defer l.nmu.Unlock()
	if !l.nopen {
		return nil // before openNotes, or closed
	}
	if l.nf != nil {
		if err := os.Rename(l.notesPath(), l.oldNotesPath()); err != nil {
			return err
		}
		l.nf.Close()
		l.nf = nil // notes fail until a file is created: none grows unbounded
	}
	f, err := l.createNotes()
	if err != nil {
		return err
	}
	l.nf = f
	return nil
}
