package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server"
	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/cache/memstore"
	"github.com/flexway/flexway/server/cache/redisstore"
	"github.com/flexway/flexway/server/cache/tiered"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/routing"
)

// keyerMemoBytes bounds the front's memo of request keys (the SHA-256 of
// a body sent again byte for byte names its canonical keys): 4 MiB, some
// 25,000 bodies.
const keyerMemoBytes = 4 << 20

// responseCache is the gateway's response cache (ai.cache and the
// policies' cache sections): its stores and each policy's setting.
type responseCache struct {
	mem   *memstore.Store
	redis *redis.Client // nil with store memory
	store *tiered.Store
	keyer *cache.Keyer
	// settings are the policies' cache settings by policy name; a policy
	// whose mode is off maps to nil.
	settings map[string]*server.CacheSetting
	// embeddings is the client of the gateway's own embeddings service
	// (the in-process channel, through the chain), set once it is built;
	// semantic lookups embed through it.
	embeddings atomic.Pointer[flexwayv1.EmbeddingsServiceClient]
	// stopSweep stops the semantic index's sweeper.
	stopSweep func()
}

// embedCall marks the context of the response cache's own embeddings
// call, with the backend it is pinned to (ai.cache.embeddings_backend):
// a context value no caller can set.
type embedCall struct{}

// embedBackend returns the backend a cache embeddings call is pinned to.
func embedBackend(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(embedCall{}).(string)
	return name, ok
}

// pinEmbeddings wraps the meter's alias resolver: the response cache's
// embeddings call is routed as if it named an alias whose one target is
// ai.cache.embeddings_backend and its default model (so that governance,
// the sensitivity pin and a tenant's backend override apply to it as to
// any /v1/embeddings call); every other call is resolver's.
func pinEmbeddings(cfg *config.Config, resolver func(context.Context, *call.State, any) *routing.AliasRoute) func(context.Context, *call.State, any) *routing.AliasRoute {
	name := cfg.AI.Cache.EmbeddingsBackend
	if name == "" {
		return resolver
	}
	route := &routing.AliasRoute{Targets: []routing.AliasTarget{{Backend: name, Model: cfg.AI.Backends[name].DefaultModel, Arm: "0"}}}
	return func(ctx context.Context, st *call.State, req any) *routing.AliasRoute {
		if _, ok := embedBackend(ctx); ok {
			if _, emb := req.(*flexwayv1.CreateEmbeddingRequest); emb {
				return route
			}
		}
		if resolver == nil {
			return nil
		}
		return resolver(ctx, st, req)
	}
}

// embedBudget bounds the response cache's own embeddings call: a slower
// embedder makes the lookup a miss rather than slowing every semantic
// miss by its latency (embeddings of one question take tens of
// milliseconds at the providers).
const embedBudget = time.Second

// embed is the core's [server.CacheOptions.Embed]: the caller's own
// embeddings call of text, through the gateway's chain on the in-process
// channel with the caller's metadata (its key, its sensitivity and relay
// headers), so that identity, budget, audit and metrics hold for it as
// for a /v1/embeddings call; bounded by [embedBudget] (or the embeddings
// backend's timeout when shorter) and cancelled with the caller's
// context. A sensitive question is never sent to an external embeddings
// backend.
func (rc *responseCache) embed(cfg *config.Config) func(context.Context, *call.State, string) ([]float32, error) {
	name := cfg.AI.Cache.EmbeddingsBackend
	if name == "" {
		return nil
	}
	b := cfg.AI.Backends[name]
	return func(ctx context.Context, st *call.State, text string) ([]float32, error) {
		client := rc.embeddings.Load()
		if client == nil {
			return nil, errors.New("the embeddings service is not up yet")
		}
		if st.Sensitive && b.IsExternal() {
			return nil, errors.New("a sensitive question is not sent to an external embeddings backend")
		}
		md, _ := metadata.FromIncomingContext(ctx)
		// not ctx itself: the in-process call is a call of its own, with
		// a state of its own; it ends with ctx
		ectx, cancel := context.WithTimeout(context.WithValue(context.Background(), embedCall{}, name), min(embedBudget, b.Timeout.Std()))
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		ectx = metadata.NewOutgoingContext(ectx, md.Copy())
		resp, err := (*client).CreateEmbedding(ectx, &flexwayv1.CreateEmbeddingRequest{Model: b.DefaultModel,
			Input: &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Text{Text: text}}})
		if err != nil {
			return nil, err
		}
		if len(resp.GetData()) != 1 || len(resp.GetData()[0].GetFloats()) == 0 {
			return nil, fmt.Errorf("the embeddings backend answered %d embeddings, want one of floats", len(resp.GetData()))
		}
		fs := resp.GetData()[0].GetFloats()
		vec := make([]float32, len(fs))
		for i, f := range fs {
			vec[i] = float32(f)
		}
		return vec, nil
	}
}

// serve gives rc the gateway's embeddings client and starts the semantic
// index's sweeper (every minute) over core.
func (rc *responseCache) serve(client flexwayv1.EmbeddingsServiceClient, core *server.Core) {
	if rc == nil {
		return
	}
	rc.embeddings.Store(&client)
	done := make(chan struct{})
	rc.stopSweep = sync.OnceFunc(func() { close(done) })
	go func() {
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				core.SweepCache()
			}
		}
	}()
}

// openCache opens the stores of ai.cache when some policy turns the
// cache on; nil (nothing opened, nothing keyed) when none does. Redis is
// not dialled here: a Redis down at start is a miss like any other.
func openCache(cfg *config.Config, log *slog.Logger) (*responseCache, error) {
	settings := map[string]*server.CacheSetting{}
	on := false
	for _, p := range cfg.AI.Policies {
		pc := p.Cache
		if pc == nil {
			continue
		}
		if !pc.On() {
			settings[p.Name] = nil
			continue
		}
		on = true
		settings[p.Name] = &server.CacheSetting{
			Mode: string(pc.Mode), Similarity: pc.Similarity, TTL: pc.TTL.Std(), HitPriceNanoEUR: pc.HitPriceNanoEUR(),
			StoreLength: pc.StoreLength, ToolCalls: pc.CacheToolCalls, IncludeSensitive: pc.IncludeSensitive,
		}
	}
	if !on {
		return nil, nil
	}
	c := cfg.AI.Cache
	mem, err := memstore.New(memstore.Options{MaxBytes: int64(c.MaxBytes)})
	if err != nil {
		return nil, fmt.Errorf("ai.cache: %w", err)
	}
	rc := &responseCache{mem: mem, settings: settings, keyer: cache.NewKeyer(keyerMemoBytes)}
	o := tiered.Options{Memory: mem, Logger: log}
	if c.Store == config.CacheRedis {
		r, client, err := redisstore.Open(c.URL, redisstore.Options{})
		if err != nil {
			mem.Close()
			return nil, fmt.Errorf("ai.cache.url: %w", err)
		}
		o.Redis, rc.redis = r, client
	}
	if rc.store, err = tiered.New(o); err != nil {
		rc.close()
		return nil, fmt.Errorf("ai.cache: %w", err)
	}
	return rc, nil
}

// options is the core's cache stage over rc: the setting of a call is
// that of its most specific policy with a cache section; a sensitive
// call is cached (include_sensitive) only on an internal backend.
func (rc *responseCache) options(cfg *config.Config) *server.CacheOptions {
	if rc == nil {
		return nil
	}
	return &server.CacheOptions{
		Store:         rc.store,
		MaxEntryBytes: cfg.AI.Cache.MaxEntryBytes(),
		Setting: func(st *call.State) *server.CacheSetting {
			p := st.Policies.Cache()
			if p == nil {
				return nil
			}
			return rc.settings[p.Name]
		},
		Internal: func(backend string) bool {
			b, ok := cfg.AI.Backends[backend]
			return ok && !b.IsExternal()
		},
		Embed:       rc.embed(cfg),
		VectorBytes: int64(cfg.AI.Cache.MaxBytes) / 4,
	}
}

// keyerOf is the front's keyer, nil without a cache.
func (rc *responseCache) keyerOf() *cache.Keyer {
	if rc == nil {
		return nil
	}
	return rc.keyer
}

// close waits for the Redis writes in flight and closes the stores.
func (rc *responseCache) close() {
	if rc == nil {
		return
	}
	if rc.stopSweep != nil {
		rc.stopSweep()
	}
	if rc.store != nil {
		rc.store.Close()
	}
	rc.mem.Close()
	if rc.redis != nil {
		_ = rc.redis.Close()
	}
}
