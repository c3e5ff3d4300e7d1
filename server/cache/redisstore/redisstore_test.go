package redisstore_test

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flexway/flexway/internal/redistest"
	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/cache/redisstore"
)

func init() { redis.SetLogger(quiet{}) }

// quiet drops go-redis's own log lines (dial failures are the point of
// some tests).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

var acme = cache.Partition{Tenant: "acme", Alias: "fast", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"}

const req = `{"model":"fast","messages":[{"role":"user","content":"What are your opening hours?"}]}`

func entry(p cache.Partition) *cache.Entry {
	k, _ := cache.ExactKey([]byte(req))
	return &cache.Entry{Key: cache.MakeStoreKey(p.ID(), k), Mode: cache.ModeStream,
		Chunks: [][]byte{[]byte(`{"choices":[{"delta":{"content":"9 to 5"}}]}`)}, Model: "m1-2026", FinishReason: "stop",
		Usage: cache.Usage{InputTokens: 21, OutputTokens: 4}, Stored: time.Unix(1764672000, 0)}
}

func TestSetGet(t *testing.T) {
	t.Parallel()
	addr, _ := redistest.Start(t)
	c := client(t, addr)
	s := redisstore.New(c, redisstore.Options{})
	ctx := context.Background()
	e := entry(acme)
	if err := s.Set(ctx, e, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Get(ctx, e.Key)
	if err != nil || !ok || !reflect.DeepEqual(got, e) {
		t.Fatalf("Get = %+v, %v, %v; want %+v", got, ok, err, e)
	}
	// The key and its expiry, as Redis holds them.
	rk := "flexway:cache:v1:" + e.Key.Partition().String() + e.Key.Key().String()
	if s.RedisKey(e.Key) != rk {
		t.Errorf("RedisKey = %s, want %s", s.RedisKey(e.Key), rk)
	}
	if ttl := c.PTTL(ctx, rk).Val(); ttl <= 59*time.Second || ttl > time.Minute {
		t.Errorf("PTTL = %v, want about 1m", ttl)
	}
	if v := c.Get(ctx, rk).Val(); v != string(cache.Marshal(nil, e)) {
		t.Errorf("stored value %x", v)
	}
	// A replica with its own client finds it too.
	s2 := redisstore.New(client(t, addr), redisstore.Options{})
	if _, ok, _ := s2.Get(ctx, e.Key); !ok {
		t.Error("another replica misses")
	}
	if err := s.Del(ctx, e.Key); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get(ctx, e.Key); ok || err != nil {
		t.Errorf("after Del: %v, %v", ok, err)
	}
}

// TestOtherTenantMisses: tenant B sends tenant A's bytes: a miss.
func TestOtherTenantMisses(t *testing.T) {
	t.Parallel()
	addr, _ := redistest.Start(t)
	s := redisstore.New(client(t, addr), redisstore.Options{})
	ctx := context.Background()
	if err := s.Set(ctx, entry(acme), time.Minute); err != nil {
		t.Fatal(err)
	}
	globex := acme
	globex.Tenant = "globex"
	k, _ := cache.ExactKey([]byte(req))
	if e, ok, err := s.Get(ctx, cache.MakeStoreKey(globex.ID(), k)); ok || err != nil {
		t.Errorf("tenant B found %+v (%v)", e, err)
	}
}

func TestTTL(t *testing.T) {
	t.Parallel()
	addr, _ := redistest.Start(t)
	s := redisstore.New(client(t, addr), redisstore.Options{})
	ctx := context.Background()
	e := entry(acme)
	if err := s.Set(ctx, e, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, ok, err := s.Get(ctx, e.Key); ok || err != nil {
		t.Errorf("after the TTL: %v, %v", ok, err)
	}
	if err := s.Set(ctx, e, 0); err == nil {
		t.Error("ttl 0 accepted")
	}
}

// TestCorrupt: a value that does not decode is a miss, deleted, and
// reported once.
func TestCorrupt(t *testing.T) {
	t.Parallel()
	addr, _ := redistest.Start(t)
	c := client(t, addr)
	s := redisstore.New(c, redisstore.Options{})
	ctx := context.Background()
	e := entry(acme)
	rk := s.RedisKey(e.Key)
	other := entry(acme)
	other.Key[63] ^= 1
	for _, tc := range []struct {
		name  string
		value []byte
	}{
		{"garbage", []byte("not an entry")},
		{"future_version", append([]byte{3}, cache.Marshal(nil, e)[1:]...)},
		{"truncated", cache.Marshal(nil, e)[:70]},
		{"another_key", cache.Marshal(nil, other)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.Set(ctx, rk, tc.value, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if got, ok, err := s.Get(ctx, e.Key); ok || !errors.Is(err, cache.ErrCorrupt) {
				t.Fatalf("Get = %v, %v, %v; want a miss and ErrCorrupt", got, ok, err)
			}
			if n := c.Exists(ctx, rk).Val(); n != 0 {
				t.Error("corrupt value not deleted")
			}
			if _, ok, err := s.Get(ctx, e.Key); ok || err != nil {
				t.Errorf("second Get = %v, %v; want a plain miss", ok, err)
			}
		})
	}
}

// TestRedisDown: a dead Redis is a miss within the timeout, reported
// once, then skipped for DownFor; it comes back after.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	addr, kill := redistest.Start(t)
	s := redisstore.New(client(t, addr), redisstore.Options{Timeout: 50 * time.Millisecond, DownFor: 200 * time.Millisecond})
	ctx := context.Background()
	e := entry(acme)
	if err := s.Set(ctx, e, time.Minute); err != nil {
		t.Fatal(err)
	}
	kill()
	start := time.Now()
	if _, ok, err := s.Get(ctx, e.Key); ok || !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("Get with Redis down = %v, %v; want a miss and ErrUnavailable", ok, err)
	}
	for i := 0; i < 100; i++ {
		if _, ok, err := s.Get(ctx, e.Key); ok || err != nil {
			t.Fatalf("Get in the down window = %v, %v; want a silent miss", ok, err)
		}
		if err := s.Set(ctx, e, time.Minute); err != nil {
			t.Fatalf("Set in the down window: %v", err)
		}
	}
	if d := time.Since(start); d > 150*time.Millisecond {
		t.Errorf("101 lookups with Redis down took %v", d)
	}
	time.Sleep(250 * time.Millisecond)
	if _, _, err := s.Get(ctx, e.Key); !errors.Is(err, redisstore.ErrUnavailable) {
		t.Errorf("after DownFor: %v, want Redis tried again", err)
	}
}

// TestRedisHangs: a server that accepts and never answers costs a lookup
// its timeout, no more.
func TestRedisHangs(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	s := redisstore.New(client(t, ln.Addr().String()), redisstore.Options{Timeout: 50 * time.Millisecond})
	start := time.Now()
	_, ok, err := s.Get(context.Background(), entry(acme).Key)
	if d := time.Since(start); ok || !errors.Is(err, redisstore.ErrUnavailable) || d > 300*time.Millisecond {
		t.Errorf("Get = %v, %v after %v; want a miss, ErrUnavailable, within the timeout", ok, err, d)
	}
}

// TestCallerCancelled: the caller's cancelled ctx is not Redis down.
func TestCallerCancelled(t *testing.T) {
	t.Parallel()
	addr, _ := redistest.Start(t)
	s := redisstore.New(client(t, addr), redisstore.Options{})
	e := entry(acme)
	if err := s.Set(context.Background(), e, time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok, err := s.Get(ctx, e.Key); ok || err == nil || errors.Is(err, redisstore.ErrUnavailable) {
		t.Errorf("cancelled Get = %v, %v", ok, err)
	}
	if _, ok, err := s.Get(context.Background(), e.Key); !ok || err != nil {
		t.Errorf("Get after a cancelled one = %v, %v; want a hit", ok, err)
	}
}

// TestOpen: Open's client finds what New's stored.
func TestOpen(t *testing.T) {
	t.Parallel()
	addr, _ := redistest.Start(t)
	s, c, err := redisstore.Open("redis://"+addr+"/0", redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e := entry(acme)
	if err := redisstore.New(client(t, addr), redisstore.Options{}).Set(context.Background(), e, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get(context.Background(), e.Key); !ok || err != nil {
		t.Errorf("Get = %v, %v", ok, err)
	}
	if _, _, err := redisstore.Open("redis://:secret@[bad", redisstore.Options{}); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("bad URL: %v", err)
	}
}

// BenchmarkGetHit is one exact hit through a real loopback redis-server
// (the round trip dominates).
func BenchmarkGetHit(b *testing.B) {
	addr, _ := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()
	s := redisstore.New(c, redisstore.Options{})
	e := entry(acme)
	e.Chunks = [][]byte{make([]byte, 2048)}
	if err := s.Set(context.Background(), e, time.Hour); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := s.Get(context.Background(), e.Key); !ok {
			b.Fatal(err)
		}
	}
}
