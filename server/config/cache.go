package config

import "time"

// Cache is ai.cache: where the response cache keeps its entries (stages 6
// and 15 of DESIGN.md's AI pipeline). The cache is off unless a policy's
// [PolicyCache] turns it on for its calls; this section only says where
// and how much.
type Cache struct {
	// Store is memory (the default: this process, ristretto) or redis
	// (exact entries shared between replicas, with this process's memory
	// in front; semantic vectors stay per replica).
	Store CacheStoreType `yaml:"store"`
	// MaxBytes bounds the memory store's entries, in bytes (default
	// 256MiB); an entry larger than MaxBytes/64 is never stored, whatever
	// the store.
	MaxBytes ByteSize `yaml:"max_bytes"`
	// URL is the redis server of store redis, e.g. redis://127.0.0.1:6379/1.
	URL string `yaml:"url"`
	// EmbeddingsBackend names the backend (capability embeddings) that
	// semantic lookups embed the last user message with, charged to the
	// caller's tenant like a /v1/embeddings call; required when a policy's
	// cache mode is semantic.
	EmbeddingsBackend string `yaml:"embeddings_backend"`
}

// CacheStoreType is ai.cache.store.
type CacheStoreType string

// The cache stores.
const (
	// CacheMemory keeps the entries in this process (the default).
	CacheMemory CacheStoreType = "memory"
	// CacheRedis shares exact entries between replicas through Redis.
	CacheRedis CacheStoreType = "redis"
)

// defaultCacheMaxBytes is ai.cache.max_bytes's default.
const defaultCacheMaxBytes = 256 * MiB

// setDefaults sets store memory and max_bytes 256MiB.
func (c *Cache) setDefaults() {
	setZero(&c.Store, CacheMemory)
	setZero(&c.MaxBytes, defaultCacheMaxBytes)
}

// MaxEntryBytes is the largest entry stored, in bytes: MaxBytes/64.
func (c Cache) MaxEntryBytes() int64 { return int64(c.MaxBytes) / 64 }

// PolicyCache is a policy's cache section (ai.policies[].cache): the most
// specific policy of a call that has one decides whether and how its
// answer is cached.
type PolicyCache struct {
	// Mode is off, exact (the request's canonical hash) or semantic (exact
	// first, then the nearest stored question at Similarity or above).
	// Required.
	Mode CacheMode `yaml:"mode"`
	// Similarity is the cosine similarity, in (0, 1], at or above which a
	// semantic lookup answers (default 0.95). A caller may raise it per
	// request with Flexway-Cache-Similarity, never lower it.
	Similarity float64 `yaml:"similarity"`
	// TTL is how long a stored answer is served (default 1h).
	TTL Duration `yaml:"ttl"`
	// HitPrice is the euros a hit is charged (default 0); a hit's tokens
	// are never charged. See [PolicyCache.HitPriceNanoEUR].
	HitPrice float64 `yaml:"hit_price"`
	// StoreLength also stores answers cut by max_tokens (finish_reason
	// length).
	StoreLength bool `yaml:"store_length"`
	// CacheToolCalls also stores answers that call tools.
	CacheToolCalls bool `yaml:"cache_tool_calls"`
	// IncludeSensitive looks up and stores sensitive calls too, only those
	// an internal backend serves, in partitions of their own.
	IncludeSensitive bool `yaml:"include_sensitive"`
}

// CacheMode is ai.policies[].cache.mode.
type CacheMode string

// The cache modes.
const (
	// CacheOff caches nothing (a more specific policy may turn off what a
	// broader one turns on).
	CacheOff CacheMode = "off"
	// CacheExact answers a request whose canonical form was stored.
	CacheExact CacheMode = "exact"
	// CacheSemantic also answers one whose last user message is near a
	// stored one's, the rest being equal.
	CacheSemantic CacheMode = "semantic"
)

// The defaults of a policy's cache section.
const (
	defaultCacheSimilarity = 0.95
	defaultCacheTTL        = Duration(time.Hour)
)

// setDefaults sets similarity 0.95 and ttl 1h.
func (p *PolicyCache) setDefaults() {
	setZero(&p.Similarity, defaultCacheSimilarity)
	setZero(&p.TTL, defaultCacheTTL)
}

// On reports whether the section turns the cache on (mode exact or
// semantic).
func (p PolicyCache) On() bool { return p.Mode == CacheExact || p.Mode == CacheSemantic }

// HitPriceNanoEUR is HitPrice in nano-euros.
func (p PolicyCache) HitPriceNanoEUR() int64 { return nanoOrMax(p.HitPrice) }
