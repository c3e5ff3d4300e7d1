package semantic

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexway/flexway/server/cache"
)

// ErrFull is returned by [Index.Add] when the vector would pass
// Options.MaxBytes and its name has nothing to give up.
var ErrFull = errors.New("semantic: index full")

// Options configures an [Index].
type Options struct {
	// Dims is the vectors' dimension (768 typical). Required, > 0.
	Dims int
	// MaxBytes bounds the memory of all vectors, in bytes. Required, > 0.
	MaxBytes int64
	// Candidates is how many nearest 1-bit codes a search reranks with
	// the exact cosine. Optional; default 32.
	Candidates int
	// Prefilter is how many nearest SimHash sketches a search compares by
	// their full codes. Optional; default 16 × Candidates.
	Prefilter int
	// Now is the clock for expiry. Optional; default time.Now.
	Now func() time.Time
}

// Match is a search's answer.
type Match struct {
	// ID is the id the vector was added with (the entry's request key).
	ID cache.Key
	// Similarity is the cosine similarity to the query, in [-1, 1].
	Similarity float32
}

// Index holds the vectors of every name. Safe for concurrent use:
// searches of one name run in parallel with each other and wait for its
// Adds and Deletes.
type Index struct {
	o      Options
	words  int       // uint64 words of a code
	planes []float32 // sketchBits hyperplanes of Dims, row after row
	cost   int64     // bytes of one vector
	bytes  atomic.Int64

	mu    sync.RWMutex
	names map[cache.Key]*part
}

// part is one name's vectors, slot i at codes[i*words:], vecs[i*dims:].
type part struct {
	mu      sync.RWMutex
	codes   []uint64 // sign bits of the coordinates, words a vector
	sketch  []uint64 // SimHash sketch, sketchWords a vector
	vecs    []float32
	ids     []cache.Key
	expires []int64 // Unix ns
	slot    map[cache.Key]int
	dead    bool // dropped from names by Sweep: Add must look again
}

// New returns an empty index.
func New(o Options) (*Index, error) {
	if o.Dims <= 0 || o.MaxBytes <= 0 {
		return nil, fmt.Errorf("semantic: Dims and MaxBytes must be > 0 (got %d, %d)", o.Dims, o.MaxBytes)
	}
	if o.Candidates <= 0 {
		o.Candidates = 32
	}
	if o.Prefilter <= 0 {
		o.Prefilter = 16 * o.Candidates
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	words := (o.Dims + 63) / 64
	// The sketch's hyperplanes: fixed, so that every index of a process
	// and every run sketches alike.
	r := rand.New(rand.NewPCG(0x666c6578, 0x77617921))
	planes := make([]float32, sketchBits*o.Dims)
	for i := range planes {
		planes[i] = float32(r.NormFloat64())
	}
	return &Index{o: o, words: words, planes: planes, cost: int64(4*o.Dims + 8*words + 8*sketchWords + 96), names: map[cache.Key]*part{}}, nil
}

// VectorBytes is what one vector costs against Options.MaxBytes.
func (x *Index) VectorBytes() int64 { return x.cost }

// Bytes is the memory the vectors hold now, in bytes.
func (x *Index) Bytes() int64 { return x.bytes.Load() }

// Len is the number of vectors under name, expired ones not yet swept
// included.
func (x *Index) Len(name cache.Key) int {
	p := x.part(name, false)
	if p == nil {
		return 0
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.ids)
}

func (x *Index) part(name cache.Key, create bool) *part {
	x.mu.RLock()
	p := x.names[name]
	x.mu.RUnlock()
	if p != nil || !create {
		return p
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if p = x.names[name]; p == nil {
		p = &part{slot: map[cache.Key]int{}}
		x.names[name] = p
	}
	return p
}

// normalise writes v / |v| into dst and reports false for a vector of the
// wrong dimension, zero, or not finite.
func (x *Index) normalise(dst, v []float32) bool {
	if len(v) != x.o.Dims {
		return false
	}
	var n float64
	for _, f := range v {
		n += float64(f) * float64(f)
	}
	if n == 0 || math.IsInf(n, 0) || math.IsNaN(n) {
		return false
	}
	inv := float32(1 / math.Sqrt(n))
	for i, f := range v {
		dst[i] = f * inv
	}
	return true
}

// sketchBits is the size of the SimHash sketch: the signs of a vector's
// projections on that many random hyperplanes.
const (
	sketchBits  = 128
	sketchWords = sketchBits / 64
)

// sketch writes the SimHash sketch of v into dst.
func (x *Index) sketchOf(dst []uint64, v []float32) {
	clear(dst)
	d := x.o.Dims
	for j := 0; j < sketchBits; j++ {
		if dot(v, x.planes[j*d:(j+1)*d]) > 0 {
			dst[j>>6] |= 1 << (j & 63)
		}
	}
}

// code writes the sign bits of v into dst.
func code(dst []uint64, v []float32) {
	clear(dst)
	for i, f := range v {
		if f > 0 {
			dst[i>>6] |= 1 << (i & 63)
		}
	}
}

// Add stores vec (any length but Dims is refused; it is normalised, the
// caller's slice is not kept) as id under name, for ttl (> 0). Adding an
// id already under name replaces its vector. Errors: a bad vector or ttl,
// [ErrFull].
func (x *Index) Add(name, id cache.Key, vec []float32, ttl time.Duration) error {
	if ttl <= 0 {
		return errors.New("semantic: ttl must be > 0")
	}
	unit := make([]float32, x.o.Dims)
	if !x.normalise(unit, vec) {
		return fmt.Errorf("semantic: vector of %d dimensions, zero or not finite (want %d)", len(vec), x.o.Dims)
	}
	now := x.o.Now().UnixNano()
	exp := now + int64(ttl)
	var p *part
	for {
		p = x.part(name, true)
		p.mu.Lock()
		if !p.dead {
			break
		}
		p.mu.Unlock()
	}
	defer p.mu.Unlock()
	if i, ok := p.slot[id]; ok {
		x.set(p, i, unit, exp)
		return nil
	}
	// Reserve the bytes first, so that concurrent Adds never pass the
	// bound together.
	for x.bytes.Add(x.cost) > x.o.MaxBytes {
		x.bytes.Add(-x.cost)
		if x.sweepLocked(p, now) > 0 {
			continue
		}
		if len(p.ids) == 0 {
			return ErrFull
		}
		soonest := 0
		for i, e := range p.expires {
			if e < p.expires[soonest] {
				soonest = i
			}
		}
		x.removeLocked(p, soonest)
	}
	i := len(p.ids)
	p.ids = append(p.ids, id)
	p.expires = append(p.expires, 0)
	p.codes = append(p.codes, make([]uint64, x.words)...)
	p.sketch = append(p.sketch, make([]uint64, sketchWords)...)
	p.vecs = append(p.vecs, unit...)
	p.slot[id] = i
	x.set(p, i, unit, exp)
	return nil
}

func (x *Index) set(p *part, i int, unit []float32, exp int64) {
	copy(p.vecs[i*x.o.Dims:], unit)
	code(p.codes[i*x.words:(i+1)*x.words], unit)
	x.sketchOf(p.sketch[i*sketchWords:(i+1)*sketchWords], unit)
	p.expires[i] = exp
}

// removeLocked removes slot i, moving the last slot into it.
func (x *Index) removeLocked(p *part, i int) {
	last := len(p.ids) - 1
	delete(p.slot, p.ids[i])
	if i != last {
		p.ids[i] = p.ids[last]
		p.expires[i] = p.expires[last]
		copy(p.codes[i*x.words:(i+1)*x.words], p.codes[last*x.words:])
		copy(p.sketch[i*sketchWords:(i+1)*sketchWords], p.sketch[last*sketchWords:])
		copy(p.vecs[i*x.o.Dims:(i+1)*x.o.Dims], p.vecs[last*x.o.Dims:])
		p.slot[p.ids[i]] = i
	}
	p.ids = p.ids[:last]
	p.expires = p.expires[:last]
	p.codes = p.codes[:last*x.words]
	p.sketch = p.sketch[:last*sketchWords]
	p.vecs = p.vecs[:last*x.o.Dims]
	x.bytes.Add(-x.cost)
}

// sweepLocked removes p's vectors expired at now and returns how many.
func (x *Index) sweepLocked(p *part, now int64) int {
	n := 0
	for i := 0; i < len(p.ids); {
		if p.expires[i] <= now {
			x.removeLocked(p, i)
			n++
			continue
		}
		i++
	}
	return n
}

// Delete removes id from name (the entry was evicted, or found corrupt);
// it reports whether id was there.
func (x *Index) Delete(name, id cache.Key) bool {
	p := x.part(name, false)
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.slot[id]
	if ok {
		x.removeLocked(p, i)
	}
	return ok
}

// Sweep frees every expired vector and drops the names left empty; it
// returns how many vectors it freed.
func (x *Index) Sweep() int {
	now := x.o.Now().UnixNano()
	x.mu.RLock()
	parts := make(map[cache.Key]*part, len(x.names))
	for k, p := range x.names {
		parts[k] = p
	}
	x.mu.RUnlock()
	n := 0
	for name, p := range parts {
		p.mu.Lock()
		n += x.sweepLocked(p, now)
		empty := len(p.ids) == 0
		p.mu.Unlock()
		if empty {
			x.mu.Lock()
			p.mu.Lock()
			if len(p.ids) == 0 && x.names[name] == p {
				delete(x.names, name)
				p.dead = true
			}
			p.mu.Unlock()
			x.mu.Unlock()
		}
	}
	return n
}

// Search returns the vector under name nearest to vec by cosine
// similarity, if its similarity is at least threshold; expired vectors
// are never returned. A vec of the wrong dimension, zero or not finite
// finds nothing.
func (x *Index) Search(name cache.Key, vec []float32, threshold float32) (Match, bool) {
	p := x.part(name, false)
	if p == nil {
		return Match{}, false
	}
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	s.grow(x.o.Dims, x.words, x.o.Candidates)
	if !x.normalise(s.q, vec) {
		return Match{}, false
	}
	code(s.qcode, s.q)
	x.sketchOf(s.qsketch[:], s.q)
	now := x.o.Now().UnixNano()

	p.mu.RLock()
	defer p.mu.RUnlock()
	cand := x.nearestCodes(p, s, now)
	best, bestSim := -1, float32(-2)
	for _, c := range cand {
		i := int(c.slot)
		sim := dot(s.q, p.vecs[i*x.o.Dims:(i+1)*x.o.Dims])
		if sim > bestSim {
			best, bestSim = i, sim
		}
	}
	if best < 0 || bestSim < threshold {
		return Match{}, false
	}
	return Match{ID: p.ids[best], Similarity: min(bestSim, 1)}, true
}

// candidate is a slot and its code's Hamming distance to the query.
type candidate struct {
	dist int32
	slot int32
}

// nearestCodes returns up to Candidates live slots with the nearest
// codes, in two passes: the Hamming distance of every sketch (2 words a
// vector, so the pass reads 16 bytes a vector) into s.dist with its
// histogram, which gives the distance within which the Prefilter nearest
// sketches lie; then the full codes of those only, kept in a max-heap on
// distance so that a farther code is rejected with one comparison.
func (x *Index) nearestCodes(p *part, s *scratch, now int64) []candidate {
	n := len(p.ids)
	if cap(s.dist) < n {
		s.dist = make([]uint8, n)
	}
	dist := s.dist[:n]
	var hist [sketchBits + 1]int
	q0, q1 := s.qsketch[0], s.qsketch[1]
	sk := p.sketch[:2*n]
	for i := range dist {
		d := bits.OnesCount64(sk[2*i]^q0) + bits.OnesCount64(sk[2*i+1]^q1)
		dist[i] = uint8(d)
		hist[d]++
	}
	cutoff, below := 0, 0 // below: sketches nearer than cutoff
	for ; cutoff < sketchBits; cutoff++ {
		if below+hist[cutoff] >= x.o.Prefilter {
			break
		}
		below += hist[cutoff]
	}
	cut := uint8(cutoff)
	// Of the sketches at the cutoff distance, only as many as make up
	// Prefilter go on, so that the second pass fetches Prefilter codes at
	// most, however many tie.
	ties := x.o.Prefilter - below

	h := s.heap[:0]
	limit := x.o.Candidates
	q := s.qcode
	w := x.words
	codes := p.codes
	for i, sd := range dist {
		if sd >= cut {
			if sd > cut || ties <= 0 {
				continue
			}
			ties--
		}
		c := codes[i*w : i*w+w]
		var d int
		if w == 12 { // 768 dimensions: unrolled
			q := q[:12]
			d = bits.OnesCount64(c[0]^q[0]) + bits.OnesCount64(c[1]^q[1]) + bits.OnesCount64(c[2]^q[2]) +
				bits.OnesCount64(c[3]^q[3]) + bits.OnesCount64(c[4]^q[4]) + bits.OnesCount64(c[5]^q[5]) +
				bits.OnesCount64(c[6]^q[6]) + bits.OnesCount64(c[7]^q[7]) + bits.OnesCount64(c[8]^q[8]) +
				bits.OnesCount64(c[9]^q[9]) + bits.OnesCount64(c[10]^q[10]) + bits.OnesCount64(c[11]^q[11])
		} else {
			for j, v := range c {
				d += bits.OnesCount64(v ^ q[j])
			}
		}
		if len(h) == limit && int32(d) >= h[0].dist {
			continue
		}
		if p.expires[i] <= now {
			continue
		}
		if len(h) < limit {
			h = append(h, candidate{int32(d), int32(i)})
			up(h, len(h)-1)
		} else {
			h[0] = candidate{int32(d), int32(i)}
			down(h, 0)
		}
	}
	s.heap = h
	return h
}

func up(h []candidate, i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if h[parent].dist >= h[i].dist {
			return
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
}

func down(h []candidate, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		big := l
		if r := l + 1; r < len(h) && h[r].dist > h[l].dist {
			big = r
		}
		if h[i].dist >= h[big].dist {
			return
		}
		h[i], h[big] = h[big], h[i]
		i = big
	}
}

// dot is the dot product of a and b (equal lengths), eight lanes at a
// time.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		a8, b8 := a[i:i+8], b[i:i+8]
		s0 += a8[0] * b8[0]
		s1 += a8[1] * b8[1]
		s2 += a8[2] * b8[2]
		s3 += a8[3] * b8[3]
		s4 += a8[4] * b8[4]
		s5 += a8[5] * b8[5]
		s6 += a8[6] * b8[6]
		s7 += a8[7] * b8[7]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}

// scratch is a search's buffers, pooled.
type scratch struct {
	q       []float32
	qcode   []uint64
	qsketch [sketchWords]uint64
	dist    []uint8
	heap    []candidate
}

var scratchPool = sync.Pool{New: func() any { return &scratch{} }}

func (s *scratch) grow(dims, words, cands int) {
	if cap(s.q) < dims {
		s.q = make([]float32, dims)
	}
	s.q = s.q[:dims]
	if cap(s.qcode) < words {
		s.qcode = make([]uint64, words)
	}
	s.qcode = s.qcode[:words]
	if cap(s.heap) < cands {
		s.heap = make([]candidate, 0, cands)
	}
}

// Dims is the dimension of the index's vectors (Options.Dims).
func (x *Index) Dims() int { return x.o.Dims }
