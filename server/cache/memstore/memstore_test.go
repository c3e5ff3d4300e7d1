package memstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/cache/memstore"
)

func newStore(t *testing.T, maxBytes int64) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Options{MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func entry(p cache.Partition, body string) *cache.Entry {
	k, err := cache.ExactKey([]byte(body))
	if err != nil {
		panic(err)
	}
	return &cache.Entry{Key: cache.MakeStoreKey(p.ID(), k), Mode: cache.ModeJSON, Body: []byte(`{"choices":[]}`),
		Model: "m1", FinishReason: "stop", Usage: cache.Usage{InputTokens: 10, OutputTokens: 3}}
}

const req = `{"model":"fast","messages":[{"role":"user","content":"What are your opening hours?"}]}`

func TestSetGet(t *testing.T) {
	t.Parallel()
	s := newStore(t, 1<<20)
	p := cache.Partition{Tenant: "acme", Alias: "fast", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"}
	e := entry(p, req)
	if !s.Set(e, time.Minute) {
		t.Fatal("Set refused")
	}
	s.Wait()
	got, ok := s.Get(e.Key)
	if !ok || got != e {
		t.Fatalf("Get = %v, %v; want the stored entry", got, ok)
	}
	s.Del(e.Key)
	s.Wait()
	if _, ok := s.Get(e.Key); ok {
		t.Error("found after Del")
	}
}

// TestOtherTenantMisses: tenant B sending tenant A's exact bytes misses,
// by construction (the partition is half the key), and so does every
// other partition field.
func TestOtherTenantMisses(t *testing.T) {
	t.Parallel()
	s := newStore(t, 1<<20)
	a := cache.Partition{Tenant: "acme", Alias: "fast", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"}
	e := entry(a, req)
	s.Set(e, time.Minute)
	s.Wait()
	k, _ := cache.ExactKey([]byte(req))
	if _, ok := s.Get(cache.MakeStoreKey(a.ID(), k)); !ok {
		t.Fatal("tenant A misses its own entry")
	}
	for _, p := range []cache.Partition{
		{Tenant: "globex", Alias: "fast", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"},
		{Tenant: "acme", Alias: "fast", Arm: "b", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"},
		{Tenant: "acme", Alias: "fast", Backend: "cheap", Model: "m1", Operation: "ai.chatCompletions"},
		{Tenant: "acme", Alias: "fast", Backend: "main", Model: "m1", Operation: "ai.chatCompletions", Sensitive: true},
	} {
		if got, ok := s.Get(cache.MakeStoreKey(p.ID(), k)); ok {
			t.Errorf("partition %+v found %+v's entry %v", p, a, got)
		}
	}
}

// TestTTL: an entry is found before its TTL, not after.
func TestTTL(t *testing.T) {
	t.Parallel()
	s := newStore(t, 1<<20)
	e := entry(cache.Partition{Tenant: "acme"}, req)
	s.Set(e, 50*time.Millisecond)
	s.Wait()
	if _, ok := s.Get(e.Key); !ok {
		t.Fatal("miss before the TTL")
	}
	time.Sleep(80 * time.Millisecond)
	if _, ok := s.Get(e.Key); ok {
		t.Error("hit after the TTL")
	}
	if s.Set(e, 0) || s.Set(e, -time.Second) {
		t.Error("Set with ttl <= 0 accepted")
	}
}

func TestMaxEntry(t *testing.T) {
	t.Parallel()
	s := newStore(t, 64*1024)
	e := entry(cache.Partition{Tenant: "acme"}, req)
	e.Body = make([]byte, 1024-256-len("m1stop")) // Size exactly 1024 = 64 KiB / 64
	if e.Size() != 1024 {
		t.Fatalf("Size = %d", e.Size())
	}
	if !s.Set(e, time.Minute) {
		t.Error("an entry of max_bytes/64 refused")
	}
	e2 := *e
	e2.Body = append(e.Body, 'x')
	if s.Set(&e2, time.Minute) {
		t.Error("an entry over max_bytes/64 accepted")
	}
}

// TestBounded: storing 10× max_bytes keeps the total cost within it.
func TestBounded(t *testing.T) {
	t.Parallel()
	const maxBytes = 256 * 1024
	s := newStore(t, maxBytes)
	p := cache.Partition{Tenant: "acme"}
	var keys []cache.StoreKey
	for i := 0; i < 10*maxBytes/2048; i++ {
		e := entry(p, fmt.Sprintf(`{"messages":[{"role":"user","content":"q%d"}]}`, i))
		e.Body = make([]byte, 2048-256-len("m1stop"))
		s.Set(e, time.Minute)
		keys = append(keys, e.Key)
	}
	s.Wait()
	var held int64
	for _, k := range keys {
		if e, ok := s.Get(k); ok {
			held += e.Size()
		}
	}
	if held > maxBytes || held == 0 {
		t.Errorf("held %d bytes, want (0, %d]", held, maxBytes)
	}
}
