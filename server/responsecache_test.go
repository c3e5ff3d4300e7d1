package server

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/cache/memstore"
	"github.com/flexway/flexway/server/cache/tiered"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/openaiwire"
)

// countingBackend answers every unary chat with one fixed answer and
// counts the calls.
type countingBackend struct {
	calls  atomic.Int32
	answer string
	finish string
}

func (b *countingBackend) Name() string { return "main" }
func (b *countingBackend) CreateChatCompletion(_ context.Context, req *flexwayv1.CreateChatCompletionRequest) (*flexwayv1.ChatCompletion, backends.Served, error) {
	b.calls.Add(1)
	return &flexwayv1.ChatCompletion{Id: "chatcmpl-up", Object: "chat.completion", Model: "sample-1", Choices: []*flexwayv1.ChatCompletionChoice{{
		Message: &flexwayv1.ChatMessage{Role: "assistant", Content: &flexwayv1.ChatMessage_Text{Text: b.answer}}, FinishReason: proto.String(b.finish)}},
		Usage: &flexwayv1.Usage{PromptTokens: 12, CompletionTokens: 30, TotalTokens: 42}}, backends.Served{Backend: "main", ModelSent: "sample-1"}, nil
}
func (b *countingBackend) StreamChatCompletion(context.Context, *flexwayv1.CreateChatCompletionRequest) (backends.ChunkStream, backends.Served, error) {
	panic("not streamed here")
}
func (b *countingBackend) CreateEmbedding(context.Context, *flexwayv1.CreateEmbeddingRequest) (*flexwayv1.CreateEmbeddingResponse, backends.Served, error) {
	panic("no embeddings here")
}

// cachedCall runs one unary chat call of tenant through the stage as the
// chain would: the lookup (the meter's), then the service.
func cachedCall(t *testing.T, c *Core, tenant string, st *call.State, req *flexwayv1.CreateChatCompletionRequest, md metadata.MD) (*flexwayv1.ChatCompletion, *call.State, error) {
	t.Helper()
	if st == nil {
		st = &call.State{RequestID: "r", Tenant: tenant, Operation: "ai.chatCompletions"}
	}
	st.Plan = []string{"main"}
	ctx := call.NewContext(context.Background(), st)
	if md != nil {
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	if _, _, err := c.CacheLookup(ctx, st, req, func() error { return nil }); err != nil {
		return nil, st, err
	}
	resp, err := c.CreateChatCompletion(ctx, proto.Clone(req).(*flexwayv1.CreateChatCompletionRequest))
	return resp, st, err
}

func cacheCore(t *testing.T, b *countingBackend, set *CacheSetting) *Core {
	t.Helper()
	return New(Options{Backends: map[string]backends.Backend{"main": b}, Cache: &CacheOptions{
		Store:    memoryStore(t, 1<<20),
		Setting:  func(*call.State) *CacheSetting { return set },
		Internal: func(string) bool { return false },
	}})
}

// memoryStore is a memory-only store of maxBytes that applies every
// write at once (ristretto applies them on its own goroutine), so that a
// test's second call sees the first's entry.
func memoryStore(t testing.TB, maxBytes int64) *waitingStore {
	t.Helper()
	mem, err := memstore.New(memstore.Options{MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mem.Close)
	s, err := tiered.New(tiered.Options{Memory: mem})
	if err != nil {
		t.Fatal(err)
	}
	return &waitingStore{s}
}

type waitingStore struct{ *tiered.Store }

func (w *waitingStore) Set(e *cache.Entry, ttl time.Duration) {
	w.Store.Set(e, ttl)
	w.Store.Wait()
}

// TestCacheExactUnary: the second identical question of a tenant is
// answered from the cache (the backend counts one call) with the stored
// model and content, a fresh id, and the first call's usage saved; the
// same bytes from another tenant miss and go upstream (issue 18's
// poisoning test); 0.20 for 0.2 hits (numbers are keyed as numbers), a
// temperature of 0.7 misses; an entry that does not decode is a miss; Cache-Control: no-cache skips the
// lookup, no-store the store; an answer cut by max_tokens is not stored.
func TestCacheExactUnary(t *testing.T) {
	b := &countingBackend{answer: "Reset it from the login page.", finish: "stop"}
	c := cacheCore(t, b, &CacheSetting{Mode: "exact", TTL: time.Hour, HitPriceNanoEUR: 5})
	q := func(temp string) *flexwayv1.CreateChatCompletionRequest {
		return &flexwayv1.CreateChatCompletionRequest{Model: "fast", ExtraFields: map[string]string{"temperature": temp}, Messages: []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "How do I reset my password?"}}}}
	}
	first, st, err := cachedCall(t, c, "acme", nil, q("0.2"), nil)
	if err != nil || st.Cache.Status != "miss" || b.calls.Load() != 1 {
		t.Fatalf("first: %v, %+v, %d calls", err, st.Cache, b.calls.Load())
	}
	hit, st, err := cachedCall(t, c, "acme", nil, q("0.2"), nil)
	if err != nil || st.Cache.Status != "hit" || b.calls.Load() != 1 {
		t.Fatalf("second: %v, %+v, %d calls", err, st.Cache, b.calls.Load())
	}
	if hit.GetModel() != "sample-1" || hit.GetChoices()[0].GetMessage().GetText() != first.GetChoices()[0].GetMessage().GetText() || hit.GetId() == first.GetId() || !strings.HasPrefix(hit.GetId(), "chatcmpl-") {
		t.Errorf("hit %v, first %v", hit, first)
	}
	if o := st.Outcome(); !o.Served || o.CacheSavedTokens != 42 || o.InputTokens != 0 || o.OutputTokens != 0 {
		t.Errorf("hit outcome %+v: want served, 42 tokens saved, none used", o)
	}
	if _, st, _ = cachedCall(t, c, "acme", nil, q("0.20"), nil); st.Cache.Status != "hit" || b.calls.Load() != 1 {
		t.Errorf("0.20 for 0.2 (one number): %+v, %d calls; want a hit", st.Cache, b.calls.Load())
	}
	// a stored entry that does not decode is a miss, evicted
	store := c.opts.Cache.Store
	store.Set(&cache.Entry{Key: st.Cache.Key, Mode: cache.ModeJSON, Body: []byte("{not json"), Stored: time.Now()}, time.Hour)
	if _, st, err = cachedCall(t, c, "acme", nil, q("0.2"), nil); err != nil || st.Cache.Status != "miss" || b.calls.Load() != 2 {
		t.Fatalf("a corrupt entry: %v, %+v, %d calls; want a miss and an upstream call", err, st.Cache, b.calls.Load())
	}
	if _, st, _ = cachedCall(t, c, "acme", nil, q("0.2"), nil); st.Cache.Status != "hit" || b.calls.Load() != 2 {
		t.Errorf("after the corrupt entry: %+v; want the answer stored again", st.Cache)
	}
	b.calls.Store(1)
	if _, st, _ = cachedCall(t, c, "globex", nil, q("0.2"), nil); st.Cache.Status != "miss" || b.calls.Load() != 2 {
		t.Errorf("another tenant: %+v, %d calls; want a miss and an upstream call", st.Cache, b.calls.Load())
	}
	if _, st, _ = cachedCall(t, c, "acme", nil, q("0.7"), nil); st.Cache.Status != "miss" || b.calls.Load() != 3 {
		t.Errorf("another temperature: %+v, %d calls", st.Cache, b.calls.Load())
	}
	if _, st, _ = cachedCall(t, c, "acme", nil, q("0.2"), metadata.Pairs("cache-control", "no-cache")); st.Cache.Status != "miss" || b.calls.Load() != 4 {
		t.Errorf("no-cache: %+v, %d calls", st.Cache, b.calls.Load())
	}
	if _, st, _ = cachedCall(t, c, "initech", nil, q("0.2"), metadata.Pairs("cache-control", "no-store")); st.Cache.Status != "miss" || b.calls.Load() != 5 {
		t.Errorf("no-store: %+v", st.Cache)
	}
	if _, st, _ = cachedCall(t, c, "initech", nil, q("0.2"), nil); st.Cache.Status != "miss" || b.calls.Load() != 6 {
		t.Errorf("after a no-store call: %+v, %d calls; want a miss", st.Cache, b.calls.Load())
	}
	// a cut answer is not stored
	cut := &countingBackend{answer: "Reset it", finish: "length"}
	c2 := cacheCore(t, cut, &CacheSetting{Mode: "exact", TTL: time.Hour})
	cachedCall(t, c2, "acme", nil, q("0.2"), nil)
	if _, st, _ = cachedCall(t, c2, "acme", nil, q("0.2"), nil); st.Cache.Status != "miss" || cut.calls.Load() != 2 {
		t.Errorf("a length answer was stored: %+v", st.Cache)
	}
	// an answer a response guardrail redacted is not stored
	card := &countingBackend{answer: "Your card 4111 1111 1111 1111 is on file.", finish: "stop"}
	c3 := cacheCore(t, card, &CacheSetting{Mode: "exact", TTL: time.Hour})
	for range 2 {
		st := guardState(t, false, nil, redactCards)
		st.Tenant, st.Operation = "acme", "ai.chatCompletions"
		resp, st, err := cachedCall(t, c3, "acme", st, q("0.2"), nil)
		if err != nil || strings.Contains(resp.GetChoices()[0].GetMessage().GetText(), "4111") || st.Cache.Status != "miss" {
			t.Fatalf("redacted answer: %v, %v, %+v", err, resp, st.Cache)
		}
	}
	if card.calls.Load() != 2 {
		t.Errorf("a redacted answer was stored: %d upstream calls, want 2", card.calls.Load())
	}
	// a sensitive call is neither looked up nor stored
	if _, st, _ = cachedCall(t, c, "acme", &call.State{RequestID: "r", Tenant: "acme", Operation: "ai.chatCompletions", Sensitive: true}, q("0.2"), nil); st.Cache.Status != "bypass" {
		t.Errorf("sensitive: %+v", st.Cache)
	}
}

// BenchmarkCacheLookupHit4KiB: the stage's lookup of a 4 KiB chat request
// that hits, as the meter runs it: the request encoded as it goes
// upstream, keyed over its canonical form, partitioned, and found among
// 10,000 entries (issue 18's target: 5 µs).
func BenchmarkCacheLookupHit4KiB(b *testing.B) {
	up := &countingBackend{answer: "ok", finish: "stop"}
	set := &CacheSetting{Mode: "exact", TTL: time.Hour}
	c := New(Options{Backends: map[string]backends.Backend{"main": up}, Cache: &CacheOptions{Store: memoryStore(b, 64<<20), Setting: func(*call.State) *CacheSetting { return set }}})
	sys := strings.Repeat("Policy: refunds within 30 days; shipping takes 3–5 days; say \"I don't know\" when unsure. ", 40)
	req := &flexwayv1.CreateChatCompletionRequest{Model: "fast", ExtraFields: map[string]string{"temperature": "0.2", "max_tokens": "512"}, Messages: []*flexwayv1.ChatMessage{
		{Role: "system", Content: &flexwayv1.ChatMessage_Text{Text: sys}},
		{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "How do I reset my password?"}}}}
	for i := range 10000 {
		r := proto.Clone(req).(*flexwayv1.CreateChatCompletionRequest)
		r.ExtraFields["seed"] = strconv.Itoa(i)
		st := &call.State{Tenant: "acme", Operation: "ai.chatCompletions", Plan: []string{"main"}}
		c.CacheLookup(context.Background(), st, r, func() error { return nil })
		c.storeJSON(st, &flexwayv1.ChatCompletion{Model: "m", Choices: []*flexwayv1.ChatCompletionChoice{{Message: &flexwayv1.ChatMessage{Role: "assistant", Content: &flexwayv1.ChatMessage_Text{Text: "ok"}}, FinishReason: proto.String("stop")}}})
	}
	req.ExtraFields["seed"] = "42"
	b.Run("encoded", func(b *testing.B) { // a gRPC caller's: the request encoded again
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			st := &call.State{Tenant: "acme", Operation: "ai.chatCompletions", Plan: []string{"main"}}
			if _, hit, _ := c.CacheLookup(ctx, st, req, func() error { return nil }); !hit {
				b.Fatal("no hit")
			}
		}
	})
	b.Run("front", func(b *testing.B) { // the HTTP front's: keyed from the body as sent, memoised
		body, _ := openaiwire.AppendChatCompletionRequest(nil, req, openaiwire.Upstream{})
		keyer := cache.NewKeyer(1 << 20)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			ks, err := keyer.Keys(body, false)
			if err != nil {
				b.Fatal(err)
			}
			ctx := call.WithCacheKey(context.Background(), ks.Exact)
			st := &call.State{Tenant: "acme", Operation: "ai.chatCompletions", Plan: []string{"main"}}
			if _, hit, _ := c.CacheLookup(ctx, st, req, func() error { return nil }); !hit {
				b.Fatal("no hit")
			}
		}
	})
}

// TestCacheIncludeSensitive: with include_sensitive, a sensitive call on
// an internal backend is looked up and stored in a partition of its own
// (a non-sensitive entry of the same bytes never answers it, nor the
// reverse); on an external backend it is bypassed.
func TestCacheIncludeSensitive(t *testing.T) {
	b := &countingBackend{answer: "Internal answer.", finish: "stop"}
	internal := true
	c := New(Options{Backends: map[string]backends.Backend{"main": b}, Cache: &CacheOptions{
		Store: memoryStore(t, 1<<20),
		Setting: func(*call.State) *CacheSetting {
			return &CacheSetting{Mode: "exact", TTL: time.Hour, IncludeSensitive: true}
		},
		Internal: func(string) bool { return internal },
	}})
	q := &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "Salary bands?"}}}}
	sensitive := func() *call.State {
		return &call.State{RequestID: "r", Tenant: "acme", Operation: "ai.chatCompletions", Sensitive: true}
	}
	status := func(st *call.State) string {
		_, st, err := cachedCall(t, c, "acme", st, q, nil)
		if err != nil {
			t.Fatal(err)
		}
		return st.Cache.Status
	}
	if s := status(nil); s != "miss" { // a plain call stores its answer
		t.Fatalf("plain: %s", s)
	}
	if s := status(sensitive()); s != "miss" {
		t.Errorf("sensitive after a plain entry: %s, want miss (partitions of their own)", s)
	}
	if s := status(sensitive()); s != "hit" {
		t.Errorf("sensitive again: %s, want hit", s)
	}
	if s := status(nil); s != "hit" {
		t.Errorf("plain again: %s, want its own hit", s)
	}
	if n := b.calls.Load(); n != 2 {
		t.Errorf("upstream calls %d, want 2", n)
	}
	internal = false
	if s := status(sensitive()); s != "bypass" {
		t.Errorf("sensitive on an external backend: %s, want bypass", s)
	}
}
