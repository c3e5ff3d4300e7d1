package cache

import (
	"hash/maphash"
	"sync"
)

// Keyer is [NewKeys] with a memo: the keys of a body are remembered under
// a 128-bit hash of its raw bytes (two [maphash] sums with this process's
// random seeds: never shared, never shown, so that no caller can aim at a
// collision; about 0.5 µs for 4 KiB where SHA-256 takes 2.5 µs), so that
// a body sent again byte for byte
// (the repeated questions a cache is for: FAQ bots, evaluation runs,
// retries) costs one hash of its bytes instead of the canonical pass. The
// keys are still those of the canonical form: the memo only remembers
// what NewKeys returned for the same bytes, and a body in another form
// (keys reordered, numbers respelled) is computed and finds the same
// entry. Safe for concurrent use.
type Keyer struct {
	maxBytes int
	seeds    [2]maphash.Seed
	mu       sync.Mutex
	memo     map[rawHash]memoKeys
	bytes    int
}

// rawHash is the memo's key: two 64-bit maphash sums of a body.
type rawHash [2]uint64

// memoKeys are the keys remembered for a body: exact alone, or with the
// semantic keys.
type memoKeys struct {
	ks       Keys
	semantic bool // computed withSemantic
}

// memoCost is what a remembered body costs besides its text, in bytes.
const memoCost = 160

// NewKeyer returns a Keyer remembering at most maxBytes of keys (about
// 160 bytes a body plus its last user message's text); when full, it
// forgets everything and starts again.
func NewKeyer(maxBytes int) *Keyer {
	return &Keyer{maxBytes: maxBytes, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, memo: map[rawHash]memoKeys{}}
}

// Keys is NewKeys(body, withSemantic), remembered.
func (k *Keyer) Keys(body []byte, withSemantic bool) (Keys, error) {
	raw := rawHash{maphash.Bytes(k.seeds[0], body), maphash.Bytes(k.seeds[1], body)}
	k.mu.Lock()
	m, ok := k.memo[raw]
	k.mu.Unlock()
	if ok && (m.semantic || !withSemantic) {
		if !withSemantic {
			return Keys{Exact: m.ks.Exact}, nil
		}
		return m.ks, nil
	}
	ks, err := NewKeys(body, withSemantic)
	if err != nil {
		return ks, err
	}
	cost := memoCost + len(ks.Text)
	k.mu.Lock()
	if k.bytes+cost > k.maxBytes {
		clear(k.memo)
		k.bytes = 0
	}
	if _, had := k.memo[raw]; !had {
		k.bytes += cost
	}
	k.memo[raw] = memoKeys{ks: ks, semantic: withSemantic}
	k.mu.Unlock()
	return ks, nil
}
