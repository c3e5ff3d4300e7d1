package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"

	"github.com/flexway/flexway/server/money"
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
		if err := bk.Put(key, binary.BigEndian.AppendUint64(nil, uint64(money.AddSat(cur, d)))); err != nil {
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
