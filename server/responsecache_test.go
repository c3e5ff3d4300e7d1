package server

import (
	"context"
	"log/slog"
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
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// countingBackend answers every unary chat with one fixed answer and
// counts the calls.
type countingBackend struct {
	calls  atomic.Int32
	answer string
	finish string
	// gate, when set, holds every call until it is closed.
	gate chan struct{}
	// fail, when set, fails every call that starts while it is set.
	fail atomic.Bool
}

func (b *countingBackend) Name() string { return "main" }
func (b *countingBackend) CreateChatCompletion(_ context.Context, req *flexwayv1.CreateChatCompletionRequest) (*flexwayv1.ChatCompletion, backends.Served, error) {
	b.calls.Add(1)
	fail := b.fail.Load()
	if b.gate != nil {
		<-b.gate
	}
	if fail {
		return nil, backends.Served{Backend: "main"}, faults.New(faults.UpstreamError, "upstream main answered 500")
	}
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
	_, _, err := c.CacheLookup(ctx, st, req, func() error { return nil })
	defer st.Cache.End() // as the budget interceptor does
	if err != nil {
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

// TestCacheCoalescesConcurrentMisses: 40 identical questions sent while
// the first is still upstream cost one upstream call; the other 39 wait
// for it and are hits with its answer (the seventh attack pass saw 101 of
// 200 go upstream). When the leader fails (an upstream error), its
// followers go upstream themselves and the next burst is coalesced again
// (the eighth attack pass: one failing leader, a client that left, turned
// coalescing off for 30 s). When the leader's answer may not be stored
// (a length stop) its followers go upstream, and the next burst of that
// question is not made to wait.
func TestCacheCoalescesConcurrentMisses(t *testing.T) {
	q := &flexwayv1.CreateChatCompletionRequest{Model: "fast", Messages: []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "What are your opening hours?"}}}}
	// burst sends n at once and opens b's gate once the first has
	// reached b (then runs arrived) and the others have had time to join
	burst := func(c *Core, b *countingBackend, n int, arrived func()) (hits, errs int, texts map[string]int) {
		t.Helper()
		type result struct {
			status, text string
			err          error
		}
		b.gate = make(chan struct{})
		out := make(chan result, n)
		for range n {
			go func() {
				resp, st, err := cachedCall(t, c, "acme", nil, q, nil)
				text := ""
				if err == nil {
					text = resp.GetChoices()[0].GetMessage().GetText()
				}
				out <- result{st.Cache.Status, text, err}
			}()
		}
		for deadline := time.Now().Add(5 * time.Second); b.calls.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if arrived != nil {
			arrived()
		}
		time.Sleep(300 * time.Millisecond)
		close(b.gate)
		texts = map[string]int{}
		for range n {
			r := <-out
			switch {
			case r.err != nil:
				errs++
			case r.status == "hit":
				hits++
			}
			texts[r.text]++
		}
		return hits, errs, texts
	}
	b := &countingBackend{answer: "Nine to five.", finish: "stop"}
	c := cacheCore(t, b, &CacheSetting{Mode: "exact", TTL: time.Hour})
	b.fail.Store(true)
	hits, errs, _ := burst(c, b, 10, func() { b.fail.Store(false) })
	if b.calls.Load() != 10 || errs != 1 || hits != 0 {
		t.Errorf("a failing leader: %d upstream calls, %d errors, %d hits; want its 9 followers upstream, 1 error", b.calls.Load(), errs, hits)
	}
	c = cacheCore(t, b, &CacheSetting{Mode: "exact", TTL: time.Hour}) // an empty store, the same flights' rules
	b.calls.Store(0)
	b.fail.Store(true)
	if _, errs, _ := burst(c, b, 5, nil); errs != 5 || b.calls.Load() != 5 {
		t.Fatalf("an upstream failing every call: %d errors of %d calls, want 5 of 5", errs, b.calls.Load())
	}
	b.fail.Store(false)
	b.calls.Store(0)
	hits, errs, texts := burst(c, b, 40, nil)
	if b.calls.Load() != 1 || hits != 39 || errs != 0 || texts["Nine to five."] != 40 {
		t.Errorf("40 identical concurrent questions after a failed leader: %d upstream calls, %d hits, %d errors, answers %v; want 1 call, 39 hits", b.calls.Load(), hits, errs, texts)
	}

	cut := &countingBackend{answer: "Nine", finish: "length"}
	c = cacheCore(t, cut, &CacheSetting{Mode: "exact", TTL: time.Hour})
	if hits, _, _ := burst(c, cut, 10, nil); cut.calls.Load() != 10 || hits != 0 {
		t.Errorf("an answer that is not stored: %d upstream calls, %d hits; want all 10 upstream", cut.calls.Load(), hits)
	}
	if f, leader := c.flights.Join(cacheKeyOf(t, c, q)); f != nil || leader {
		t.Errorf("a key whose answer could not be stored: leader %v; want neither leader nor follower for 30 s", leader)
	}
}

// cacheKeyOf is the store key of q from tenant acme on c (its partition
// and exact key, as CacheLookup makes them).
func cacheKeyOf(t *testing.T, c *Core, q *flexwayv1.CreateChatCompletionRequest) cache.StoreKey {
	t.Helper()
	st := &call.State{RequestID: "k", Tenant: "acme", Operation: "ai.chatCompletions", Plan: []string{"main"}}
	ctx := call.NewContext(context.Background(), st)
	if _, _, err := c.CacheLookup(ctx, st, q, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	return st.Cache.Key
}

// TestCacheSemanticNewDimension: when the embeddings backend starts
// answering vectors of another dimension (its model changed), the
// semantic index starts anew at it, logged once, and variants hit again;
// before, every semantic lookup missed until restart, each paying an
// embedding.
func TestCacheSemanticNewDimension(t *testing.T) {
	b := &countingBackend{answer: "From the login page.", finish: "stop"}
	var logs strings.Builder
	var dims atomic.Int32
	dims.Store(3)
	c := New(Options{Backends: map[string]backends.Backend{"main": b}, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Cache: &CacheOptions{
		Store: memoryStore(t, 1<<20),
		Setting: func(*call.State) *CacheSetting {
			return &CacheSetting{Mode: "semantic", Similarity: 0.9, TTL: time.Hour}
		},
		Internal: func(string) bool { return false },
		Embed: func(_ context.Context, _ *call.State, text string) ([]float32, error) {
			v := make([]float32, dims.Load())
			v[0] = 1 // every question means the same here
			return v, nil
		},
	}})
	q := func(text string) *flexwayv1.CreateChatCompletionRequest {
		return &flexwayv1.CreateChatCompletionRequest{Model: "fast", Messages: []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: text}}}}
	}
	steps := []struct {
		dims       int32
		text, want string
		calls      int32
	}{
		{3, "How do I reset my password?", "miss", 1},
		{3, "How can I reset my password?", "hit", 1},
		{4, "How might I reset my password?", "miss", 2}, // the index starts anew
		{4, "Where do I reset my password?", "hit", 2},
		{3, "Please, how do I reset my password?", "miss", 3}, // and back
	}
	for _, s := range steps {
		dims.Store(s.dims)
		_, st, err := cachedCall(t, c, "acme", nil, q(s.text), nil)
		if err != nil || st.Cache.Status != s.want || b.calls.Load() != s.calls {
			t.Errorf("%d dims, %q: %v, %s, %d upstream calls; want %s, %d", s.dims, s.text, err, st.Cache.Status, b.calls.Load(), s.want, s.calls)
		}
	}
	if n := strings.Count(logs.String(), "changed dimension"); n != 1 {
		t.Errorf("%d log lines of a change of dimension, want 1 (at most one a minute):\n%s", n, logs.String())
	}
}

// TestSimilarityHeader: Flexway-Cache-Similarity is a plain decimal in
// (0, 1]; signs, exponents, hex floats and values a float64 cannot tell
// from 1 are refused (the eighth attack pass found +0.9 and 0x1p-1
// accepted).
func TestSimilarityHeader(t *testing.T) {
	for s, want := range map[string]bool{
		"0.97": true, "1": true, "1.0": true, ".5": true, " 0.9 ": true, "0.000001": true,
		"": false, " ": false, ".": false, "0": false, "0.0": false, "-0": false, "+0.9": false, "0x1p-1": false, "0x_1p-1": false,
		"5e-324": false, "1e-400": false, "Inf": false, "NaN": false, "1.5": false, "0.9, 0.95": false, "1.0000000000000001": false, "0..9": false, "0.99999999999999999": true, "2": false,
	} {
		if _, ok := similarity(s); ok != want {
			t.Errorf("similarity(%q) ok = %v, want %v", s, ok, want)
		}
	}
}
