// Package memstore is the response cache's store "memory" (issue 18): the
// entries of this process in a ristretto cache
// (github.com/dgraph-io/ristretto/v2), bounded by max_bytes with an entry's
// cost its [cache.Entry.Size] in bytes, and a TTL per entry.
//
// The partition is half of every key ([cache.StoreKey]), and Get also
// compares the key stored in the entry with the one asked for, so an entry
// is never returned to a lookup under another partition, even if two keys
// collided in ristretto's 128-bit hash.
//
// Writes are asynchronous: ristretto's Set puts the entry in a buffer that
// one goroutine applies, and it may drop the write (the buffer is full, or
// its admission policy prefers what is stored when the cache is full). A
// Get just after a Set may therefore miss: a store followed by a lookup of
// the same key, as two identical calls in quick succession make, can both
// go upstream. That is what the cache wants at stage 15 (a store never
// waits, and never adds latency to the call that fills it); [Store.Wait]
// applies every buffered write and is for tests and shutdown, not calls.
//
// Figures (this 2-core machine, shared): a hit among 10,000 entries,
// key given, 0.50–0.70 µs (BenchmarkGetHit; one 64-byte allocation, the
// string key); with the key of a 4 KiB request, see server/cache's doc.
package memstore

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/flexway/flexway/server/cache"
)

// Options configures a [Store].
type Options struct {
	// MaxBytes bounds the entries' total cost, in bytes (ai.cache's
	// max_bytes). Required, > 0.
	MaxBytes int64
	// AvgEntryBytes is the expected size of an entry, in bytes, used to
	// size ristretto's admission counters (ten per expected entry).
	// Optional; default 4096.
	AvgEntryBytes int64
}

// Store is a bounded in-memory entry store. Safe for concurrent use.
type Store struct {
	c        *ristretto.Cache[string, *cache.Entry]
	maxEntry int64
}

// New starts a store; Close stops its goroutines.
func New(o Options) (*Store, error) {
	if o.MaxBytes <= 0 {
		return nil, errors.New("memstore: MaxBytes must be > 0")
	}
	if o.AvgEntryBytes <= 0 {
		o.AvgEntryBytes = 4096
	}
	counters := min(max(10*o.MaxBytes/o.AvgEntryBytes, 1000), 1<<26)
	c, err := ristretto.NewCache(&ristretto.Config[string, *cache.Entry]{
		NumCounters: counters,
		MaxCost:     o.MaxBytes,
		BufferItems: 64,
		// Keys are two SHA-256 halves already: take 128 bits of them,
		// both halves mixed in, rather than hash 64 bytes again.
		KeyToHash: func(k string) (uint64, uint64) {
			return binary.LittleEndian.Uint64([]byte(k[0:8])) ^ binary.LittleEndian.Uint64([]byte(k[32:40])),
				binary.LittleEndian.Uint64([]byte(k[8:16])) ^ binary.LittleEndian.Uint64([]byte(k[40:48]))
		},
		// Size counts the entry's own bookkeeping.
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, err
	}
	return &Store{c: c, maxEntry: o.MaxBytes / 64}, nil
}

// Get returns the entry stored under k, if it is there and not expired.
// The entry is shared: the caller must not modify it.
func (s *Store) Get(k cache.StoreKey) (*cache.Entry, bool) {
	e, ok := s.c.Get(string(k[:]))
	if !ok || e == nil || e.Key != k {
		return nil, false
	}
	return e, true
}

// Set stores e under e.Key for ttl (> 0), without waiting (see the package
// doc). It reports false when the write was refused at once: ttl ≤ 0, an
// entry costing more than MaxBytes/64 (the per-entry bound of issue 18),
// or ristretto's buffer full; true does not promise the entry is kept.
// The store keeps e: the caller must not modify it afterwards.
func (s *Store) Set(e *cache.Entry, ttl time.Duration) bool {
	size := e.Size()
	if ttl <= 0 || size > s.maxEntry {
		return false
	}
	return s.c.SetWithTTL(string(e.Key[:]), e, size, ttl)
}

// MaxEntryBytes is the largest entry Set keeps, in bytes: MaxBytes/64.
func (s *Store) MaxEntryBytes() int64 { return s.maxEntry }

// Del removes the entry under k (asynchronously, like Set).
func (s *Store) Del(k cache.StoreKey) { s.c.Del(string(k[:])) }

// Wait blocks until every write made before it is applied.
func (s *Store) Wait() { s.c.Wait() }

// Close stops the store; later calls miss and refuse writes.
func (s *Store) Close() { s.c.Close() }
