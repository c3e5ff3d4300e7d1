package cache_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/cache/memstore"
)

// request4K is a chat request of about 4 KiB: a system prompt (with \u
// and \" escapes, as Python's json.dumps writes non-ASCII text), a few
// turns, a tool and sampling parameters.
func request4K() []byte {
	var b strings.Builder
	b.WriteString(`{"model":"fast","temperature":0.2,"top_p":0.95,"seed":42,"max_tokens":512,"stream":true,`)
	b.WriteString(`"tools":[{"type":"function","function":{"name":"lookup_order","description":"Find an order by its id","parameters":{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}}}],"tool_choice":"auto",`)
	b.WriteString(`"messages":[{"role":"system","content":"You are the support assistant of Acme. Answer briefly, politely, and only about Acme's products.`)
	for b.Len() < 3000 {
		b.WriteString(` Policy: refunds within 30 days; shipping takes 3\u20135 days; say \"I don't know\" when unsure.`)
	}
	b.WriteString(`"}`)
	for i := 0; b.Len() < 4000; i++ {
		fmt.Fprintf(&b, `,{"role":"user","content":"Question %d about my order?"},{"role":"assistant","content":"Answer %d."}`, i, i)
	}
	b.WriteString(`,{"role":"user","content":"How do I reset my password?"}]}`)
	return []byte(b.String())
}

func BenchmarkSHA256Only(b *testing.B) {
	body := request4K()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		sha256.Sum256(body)
	}
}

func BenchmarkExactKey(b *testing.B) {
	body := request4K()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cache.ExactKey(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExactKeyNoEscapes is BenchmarkExactKey on the same request
// without its \u and \" escapes (about 90 of them), to show their share.
func BenchmarkExactKeyNoEscapes(b *testing.B) {
	body := bytes.ReplaceAll(bytes.ReplaceAll(request4K(), []byte(`\u2013`), []byte(`-`)), []byte(`\"`), []byte(`'`))
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := cache.ExactKey(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONValid is encoding/json.Valid over the same request: a
// scan that builds nothing, for scale.
func BenchmarkJSONValid(b *testing.B) {
	body := request4K()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		json.Valid(body)
	}
}

func BenchmarkSemanticKeys(b *testing.B) {
	body := request4K()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if ks, err := cache.NewKeys(body, true); err != nil || !ks.Semantic {
			b.Fatal(err)
		}
	}
}

// BenchmarkExactLookupRepeated is BenchmarkExactLookup with the keys from
// a [cache.Keyer] that has seen the same bytes: the repeated question.
func BenchmarkExactLookupRepeated(b *testing.B) {
	body := request4K()
	s, err := memstore.New(memstore.Options{MaxBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := cache.Partition{Tenant: "acme", Alias: "fast", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"}
	k, _ := cache.ExactKey(body)
	s.Set(&cache.Entry{Key: cache.MakeStoreKey(p.ID(), k), Mode: cache.ModeJSON, Body: make([]byte, 1024)}, time.Hour)
	s.Wait()
	keyer := cache.NewKeyer(64 << 20)
	keyer.Keys(body, false)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		ks, err := keyer.Keys(body, false)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := s.Get(cache.MakeStoreKey(p.ID(), ks.Exact)); !ok {
			b.Fatal("miss")
		}
	}
}

// BenchmarkExactLookupFirstSeen is the front's whole exact path for a
// 4 KiB body it has not seen before: the memo's hash of the raw bytes (a
// miss: 1,024 bodies that differ in their seed, a memo of about 100),
// the canonical key, the partition ID and a lookup in a memory store of
// 10,001 entries.
func BenchmarkExactLookupFirstSeen(b *testing.B) {
	body := request4K()
	s := storeOf10k(b, body)
	bodies := make([][]byte, 1024)
	for i := range bodies {
		bodies[i] = bytes.Replace(body, []byte(`"seed":42,`), fmt.Appendf(nil, `"seed":%d,`, 1000+i), 1)
	}
	p := cache.Partition{Tenant: "acme", Alias: "fast", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"}
	keyer := cache.NewKeyer(100 * 160)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ks, err := keyer.Keys(bodies[i%len(bodies)], false)
		if err != nil {
			b.Fatal(err)
		}
		s.Get(cache.MakeStoreKey(p.ID(), ks.Exact))
		i++
	}
}

// storeOf10k is a memory store holding body's entry among 10,000 others.
func storeOf10k(b *testing.B, body []byte) *memstore.Store {
	s, err := memstore.New(memstore.Options{MaxBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	p := cache.Partition{Tenant: "acme", Alias: "fast", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"}
	for i := 0; i < 10000; i++ {
		s.Set(&cache.Entry{Key: cache.MakeStoreKey(p.ID(), cache.Key{byte(i), byte(i >> 8), 1}), Mode: cache.ModeJSON, Body: make([]byte, 1024)}, time.Hour)
	}
	k, _ := cache.ExactKey(body)
	s.Set(&cache.Entry{Key: cache.MakeStoreKey(p.ID(), k), Mode: cache.ModeJSON, Body: make([]byte, 1024)}, time.Hour)
	s.Wait()
	return s
}

// BenchmarkExactLookup is the exact path of a lookup: the key of a 4 KiB
// request, the partition ID, and a hit in a memory store holding 10,000
// other entries.
func BenchmarkExactLookup(b *testing.B) {
	body := request4K()
	s, err := memstore.New(memstore.Options{MaxBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := cache.Partition{Tenant: "acme", Alias: "fast", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"}
	for i := 0; i < 10000; i++ {
		s.Set(&cache.Entry{Key: cache.MakeStoreKey(p.ID(), cache.Key{byte(i), byte(i >> 8), 1}), Mode: cache.ModeJSON, Body: make([]byte, 1024)}, time.Hour)
	}
	k, _ := cache.ExactKey(body)
	s.Set(&cache.Entry{Key: cache.MakeStoreKey(p.ID(), k), Mode: cache.ModeJSON, Body: make([]byte, 1024)}, time.Hour)
	s.Wait()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		k, err := cache.ExactKey(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := s.Get(cache.MakeStoreKey(p.ID(), k)); !ok {
			b.Fatal("miss")
		}
	}
}
