package ledger

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	bolt "go.etcd.io/bbolt"

	"github.com/flexway/flexway/server/money"
)

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
			deltas[d.bucket] = money.AddSat(deltas[d.bucket], d.delta)
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
