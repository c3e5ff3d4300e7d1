package server

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/cache/semantic"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/openaiwire"
)

// HeaderCacheSimilarity is the header metadata key of a semantic hit's
// cosine similarity (Flexway-Cache-Similarity: 0.9731), and of the
// request's own threshold, which may raise the policy's, never lower it.
const HeaderCacheSimilarity = "flexway-cache-similarity"

// vectors is the semantic index of this process, made at the first
// embedding (its dimension is the embedding model's).
type vectors struct {
	mu  sync.Mutex // held while the index is made
	idx atomic.Pointer[semantic.Index]
	// mismatch is set once an embedding of another dimension was logged.
	mismatch atomic.Bool
}

// vectorIndex returns the index for vectors of dims, made at the first
// call; nil when dims differs from the first embedding's (another
// model).
func (c *Core) vectorIndex(dims int) *semantic.Index {
	idx := c.vectors.idx.Load()
	if idx == nil {
		c.vectors.mu.Lock()
		if idx = c.vectors.idx.Load(); idx == nil {
			maxBytes := c.opts.Cache.VectorBytes
			if maxBytes <= 0 {
				maxBytes = 64 << 20
			}
			var err error
			if idx, err = semantic.New(semantic.Options{Dims: dims, MaxBytes: maxBytes}); err != nil {
				c.vectors.mu.Unlock()
				return nil // dims 0: an empty embedding
			}
			c.vectors.idx.Store(idx)
		}
		c.vectors.mu.Unlock()
	}
	if idx.Dims() != dims {
		if !c.vectors.mismatch.Swap(true) {
			c.log.Warn("response cache: an embedding of another dimension than the semantic index's; semantic lookups miss until restart",
				"index_dims", idx.Dims(), "dims", dims)
		}
		return nil
	}
	return idx
}

// SweepCache frees the semantic index's expired vectors; the gateway
// calls it on a ticker. It returns how many it freed.
func (c *Core) SweepCache() int {
	if idx := c.vectors.idx.Load(); idx != nil {
		return idx.Sweep()
	}
	return 0
}

// semanticLookup is semantic mode's second look, after an exact miss:
// the request's last user message is embedded (through Options.Cache.Embed,
// as the caller's own embeddings call) and the nearest stored question of
// the same partition and context (the request without that message's
// content) answers when its cosine similarity is at least the policy's
// threshold, or the request's Flexway-Cache-Similarity when higher. On a
// miss the verdict keeps the vector, for the store to index. A request
// with no text last user message, an embedding that fails, or an index
// of another dimension is a miss. afford (the meter's reservation of the
// call's estimate) runs before the embedding, so that a call its budget
// refuses spends nothing: its error is returned.
func (c *Core) semanticLookup(ctx context.Context, st *call.State, v *call.CacheVerdict, chat *flexwayv1.CreateChatCompletionRequest,
	part cache.PartitionID, set *CacheSetting, streaming bool, afford func() error) (bool, error) {
	co := c.opts.Cache
	if co.Embed == nil {
		return false, nil
	}
	body, err := openaiwire.AppendChatCompletionRequest(nil, chat, openaiwire.Upstream{})
	if err != nil {
		return false, nil
	}
	ks, err := cache.NewKeys(body, true)
	if err != nil || !ks.Semantic || ks.Text == "" {
		return false, nil
	}
	if err := afford(); err != nil {
		return false, err
	}
	vec, err := co.Embed(ctx, st, ks.Text)
	if err != nil {
		c.log.InfoContext(ctx, "response cache: the question was not embedded; a miss", "request_id", st.RequestID, "error", err.Error())
		return false, nil
	}
	idx := c.vectorIndex(len(vec))
	if idx == nil {
		return false, nil
	}
	name := cache.IndexName(part, ks.Context)
	v.Index, v.Vector = name, vec
	m, ok := idx.Search(name, vec, float32(threshold(ctx, set.Similarity)))
	if !ok {
		return false, nil
	}
	k := cache.MakeStoreKey(part, m.ID)
	e, ok := co.Store.Get(ctx, k)
	if !ok {
		idx.Delete(name, m.ID) // the entry left the store: its vector goes too
		return false, nil
	}
	hit := *v
	hit.Key, hit.Entry = k, e
	if !c.decodeEntry(ctx, st, &hit, e, streaming) {
		return false, nil
	}
	*v = hit
	v.Similarity = m.Similarity
	return true, nil
}

// threshold is the similarity a semantic hit needs: the policy's, or the
// request's Flexway-Cache-Similarity when it is a number in (0, 1] above
// it (a caller may raise the bar, never lower it).
func threshold(ctx context.Context, policy float64) float64 {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, s := range md.Get(HeaderCacheSimilarity) {
		if f, err := strconv.ParseFloat(s, 64); err == nil && f > policy && f <= 1 {
			policy = f
		}
	}
	return policy
}

// indexStored adds a stored entry's question vector to the semantic
// index (semantic mode, after a miss that embedded it).
func (c *Core) indexStored(v *call.CacheVerdict) {
	if v.Vector == nil {
		return
	}
	if idx := c.vectorIndex(len(v.Vector)); idx != nil {
		_ = idx.Add(v.Index, v.Key.Key(), v.Vector, v.TTL) // full: not indexed, still found exactly
	}
}

// setSimilarityHeader sends a semantic hit's similarity.
func setSimilarityHeader(ctx context.Context, v *call.CacheVerdict) {
	if v.Similarity > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs(HeaderCacheSimilarity, strconv.FormatFloat(float64(v.Similarity), 'f', 4, 32)))
	}
}
