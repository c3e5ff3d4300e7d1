package memstore_test

import (
	"testing"
	"time"

	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/cache/memstore"
)

// BenchmarkGetHit is one hit among 10,000 entries, key given.
func BenchmarkGetHit(b *testing.B) {
	s, err := memstore.New(memstore.Options{MaxBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	id := cache.Partition{Tenant: "acme"}.ID()
	var keys []cache.StoreKey
	for i := 0; i < 10000; i++ {
		k := cache.MakeStoreKey(id, cache.Key{byte(i), byte(i >> 8), 2})
		s.Set(&cache.Entry{Key: k, Mode: cache.ModeJSON, Body: make([]byte, 1024)}, time.Hour)
		keys = append(keys, k)
	}
	s.Wait()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Get(keys[i%len(keys)])
		i++
	}
}
