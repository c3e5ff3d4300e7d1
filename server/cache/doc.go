// Package cache holds the parts of the response cache of issue 18 (stages 6
// and 15 of DESIGN.md's AI pipeline) that every store shares: the key of a
// request, the partition it is looked up in, and the stored [Entry] with
// its versioned encoding. It is pure: no I/O, no configuration types. The
// stores are its subpackages: memstore (ristretto, this process),
// redisstore (exact entries shared between replicas) and semantic (the
// per-partition vector index of semantic mode, per replica).
//
// An entry is found only by a call with the same [Partition] (tenant,
// resolved alias and arm, planned backend and model, operation, the
// sensitivity flag) and the same [Key]. The partition is a separate value:
// its [PartitionID] is the first half of every store key and the name of
// every semantic index, so a lookup under another partition cannot reach
// the entry whatever the request says; nothing of it is hashed into the
// request key or embedded.
//
// The key is SHA-256 over a canonical form of the request's JSON, decided
// from the bytes the caller sent rather than the decoded proto
// (gen/flexway/v1): a field Flexway does not model is kept there as raw
// JSON text in ExtraFields, which would have to be canonicalised anyway,
// and one pass over the bytes keys known and unknown fields alike, before
// any decoding, with no dependence on the proto's shape. SHA-256 because
// a key names an answer: within a tenant, a collision someone could craft
// would serve one user's answer to another.
//
// The canonical form: object members sorted by their key (length first, then
// bytes: any fixed order will do, and this is the order clients already
// write "role" and "content" in, so most objects need no moving), strings
// unescaped (so "\u0041" and "A" are one string), numbers as exact
// decimals (1, 1.0, 1e0 and 10e-1 are one number; -0 is 0; no float
// rounding, so seeds above 2^53 stay distinct), whitespace dropped. Every
// member is keyed except model (the partition holds the resolved route),
// stream and stream_options (a hit is replayed in the caller's mode):
// messages, tools, tool_choice, response_format, temperature, top_p, seed,
// max_tokens, max_completion_tokens, n, stop, logit_bias, user, metadata
// and every unknown field change the key.
//
// Semantic mode also gets the context key (the same hash with the content
// of the last user message replaced by a marker, so its position and its
// other members still count) and that message's text; the caller embeds
// the text and searches the semantic index named by the partition and the
// context key.
//
// Figures (bench_test.go, a 4 KiB chat request with ~90 \u and \"
// escapes; this 2-core machine shared with other work, load ~1.6, five
// runs): ExactKey 10.0–11.9 µs, 3.4–3.9× a bare SHA-256 of the same bytes
// (2.96–3.02 µs) and about half of encoding/json.Valid (14.7–24.6 µs);
// without the escapes 7.6–8.4 µs (2.6–2.8×); ExactLookup (key, partition
// ID, a memory-store hit among 10,000) 10.5–13.0 µs, 3.5–4.3× SHA-256
// alone, over issue 18's 5 µs: the hash alone takes 3 µs here, and the
// parse and canonical copy the rest (half the time in SHA-256 and string
// scanning, the rest spread over the token loop); NewKeys with semantic
// keys 14.9–16.8 µs (two hashes). No allocation but one 32-byte string in
// semantic mode.
//
// A [Keyer] remembers the keys of bodies by the SHA-256 of their raw bytes
// (a memo, never a key: the key stays the canonical one), so that the
// question asked again byte for byte, the case a cache exists for, skips
// the canonical pass: BenchmarkExactLookupRepeated 3.8–4.1 µs, 1.27–1.35×
// SHA-256 alone (3.02–3.07 µs in the same run), within issue 18's 5 µs; a
// body seen for the first time pays the 10.5–13 µs above.
package cache
