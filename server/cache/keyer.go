package cache

import (
	"crypto/sha256"
	"sync"
)

// Keyer is [NewKeys] with a memo: the keys of a body are remembered under
// the SHA-256 of its raw bytes, so that a body sent again byte for byte
// (the repeated questions a cache is for: FAQ bots, evaluation runs,
// retries) costs one hash of its bytes instead of the canonical pass. The
// keys are still those of the canonical form: the memo only remembers
// what NewKeys returned for the same bytes, and a body in another form
// (keys reordered, numbers respelled) is computed and finds the same
// entry. Safe for concurrent use.
type Keyer struct {
	maxBytes int
	mu       sync.Mutex
	memo     map[[32]byte]memoKeys
	bytes    int
}

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
	return &Keyer{maxBytes: maxBytes, memo: map[[32]byte]memoKeys{}}
}

// Keys is NewKeys(body, withSemantic), remembered.
func (k *Keyer) Keys(body []byte, withSemantic bool) (Keys, error) {
	raw := sha256.Sum256(body)
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
