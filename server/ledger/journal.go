package ledger

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The embedded store's journal: an append-only file of commit records in
// front of the bbolt file, replayed at open (see embedded).
//
// A record is
//
//	uvarint(len(payload)) payload crc32c(payload) (4 bytes, little-endian)
//
// and its payload
//
//	uvarint(seq) uvarint(n) n × (uvarint(len(bucket)) bucket varint(delta)) [uvarint(len(note)) note]
//
// seq increases by 1 per record of a store, across journal files and
// restarts; the bbolt file remembers the last seq it holds (applied_seq), so
// replaying a record twice is recognised and skipped. The note, present
// when not empty, is the commit's opaque note ([WithNote]: the call's
// audit line), at most maxNote bytes; a record without one is what the
// journal held before notes existed.

// maxJournalPayload bounds a record's payload: a longer length prefix is
// corruption (a commit writes a few short lines, far below it).
const maxJournalPayload = 1 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// jdelta is one line of a journal record: an amount added to a bucket's
// committed total.
type jdelta struct {
	bucket string
	delta  int64
}

// jrecord is one decoded journal record.
type jrecord struct {
	seq    uint64
	deltas []jdelta
	note   []byte // nil when the record has none
}

// maxNote bounds a commit's note: a longer one is not journaled (an
// audit line is a few hundred bytes; recordAfter's scan reaches records of
// up to scanMaxPayload, and a note must leave room for the deltas).
const maxNote = 8 << 10

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

func varintLen(x int64) int { return uvarintLen(uint64(x<<1) ^ uint64(x>>63)) }

// appendRecord appends the record of seq, deltas and note (none when
// empty) to dst.
func appendRecord(dst []byte, seq uint64, deltas []jdelta, note []byte) []byte {
	n := uvarintLen(seq) + uvarintLen(uint64(len(deltas)))
	for _, d := range deltas {
		n += uvarintLen(uint64(len(d.bucket))) + len(d.bucket) + varintLen(d.delta)
	}
	if len(note) > 0 {
		n += uvarintLen(uint64(len(note))) + len(note)
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	start := len(dst)
	dst = binary.AppendUvarint(dst, seq)
	dst = binary.AppendUvarint(dst, uint64(len(deltas)))
	for _, d := range deltas {
		dst = binary.AppendUvarint(dst, uint64(len(d.bucket)))
		dst = append(dst, d.bucket...)
		dst = binary.AppendVarint(dst, d.delta)
	}
	if len(note) > 0 {
		dst = binary.AppendUvarint(dst, uint64(len(note)))
		dst = append(dst, note...)
	}
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// decodePayload decodes a record's payload (its CRC already checked); ok is
// false when it is malformed.
func decodePayload(p []byte) (rec jrecord, ok bool) {
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	var count uint64
	if rec.seq, ok = next(); !ok {
		return rec, false
	}
	if count, ok = next(); !ok || count > uint64(len(p)) { // every line takes 2 bytes at least
		return rec, false
	}
	rec.deltas = make([]jdelta, count)
	for i := range rec.deltas {
		l, ok := next()
		if !ok || l > uint64(len(p)) {
			return rec, false
		}
		rec.deltas[i].bucket = string(p[:l])
		p = p[l:]
		d, n := binary.Varint(p)
		if n <= 0 {
			return rec, false
		}
		rec.deltas[i].delta = d
		p = p[n:]
	}
	if len(p) == 0 {
		return rec, true
	}
	l, ok := next()
	if !ok || l == 0 || l != uint64(len(p)) {
		return rec, false
	}
	rec.note = bytes.Clone(p) // p is the reader's buffer
	return rec, true
}

// journalReader reads the records of a journal until its end or its first
// incomplete or corrupt record.
type journalReader struct {
	r     *bufio.Reader
	good  int64 // offset of the end of the last good record
	done  bool
	clean bool  // the data ended exactly after the last good record
	err   error // a read error other than the data's end
	buf   []byte
}

func newJournalReader(r io.Reader) *journalReader {
	return &journalReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next record; false at the end of the good records. Then
// end reports where they end, and whether the data ended cleanly there (no
// torn or corrupt record after them), and err any read error.
func (jr *journalReader) next() (jrecord, bool) {
	if jr.done {
		return jrecord{}, false
	}
	jr.done = true // until the record is read whole
	if _, err := jr.r.Peek(1); err != nil {
		jr.clean = err == io.EOF
		jr.readErr(err)
		return jrecord{}, false
	}
	br := countingByteReader{r: jr.r}
	n, err := binary.ReadUvarint(&br)
	if br.err != nil {
		jr.readErr(br.err)
		return jrecord{}, false
	}
	if err != nil || n > maxJournalPayload { // overlong varint or absurd length: corrupt
		return jrecord{}, false
	}
	if cap(jr.buf) < int(n)+4 {
		jr.buf = make([]byte, int(n)+4)
	}
	buf := jr.buf[:n+4]
	if _, err := io.ReadFull(jr.r, buf); err != nil {
		jr.readErr(err)
		return jrecord{}, false
	}
	p := buf[:n]
	if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(buf[n:]) {
		return jrecord{}, false
	}
	rec, ok := decodePayload(p)
	if !ok {
		return jrecord{}, false
	}
	jr.good += br.n + int64(n) + 4
	jr.done = false
	return rec, true
}

// recordAfter reports whether data holds, at any offset, a whole valid
// record with a seq above after: then the bad bytes before it are not a
// torn end but corruption in the middle of the journal. It looks at the
// first scanLimit offsets, for records of up to scanMaxPayload bytes (a
// commit's record is a few hundred, its note included), so that garbage a
// crash left costs little to rule out.
func recordAfter(data []byte, after uint64) bool {
	const scanLimit, scanMaxPayload = 1 << 20, maxNote + 8<<10
	for off := 0; off < len(data) && off < scanLimit; off++ {
		n, k := binary.Uvarint(data[off:])
		if k <= 0 || n == 0 || n > scanMaxPayload || off+k+int(n)+4 > len(data) {
			continue
		}
		p := data[off+k : off+k+int(n)]
		if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(data[off+k+int(n):]) {
			continue
		}
		if rec, ok := decodePayload(p); ok && rec.seq > after {
			return true
		}
	}
	return false
}

// readErr records err unless it is the data's end (a torn record when not
// at a record's start).
func (jr *journalReader) readErr(err error) {
	if err != io.EOF && err != io.ErrUnexpectedEOF {
		jr.err = err
	}
}

// end reports the offset of the end of the last good record and whether the
// data ended there. Valid once next returned false.
func (jr *journalReader) end() (good int64, clean bool) { return jr.good, jr.clean }

// countingByteReader counts the bytes read and keeps the reader's error.
type countingByteReader struct {
	r   *bufio.Reader
	n   int64
	err error
}

func (c *countingByteReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err != nil {
		c.err = err
		return 0, err
	}
	c.n++
	return b, nil
}

// Journal files are <path>.journal.<k as 16 hex digits>, next to the bbolt
// file <path>; k increases by one per file.

func journalName(path string, k uint64) string {
	return fmt.Sprintf("%s.journal.%016x", path, k)
}

// journalFiles lists the journal files of the bbolt file path, by k.
func journalFiles(path string) ([]uint64, error) {
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	prefix := filepath.Base(path) + ".journal."
	var ks []uint64
	for _, e := range ents {
		hex, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || len(hex) != 16 || strings.ToLower(hex) != hex || !e.Type().IsRegular() {
			continue
		}
		k, err := strconv.ParseUint(hex, 16, 64)
		if err != nil {
			continue
		}
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks, nil
}

// journalFile is the current journal file: an *os.File opened for
// appending (an interface so that tests can make its writes fail).
type journalFile interface {
	Write(b []byte) (int, error)
	Truncate(size int64) error
	Sync() error
	Close() error
}

func createJournal(path string, k uint64) (*os.File, error) {
	return os.OpenFile(journalName(path, k), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
}

// syncDir fsyncs a directory, making file creations and deletions in it
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
