// Package tiered is the response cache's store as the core sees it
// (issue 18): this process's memory store (server/cache/memstore) in
// front of an optional Redis store (server/cache/redisstore) that shares
// exact entries between replicas.
//
// A lookup reads memory first; on a miss it asks Redis and keeps what
// Redis answers in memory until the entry's own expiry, so that a
// question another replica stored answers here from memory after its
// first hit. Redis errors never reach the call: an unavailable Redis or
// a corrupt value is a miss, logged (redisstore reports each once: a
// corrupt value is deleted, a dead Redis skipped for its DownFor).
//
// A write goes to memory at once (ristretto's buffer: it never waits)
// and to Redis on a goroutine of its own, off the call's path; at most
// Options.MaxPendingWrites such writes are in flight, and one more is
// dropped (counted, never waited for). An entry larger than the memory
// store's per-entry bound (max_bytes/64) is stored nowhere.
package tiered

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/cache/memstore"
	"github.com/flexway/flexway/server/cache/redisstore"
)

// Options configures a [Store].
type Options struct {
	// Memory is this process's store. Required.
	Memory *memstore.Store
	// Redis, optional, is the store shared between replicas.
	Redis *redisstore.Store
	// Logger receives Redis's errors (keys, never content). Optional.
	Logger *slog.Logger
	// MaxPendingWrites bounds the Redis writes in flight. Optional;
	// default 256.
	MaxPendingWrites int
	// LocalTTL is how long an entry Redis answered without an expiry
	// (encoding version 1) is kept in memory. Optional; default 1m.
	LocalTTL time.Duration
}

// Store is the two-level entry store. Safe for concurrent use.
type Store struct {
	o       Options
	pending chan struct{}
	wg      sync.WaitGroup
	dropped atomic.Int64
	now     func() time.Time
}

// New returns a store over o's stores, which the caller owns and closes
// after [Store.Close].
func New(o Options) (*Store, error) {
	if o.Memory == nil {
		return nil, errors.New("tiered: Memory is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxPendingWrites <= 0 {
		o.MaxPendingWrites = 256
	}
	if o.LocalTTL <= 0 {
		o.LocalTTL = time.Minute
	}
	return &Store{o: o, pending: make(chan struct{}, o.MaxPendingWrites), now: time.Now}, nil
}

// Get returns the entry under k: from memory, else from Redis (then kept
// in memory until it expires). Every failure is a miss.
func (s *Store) Get(ctx context.Context, k cache.StoreKey) (*cache.Entry, bool) {
	if e, ok := s.o.Memory.Get(k); ok {
		return e, true
	}
	if s.o.Redis == nil {
		return nil, false
	}
	e, ok, err := s.o.Redis.Get(ctx, k)
	if err != nil {
		if ctx.Err() == nil {
			s.o.Logger.WarnContext(ctx, "response cache: redis lookup is a miss", "key", k.Key().String(), "error", err.Error())
		}
		return nil, false
	}
	if !ok {
		return nil, false
	}
	ttl := s.o.LocalTTL
	if !e.Expires.IsZero() {
		ttl = e.Expires.Sub(s.now())
	}
	if ttl <= 0 {
		return nil, false // expired by this replica's clock
	}
	s.o.Memory.Set(e, ttl)
	return e, true
}

// Set stores e for ttl in memory and, off the caller's path, in Redis. It
// never waits. The store keeps e: the caller must not modify it.
func (s *Store) Set(e *cache.Entry, ttl time.Duration) {
	if ttl <= 0 || e.Size() > s.o.Memory.MaxEntryBytes() {
		return
	}
	s.o.Memory.Set(e, ttl)
	if s.o.Redis == nil {
		return
	}
	s.background(func(ctx context.Context) error { return s.o.Redis.Set(ctx, e, ttl) }, e.Key, "store")
}

// Del removes the entry under k from memory and, off the caller's path,
// from Redis.
func (s *Store) Del(k cache.StoreKey) {
	s.o.Memory.Del(k)
	if s.o.Redis == nil {
		return
	}
	s.background(func(ctx context.Context) error { return s.o.Redis.Del(ctx, k) }, k, "evict")
}

// background runs op on a goroutine of its own when fewer than
// MaxPendingWrites are in flight, else drops it.
func (s *Store) background(op func(context.Context) error, k cache.StoreKey, what string) {
	select {
	case s.pending <- struct{}{}:
	default:
		s.dropped.Add(1)
		return
	}
	s.wg.Add(1)
	go func() {
		defer func() { <-s.pending; s.wg.Done() }()
		if err := op(context.Background()); err != nil {
			s.o.Logger.Warn("response cache: redis "+what+" skipped", "key", k.Key().String(), "error", err.Error())
		}
	}()
}

// Dropped is the number of Redis writes dropped because MaxPendingWrites
// were in flight.
func (s *Store) Dropped() int64 { return s.dropped.Load() }

// Wait blocks until every write made before it is applied, in memory and
// in Redis; for tests and shutdown.
func (s *Store) Wait() {
	s.wg.Wait()
	s.o.Memory.Wait()
}

// Close waits for the Redis writes in flight; the stores stay the
// caller's to close.
func (s *Store) Close() { s.wg.Wait() }
