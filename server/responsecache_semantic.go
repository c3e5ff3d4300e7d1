package server

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/cache/semantic"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// HeaderCacheSimilarity is the header metadata key of a semantic hit's
// cosine similarity (Flexway-Cache-Similarity: 0.9731), and of the
// request's own threshold, which may raise the policy's, never lower it.
const HeaderCacheSimilarity = "flexway-cache-similarity"

// vectors is the semantic index of this process, made at the first
// embedding at its dimension (the embedding model's), and made anew when
// an embedding of another dimension arrives (another model: the stored
// vectors cannot be compared with its).
type vectors struct {
	mu  sync.Mutex // held while the index is made
	idx atomic.Pointer[semantic.Index]
	// logged is when a change of dimension was last logged (Unix
	// seconds): at most once a minute.
	logged atomic.Int64
}

// vectorIndex returns the index for the question vectors of dims, made
// at the first call and made anew, empty, when dims differs from the
// index's; nil when dims is 0 or no index of dims can be made.
func (c *Core) vectorIndex(dims int) *semantic.Index {
	if idx := c.vectors.idx.Load(); idx != nil && idx.Dims() == dims {
		return idx
	}
	c.vectors.mu.Lock()
	defer c.vectors.mu.Unlock()
	old := c.vectors.idx.Load()
	if old != nil && old.Dims() == dims {
		return old
	}
	maxBytes := c.opts.Cache.VectorBytes
	if maxBytes <= 0 {
		maxBytes = 64 << 20
	}
	idx, err := semantic.New(semantic.Options{Dims: dims, MaxBytes: maxBytes})
	if err != nil {
		return nil // dims 0: an empty embedding
	}
	if old != nil {
		if now := time.Now().Unix(); now-c.vectors.logged.Swap(now) >= 60 {
			c.log.Warn("response cache: the embeddings backend changed dimension; the semantic index starts anew (its questions are still found exactly)",
				"index_dims", old.Dims(), "dims", dims)
		}
	}
	c.vectors.idx.Store(idx)
	return idx
}

// currentIndex returns the semantic index when its dimension is dims,
// nil otherwise (a vector embedded before the index changed dimension).
func (c *Core) currentIndex(dims int) *semantic.Index {
	if idx := c.vectors.idx.Load(); idx != nil && idx.Dims() == dims {
		return idx
	}
	return nil
}

// SweepCache frees the semantic index's expired vectors; the gateway
// calls it on a ticker. It returns how many it freed.
func (c *Core) SweepCache() int {
	c.flights.Sweep()
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
// with no text last user message, or an embedding that fails, is a
// miss; an embedding of another dimension than the index's makes the
// index anew ([Core.vectorIndex]). afford (the meter's reservation of the
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
// request's Flexway-Cache-Similarity when above it (a caller may raise
// the bar, never lower it; of several values the highest).
// [checkSimilarityHeader] has refused a value that is not a decimal in
// (0, 1].
func threshold(ctx context.Context, policy float64) float64 {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, s := range md.Get(HeaderCacheSimilarity) {
		if f, ok := similarity(s); ok && f > policy {
			policy = f
		}
	}
	return policy
}

// similarity parses a Flexway-Cache-Similarity value: a plain decimal
// number (digits, at most one point, nothing else: no sign, exponent or
// hex form) in (0, 1], spaces around it allowed.
func similarity(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	digits, point := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !point:
			point = true
		default:
			return 0, false
		}
	}
	if digits == 0 || digits > 20 {
		return 0, false
	}
	whole, frac, _ := strings.Cut(s, ".")
	switch strings.TrimLeft(whole, "0") {
	case "": // below 1
	case "1":
		if strings.Trim(frac, "0") != "" {
			return 0, false // above 1, by less than a float64 may tell
		}
	default:
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil && f > 0
}

// checkSimilarityHeader refuses, with faults.InvalidRequest, a request
// whose Flexway-Cache-Similarity is not a decimal in (0, 1]: a caller
// that meant to raise the bar is told, rather than answered at the
// policy's.
func checkSimilarityHeader(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, s := range md.Get(HeaderCacheSimilarity) {
		if _, ok := similarity(s); !ok {
			return faults.New(faults.InvalidRequest, "Flexway-Cache-Similarity must be a number in (0, 1], such as 0.97; got %.32q", s)
		}
	}
	return nil
}

// indexStored adds a stored entry's question vector to the semantic
// index (semantic mode, after a miss that embedded it).
func (c *Core) indexStored(v *call.CacheVerdict) {
	if v.Vector == nil {
		return
	}
	if idx := c.currentIndex(len(v.Vector)); idx != nil {
		_ = idx.Add(v.Index, v.Key.Key(), v.Vector, v.TTL) // full: not indexed, still found exactly
	}
}

// setSimilarityHeader sends a semantic hit's similarity.
func setSimilarityHeader(ctx context.Context, v *call.CacheVerdict) {
	if v.Similarity > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs(HeaderCacheSimilarity, strconv.FormatFloat(float64(v.Similarity), 'f', 4, 32)))
	}
}
