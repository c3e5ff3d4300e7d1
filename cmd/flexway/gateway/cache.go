package gateway

import (
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/flexway/flexway/server"
	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/cache/memstore"
	"github.com/flexway/flexway/server/cache/redisstore"
	"github.com/flexway/flexway/server/cache/tiered"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
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
	if rc.store != nil {
		rc.store.Close()
	}
	rc.mem.Close()
	if rc.redis != nil {
		_ = rc.redis.Close()
	}
}
