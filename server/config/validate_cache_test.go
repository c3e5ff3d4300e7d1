package config_test

import (
	"testing"
	"time"

	"github.com/flexway/flexway/server/config"
)

// TestLoadPolicyCache: a policy's cache section decodes every key, with
// similarity 0.95 and ttl 1h by default; ai.cache defaults to store
// memory, 256MiB, whether written or not.
func TestLoadPolicyCache(t *testing.T) {
	cfg, warnings, err := config.Load(writeConfig(t, policyBase+`    - name: all
      cache: {mode: exact}
    - name: faq
      match: {model: fast}
      cache: {mode: exact, ttl: 10m, hit_price: 0.001, store_length: true, cache_tool_calls: true}
`))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Load: %v, warnings %v", err, warnings)
	}
	all, faq := cfg.AI.Policies[0].Cache, cfg.AI.Policies[1].Cache
	runChecks(t, []check{
		{"all mode", all.Mode, config.CacheExact},
		{"all similarity (default)", all.Similarity, 0.95},
		{"all ttl (default)", all.TTL.Std(), time.Hour},
		{"all hit price (default)", all.HitPriceNanoEUR(), int64(0)},
		{"all flags", [3]bool{all.StoreLength, all.CacheToolCalls, all.IncludeSensitive}, [3]bool{}},
		{"faq ttl", faq.TTL.Std(), 10 * time.Minute},
		{"faq hit price", faq.HitPriceNanoEUR(), int64(1_000_000)},
		{"faq flags", [3]bool{faq.StoreLength, faq.CacheToolCalls, faq.IncludeSensitive}, [3]bool{true, true, false}},
		{"faq on", faq.On(), true},
		{"store (default)", cfg.AI.Cache.Store, config.CacheMemory},
		{"max_bytes (default)", cfg.AI.Cache.MaxBytes, 256 * config.MiB},
		{"max entry", cfg.AI.Cache.MaxEntryBytes(), int64(4 * config.MiB)},
	})
}

// TestApplyDefaultsPolicyCache: a configuration built in code gets the
// cache defaults from ApplyDefaults, without writing through the caller's
// pointer.
func TestApplyDefaultsPolicyCache(t *testing.T) {
	c := validConfig(t)
	pc := &config.PolicyCache{Mode: config.CacheExact}
	c.AI.Policies = []config.Policy{{Name: "p", Cache: pc}}
	c.ApplyDefaults()
	got := c.AI.Policies[0].Cache
	runChecks(t, []check{
		{"similarity", got.Similarity, 0.95},
		{"ttl", got.TTL.Std(), time.Hour},
		{"caller's untouched", pc.TTL, config.Duration(0)},
		{"store", c.AI.Cache.Store, config.CacheMemory},
		{"max_bytes", c.AI.Cache.MaxBytes, 256 * config.MiB},
	})
	if warnings, err := c.Validate(); err != nil || len(warnings) != 0 {
		t.Errorf("Validate() = %v, %v; want no problem", warnings, err)
	}
}

// TestLoadCacheProblems: every error and warning of ai.cache and of a
// policy's cache section, with its line and key path.
func TestLoadCacheProblems(t *testing.T) {
	runPolicyCases(t, []policyCase{
		{"mode absent", `    - name: p
      cache: {ttl: 1m}
`, "ai.policies[0].cache.mode", "31: ai.policies[0].cache.mode: required: off, exact or semantic"},
		{"semantic without embedder", `    - name: p
      cache: {mode: semantic}
`, "ai.policies[0].cache.mode", "31: ai.policies[0].cache.mode: semantic needs ai.cache.embeddings_backend: the backend that embeds the questions"},
		{"similarity above 1", `    - name: p
      cache: {mode: exact, similarity: 1.5}
`, "ai.policies[0].cache.similarity", "31: ai.policies[0].cache.similarity: 1.5: want a cosine similarity in (0, 1]"},
		{"similarity negative", `    - name: p
      cache: {mode: exact, similarity: -0.1}
`, "ai.policies[0].cache.similarity", "31: ai.policies[0].cache.similarity: -0.1: want a cosine similarity in (0, 1]"},
		{"ttl zero", `    - name: p
      cache: {mode: exact, ttl: 0s}
`, "ai.policies[0].cache.ttl", "31: ai.policies[0].cache.ttl: 0s: want a positive duration, e.g. 1h"},
		{"ttl negative", `    - name: p
      cache: {mode: exact, ttl: -1m}
`, "ai.policies[0].cache.ttl", "31: ai.policies[0].cache.ttl: -1m0s: want a positive duration, e.g. 1h"},
		{"hit price negative", `    - name: p
      cache: {mode: exact, hit_price: -0.01}
`, "ai.policies[0].cache.hit_price", "31: ai.policies[0].cache.hit_price: -0.01: want euros from 0 to 1000000000"},
		{"hit price a string", `    - name: p
      cache: {mode: exact, hit_price: free}
`, "ai.policies[0].cache.hit_price", `31: ai.policies[0].cache.hit_price: expected a number, got "free"`},
		{"unknown key", `    - name: p
      cache: {mode: exact, tll: 1m}
`, "ai.policies[0].cache.tll", "31: unknown key ai.policies[0].cache.tll (did you mean ttl?)"},
		{"include_sensitive", `    - name: p
      cache: {mode: exact, include_sensitive: true}
`, "ai.policies[0].cache.include_sensitive", "31: warning: ai.policies[0].cache.include_sensitive: sensitive calls' answers are cached too (internal backends only, in partitions of their own)"},
		{"cache on embeddings", `    - name: p
      match: {operation: ai.embeddings}
      cache: {mode: exact}
`, "ai.policies[0].cache", "32: warning: ai.policies[0].cache: the cache serves ai.chatCompletions only: with operation ai.embeddings this policy caches nothing"},
		{"tie", `    - name: a
      match: {model: fast}
      cache: {mode: exact}
    - name: b
      match: {model: fast, listener: http}
      cache: {mode: "off"}
`, "ai.policies[1].cache", `35: warning: ai.policies[1].cache: policy "b" (mode off) and policy "a" (mode exact) are of one level and may select the same call: for it the first declared, "a", decides`},
		{"unknown store", `  cache: {store: disk}
`, "ai.cache.store", `30: ai.cache.store: unknown store "disk": want memory or redis`},
		{"redis without url", `  cache: {store: redis}
`, "ai.cache.url", "30: ai.cache.url: required for store redis, e.g. redis://127.0.0.1:6379/1"},
		{"redis http url", `  cache: {store: redis, url: "http://127.0.0.1:6379"}
`, "ai.cache.url", "30: ai.cache.url: want redis://host:port/db or rediss://host:port/db"},
		{"redis password", `  cache: {store: redis, url: "redis://:pw@127.0.0.1:6379/1"}
`, "ai.cache.url", "30: warning: ai.cache.url: holds an inline password; prefer a redis ACL user without one, or a socket reachable only from this host"},
		{"memory with url", `  cache: {url: "redis://127.0.0.1:6379/1"}
`, "ai.cache.url", "30: warning: ai.cache.url: read by store redis only: store memory ignores it"},
		{"max_bytes small", `  cache: {max_bytes: 4KiB}
`, "ai.cache.max_bytes", "30: ai.cache.max_bytes: 4KiB: want at least 64KiB (an entry is at most max_bytes/64)"},
		{"embedder unknown", `  cache: {embeddings_backend: embedr}
`, "ai.cache.embeddings_backend", `30: ai.cache.embeddings_backend: names no backend: "embedr" is not under ai.backends`},
		{"embedder cannot embed", `  cache: {embeddings_backend: main}
`, "ai.cache.embeddings_backend", `30: ai.cache.embeddings_backend: backend "main" does not list capability embeddings`},
	})
}
