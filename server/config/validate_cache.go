package config

import (
	"math"
	"net/url"
	"time"
)

// minCacheMaxBytes is the smallest ai.cache.max_bytes accepted: 64 KiB,
// so that an entry (at most max_bytes/64) holds at least 1 KiB.
const minCacheMaxBytes = 64 * KiB

// validateCache checks ai.cache and every policy's cache section.
//
// Errors: ai.cache.store other than memory or redis; redis without a
// redis:// or rediss:// url; max_bytes under 64KiB; embeddings_backend
// naming no backend, or one without the embeddings capability; a policy
// cache mode other than off, exact or semantic (or absent); semantic mode
// without ai.cache.embeddings_backend; similarity outside (0, 1]; ttl not
// positive; hit_price negative, not finite or above [MaxEUR].
//
// Warnings: a url with store memory (unused) or with an inline password;
// similarity under 0.8 (answers to other questions); include_sensitive;
// a cache section on a policy that can only match calls the cache never
// serves (embeddings, model lists, gRPC services); two policies of one
// level that may select the same call and disagree on the mode.
func (ai AI) validateCache(col *collector) {
	c := ai.Cache
	switch c.Store {
	case CacheMemory:
		if c.URL != "" {
			col.warnf("ai.cache.url", "read by store redis only: store memory ignores it")
		}
	case CacheRedis:
		u, err := url.Parse(c.URL)
		switch {
		case c.URL == "":
			col.errorf("ai.cache.url", "required for store redis, e.g. redis://127.0.0.1:6379/1")
		case err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "":
			col.errorf("ai.cache.url", "want redis://host:port/db or rediss://host:port/db")
		default:
			if _, hasPassword := u.User.Password(); hasPassword {
				col.warnf("ai.cache.url", "holds an inline password; prefer a redis ACL user without one, or a socket reachable only from this host")
			}
		}
	default:
		col.errorf("ai.cache.store", "unknown store %q: want memory or redis", c.Store)
	}
	if c.MaxBytes < minCacheMaxBytes {
		col.errorf("ai.cache.max_bytes", "%s: want at least %s (an entry is at most max_bytes/64)", c.MaxBytes, ByteSize(minCacheMaxBytes))
	}
	if name := c.EmbeddingsBackend; name != "" {
		b, ok := ai.Backends[name]
		switch {
		case !ok:
			col.errorf("ai.cache.embeddings_backend", "names no backend: %q is not under ai.backends", name)
		case !b.Can(CapabilityEmbeddings):
			col.errorf("ai.cache.embeddings_backend", "backend %q does not list capability embeddings", name)
		}
	}
	for i, p := range ai.Policies {
		if p.Cache == nil {
			continue
		}
		path := indexPath("ai.policies", i) + ".cache"
		ai.checkPolicyCache(col, path, p)
	}
	ai.checkCacheTies(col)
}

// checkPolicyCache checks one policy's cache section at path.
func (ai AI) checkPolicyCache(col *collector, path string, p Policy) {
	pc := *p.Cache
	switch pc.Mode {
	case CacheOff, CacheExact:
	case CacheSemantic:
		if ai.Cache.EmbeddingsBackend == "" {
			col.errorf(path+".mode", "semantic needs ai.cache.embeddings_backend: the backend that embeds the questions")
		}
	case "":
		col.errorf(path+".mode", "required: off, exact or semantic")
	default:
		col.errorf(path+".mode", "unknown mode %q: want off, exact or semantic", pc.Mode)
	}
	switch {
	case math.IsNaN(pc.Similarity) || pc.Similarity <= 0 || pc.Similarity > 1:
		col.errorf(path+".similarity", "%v: want a cosine similarity in (0, 1]", pc.Similarity)
	case pc.Similarity < 0.8 && pc.Mode == CacheSemantic:
		col.warnf(path+".similarity", "%v: questions this far apart often want other answers", pc.Similarity)
	}
	if pc.TTL.Std() <= 0 {
		col.errorf(path+".ttl", "%s: want a positive duration, e.g. 1h", pc.TTL)
	} else if pc.TTL.Std() < time.Millisecond {
		col.errorf(path+".ttl", "%s: want at least 1ms", pc.TTL)
	}
	if h := pc.HitPrice; math.IsNaN(h) || math.IsInf(h, 0) || h < 0 || h > MaxEUR {
		col.errorf(path+".hit_price", "%v: want euros from 0 to %d", h, MaxEUR)
	}
	if pc.IncludeSensitive && pc.On() {
		col.warnf(path+".include_sensitive", "sensitive calls' answers are cached too (internal backends only, in partitions of their own)")
	}
	switch m := p.Match.Operation; {
	case m == "" || m == OperationChatCompletions:
	case pc.On():
		col.warnf(path, "the cache serves ai.chatCompletions only: with operation %s this policy caches nothing", m)
	}
}

// checkCacheTies warns where two policies of one level that can select
// the same call disagree on the cache mode: the first declared decides.
func (ai AI) checkCacheTies(col *collector) {
	for j, b := range ai.Policies {
		if b.Cache == nil {
			continue
		}
		for i := 0; i < j; i++ {
			a := ai.Policies[i]
			if a.Cache == nil || a.Cache.Mode == b.Cache.Mode ||
				a.Match.Level() != b.Match.Level() || !overlap(a.Match, b.Match) {
				continue
			}
			col.warnf(indexPath("ai.policies", j)+".cache",
				"policy %q (mode %s) and policy %q (mode %s) are of one level and may select the same call: for it the first declared, %q, decides",
				b.Name, b.Cache.Mode, a.Name, a.Cache.Mode, a.Name)
			break
		}
	}
}
