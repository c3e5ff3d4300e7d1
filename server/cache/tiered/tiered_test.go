package tiered_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flexway/flexway/internal/redistest"
	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/cache/memstore"
	"github.com/flexway/flexway/server/cache/redisstore"
	"github.com/flexway/flexway/server/cache/tiered"
)

func init() { redis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// syncBuf is a log sink safe for the store's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func entry(tenant string, ttl time.Duration) *cache.Entry {
	k, _ := cache.ExactKey([]byte(`{"messages":[{"role":"user","content":"opening hours?"}]}`))
	now := time.Now()
	return &cache.Entry{Key: cache.MakeStoreKey(cache.Partition{Tenant: tenant}.ID(), k), Mode: cache.ModeJSON,
		Body: []byte(`{"choices":[]}`), Model: "m1", FinishReason: "stop", Stored: now, Expires: now.Add(ttl)}
}

// replica is one gateway's store: its own memory over the shared Redis.
func replica(t *testing.T, addr string, log *syncBuf, maxBytes int64) *tiered.Store {
	t.Helper()
	mem, err := memstore.New(memstore.Options{MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mem.Close)
	o := tiered.Options{Memory: mem, Logger: slog.New(slog.NewTextHandler(log, nil))}
	if addr != "" {
		r, c, err := redisstore.Open("redis://"+addr+"/0", redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		o.Redis = r
	}
	s, err := tiered.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestSharedBetweenReplicas: what one replica stores, another finds
// through Redis, then keeps in its own memory until the entry's expiry
// (it answers with Redis gone); another tenant's key finds nothing.
func TestSharedBetweenReplicas(t *testing.T) {
	addr, kill := redistest.Start(t)
	var log syncBuf
	a, b := replica(t, addr, &log, 1<<20), replica(t, addr, &log, 1<<20)
	e := entry("acme", time.Minute)
	a.Set(e, time.Minute)
	a.Wait()
	if got, ok := a.Get(context.Background(), e.Key); !ok || got != e {
		t.Fatalf("replica a: Get = %v, %v; want its own entry from memory", got, ok)
	}
	got, ok := b.Get(context.Background(), e.Key)
	if !ok || string(got.Body) != string(e.Body) || !got.Expires.Equal(e.Expires) {
		t.Fatalf("replica b: Get = %+v, %v; want the entry through Redis, its expiry kept", got, ok)
	}
	if _, ok := b.Get(context.Background(), entry("globex", time.Minute).Key); ok {
		t.Error("another tenant's key found an entry")
	}
	b.Wait()
	kill()
	if _, ok := b.Get(context.Background(), e.Key); !ok {
		t.Error("replica b: with Redis gone, the entry it read is not in its memory")
	}
	if s := log.String(); s != "" {
		t.Errorf("logged %q; want nothing", s)
	}
}

// TestExpiredOnArrival: an entry Redis still holds but whose expiry this
// replica's clock has passed is a miss.
func TestExpiredOnArrival(t *testing.T) {
	addr, _ := redistest.Start(t)
	var log syncBuf
	a, b := replica(t, addr, &log, 1<<20), replica(t, addr, &log, 1<<20)
	e := entry("acme", -time.Second) // Expires in the past
	a.Set(e, time.Minute)
	a.Wait()
	if _, ok := b.Get(context.Background(), e.Key); ok {
		t.Error("an expired entry answered")
	}
}

// TestRedisDownIsAMiss: with Redis dead, lookups miss and writes are
// skipped, fast, with a log line and no error to the caller; memory
// still answers what this replica stored.
func TestRedisDownIsAMiss(t *testing.T) {
	addr, kill := redistest.Start(t)
	kill()
	var log syncBuf
	s := replica(t, addr, &log, 1<<20)
	e := entry("acme", time.Minute)
	start := time.Now()
	if _, ok := s.Get(context.Background(), e.Key); ok {
		t.Fatal("hit with Redis down and nothing stored")
	}
	s.Set(e, time.Minute)
	s.Wait()
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v with Redis down", d)
	}
	if _, ok := s.Get(context.Background(), e.Key); !ok {
		t.Error("memory does not answer what this replica stored")
	}
	if !strings.Contains(log.String(), "redis lookup is a miss") {
		t.Errorf("log = %q; want the lookup's failure", log.String())
	}
}

// TestCorruptRedisValue: a Redis value that does not decode is a miss,
// deleted, and logged once.
func TestCorruptRedisValue(t *testing.T) {
	addr, _ := redistest.Start(t)
	var log syncBuf
	s := replica(t, addr, &log, 1<<20)
	e := entry("acme", time.Minute)
	r, c, _ := redisstore.Open("redis://"+addr+"/0", redisstore.Options{})
	defer c.Close()
	if err := c.Set(context.Background(), r.RedisKey(e.Key), "garbage", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, ok := s.Get(context.Background(), e.Key); ok {
			t.Fatal("a corrupt value answered")
		}
	}
	if n := strings.Count(log.String(), "corrupt"); n != 1 {
		t.Errorf("logged the corrupt value %d times, want once: %q", n, log.String())
	}
	if n, _ := c.Exists(context.Background(), r.RedisKey(e.Key)).Result(); n != 0 {
		t.Error("the corrupt value is still in Redis")
	}
}

// TestTooBigStoredNowhere: an entry over max_bytes/64 is stored neither
// in memory nor in Redis.
func TestTooBigStoredNowhere(t *testing.T) {
	addr, _ := redistest.Start(t)
	var log syncBuf
	a, b := replica(t, addr, &log, 64<<10), replica(t, addr, &log, 64<<10)
	e := entry("acme", time.Minute)
	e.Body = bytes.Repeat([]byte("x"), 1100) // over 64 KiB / 64
	a.Set(e, time.Minute)
	a.Wait()
	if _, ok := a.Get(context.Background(), e.Key); ok {
		t.Error("memory kept an entry over its bound")
	}
	if _, ok := b.Get(context.Background(), e.Key); ok {
		t.Error("Redis got an entry over the bound")
	}
}

// TestMemoryOnly: without Redis the store is the memory store.
func TestMemoryOnly(t *testing.T) {
	var log syncBuf
	s := replica(t, "", &log, 1<<20)
	e := entry("acme", time.Minute)
	s.Set(e, time.Minute)
	s.Wait()
	if got, ok := s.Get(context.Background(), e.Key); !ok || got != e {
		t.Errorf("Get = %v, %v", got, ok)
	}
	s.Del(e.Key)
	s.Wait()
	if _, ok := s.Get(context.Background(), e.Key); ok {
		t.Error("found after Del")
	}
}
