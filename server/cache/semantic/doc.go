// Package semantic is the vector index of the response cache's semantic
// mode (issue 18): per index name (a partition and a context key, see
// [cache.IndexName]), the embeddings of the last user messages of stored
// entries; a lookup returns the nearest entry whose cosine similarity to
// the query is at least the threshold. Names are a filter applied before
// any similarity is computed: a search reads one name's vectors and no
// other's.
//
// The search is a filter in three steps, the last one exact. Each vector
// is normalised to unit length and kept three ways: its float32 copy; its
// code, the signs of its coordinates (768 dimensions: 12 words); and its
// sketch, the signs of its projections on 128 fixed random hyperplanes
// (SimHash: 2 words). The fraction of differing sign bits estimates the
// angle between two vectors, so a vector at cosine 0.95 differs in about
// 10% of the bits and an unrelated one in about 50%. A search computes the
// Hamming distance of the query's sketch to every live sketch of the name
// (16 bytes a vector, XOR and POPCNT) with its histogram, takes the
// Prefilter nearest (default 512), compares their full codes and keeps the
// Candidates nearest (default 32), and computes the exact float32 cosine
// of those only: the answer is the best of them at or above the
// threshold, with its exact similarity. The true nearest is missed only
// when hundreds of vectors crowd it within a few degrees; recall against
// brute force is measured on random and clustered data (recall_test.go).
// Figures, 100,000 vectors of 768 dimensions in one name, this 2-core
// machine shared with other work (load ~1.6–3), 2,000 searches each:
// brute force (a float32 dot with every vector, 77 M multiply-adds) 55 ms,
// the floor; a search with the defaults (Candidates 32, Prefilter 512)
// 0.97 ms on random vectors, 0.85 ms on clustered ones (clusters of 1,000
// at cosine 0.93 from their centre), 0.79 ms on tight clusters (0.96):
// 57–70× brute force, recall 1.000 against it on 100 queries of each
// (stored vectors moved to a cosine of 0.90–0.995, one in five random,
// threshold 0.95). Candidates 16, Prefilter 256: 0.62–0.78 ms, also 1.000.
// Of a search, about 45% is the sketch pass, 35% the full codes of the
// prefiltered (cache misses), 10% the query's sketch (128×768
// multiply-adds), the rest the rerank. An Add costs the same sketch,
// ~70 µs.
//
// Why not a graph (HNSW): no maintained Go library is in the module set
// this project draws from, a graph over 100,000 vectors of 768 dimensions
// takes minutes to build on two cores, and deletion (TTL expiry is
// constant here) degrades a graph; a flat scan deletes in O(dims) (the
// last vector moves into the hole) and costs exactly what it holds.
//
// Memory is bounded by Options.MaxBytes over all names: a vector costs
// 4×dims (the float32 copy) + dims/8 (its code) + 96 bytes (id, expiry,
// map slot). An Add that would pass the bound first removes the name's
// expired vectors, then its soonest-expiring one; with nothing of its
// own to remove it is refused with [ErrFull]. Expired vectors are skipped
// by searches at once and freed by [Index.Sweep] (call it on a ticker) or
// by Adds to their name. A name with no vectors left is dropped.
//
// The codes are signs of the raw coordinates, so they assume embeddings
// centred near zero (as sentence-embedding models produce); a model whose
// coordinates share a large common offset would make the codes less
// selective (recall, not correctness: the rerank is exact).
package semantic
