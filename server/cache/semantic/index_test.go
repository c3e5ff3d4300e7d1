package semantic

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/flexway/flexway/server/cache"
)

// clock is a settable clock for expiry.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newIndex(t testing.TB, dims int, maxBytes int64) (*Index, *clock) {
	t.Helper()
	c := &clock{t: time.Unix(1764672000, 0)}
	x, err := New(Options{Dims: dims, MaxBytes: maxBytes, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return x, c
}

func id(i int) cache.Key { return cache.Key{byte(i), byte(i >> 8), byte(i >> 16), 0xee} }

func randUnit(r *rand.Rand, dims int) []float32 {
	v := make([]float32, dims)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return unit(v)
}

func unit(v []float32) []float32 {
	var n float64
	for _, f := range v {
		n += float64(f) * float64(f)
	}
	inv := float32(1 / math.Sqrt(n))
	for i := range v {
		v[i] *= inv
	}
	return v
}

// near returns a unit vector at cosine about cos from the unit vector v.
func near(r *rand.Rand, v []float32, cos float64) []float32 {
	g := randUnit(r, len(v))
	// Remove g's component along v, then mix: cos·v + sin·g⊥.
	var d float32
	for i := range v {
		d += v[i] * g[i]
	}
	for i := range g {
		g[i] -= d * v[i]
	}
	g = unit(g)
	s := float32(math.Sqrt(1 - cos*cos))
	out := make([]float32, len(v))
	for i := range v {
		out[i] = float32(cos)*v[i] + s*g[i]
	}
	return out
}

var nameA, nameB = cache.Key{0xa}, cache.Key{0xb}

func TestSearchNearestWins(t *testing.T) {
	t.Parallel()
	x, _ := newIndex(t, 64, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	q := randUnit(r, 64)
	if err := x.Add(nameA, id(1), near(r, q, 0.96), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := x.Add(nameA, id(2), near(r, q, 0.98), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := x.Add(nameA, id(3), near(r, q, 0.5), time.Hour); err != nil {
		t.Fatal(err)
	}
	m, ok := x.Search(nameA, q, 0.95)
	if !ok || m.ID != id(2) || math.Abs(float64(m.Similarity)-0.98) > 1e-4 {
		t.Fatalf("Search = %+v, %v; want id 2 at 0.98", m, ok)
	}
	if _, ok := x.Search(nameA, q, 0.99); ok {
		t.Error("a threshold above every similarity found something")
	}
	// A scaled copy is the same direction: similarity 1.
	scaled := make([]float32, 64)
	for i, f := range q {
		scaled[i] = 3 * f
	}
	x.Add(nameA, id(4), scaled, time.Hour)
	if m, ok := x.Search(nameA, q, 0.999); !ok || m.ID != id(4) || m.Similarity > 1 {
		t.Errorf("scaled copy: %+v, %v", m, ok)
	}
}

// TestOtherNameNeverFound: a search reads its own name's vectors only;
// the same vector under another partition's name is a miss, by
// construction.
func TestOtherNameNeverFound(t *testing.T) {
	t.Parallel()
	x, _ := newIndex(t, 64, 1<<20)
	r := rand.New(rand.NewPCG(3, 4))
	v := randUnit(r, 64)
	x.Add(nameA, id(1), v, time.Hour)
	if _, ok := x.Search(nameB, v, -1); ok {
		t.Fatal("found under another name")
	}
	acme := cache.IndexName(cache.Partition{Tenant: "acme"}.ID(), cache.Key{1})
	globex := cache.IndexName(cache.Partition{Tenant: "globex"}.ID(), cache.Key{1})
	x.Add(acme, id(2), v, time.Hour)
	if _, ok := x.Search(globex, v, -1); ok {
		t.Fatal("tenant B found tenant A's vector")
	}
	if m, ok := x.Search(acme, v, 0.999); !ok || m.ID != id(2) {
		t.Fatalf("tenant A misses its own: %+v %v", m, ok)
	}
}

func TestTTLAndSweep(t *testing.T) {
	t.Parallel()
	x, c := newIndex(t, 64, 1<<20)
	r := rand.New(rand.NewPCG(5, 6))
	v := randUnit(r, 64)
	x.Add(nameA, id(1), v, time.Minute)
	x.Add(nameA, id(2), near(r, v, 0.97), time.Hour)
	if m, _ := x.Search(nameA, v, 0.9); m.ID != id(1) {
		t.Fatalf("before expiry: %+v", m)
	}
	c.add(time.Minute)
	if m, ok := x.Search(nameA, v, 0.9); !ok || m.ID != id(2) {
		t.Fatalf("after id 1 expired: %+v, %v; want id 2", m, ok)
	}
	if n := x.Sweep(); n != 1 || x.Len(nameA) != 1 || x.Bytes() != x.VectorBytes() {
		t.Errorf("Sweep = %d, Len %d, Bytes %d", n, x.Len(nameA), x.Bytes())
	}
	c.add(time.Hour)
	if n := x.Sweep(); n != 1 || x.Bytes() != 0 || x.Len(nameA) != 0 {
		t.Errorf("second Sweep = %d, Bytes %d", n, x.Bytes())
	}
	x.mu.RLock()
	left := len(x.names)
	x.mu.RUnlock()
	if left != 0 {
		t.Errorf("%d empty names kept", left)
	}
	// The name comes back with an Add.
	if err := x.Add(nameA, id(3), v, time.Hour); err != nil || x.Len(nameA) != 1 {
		t.Errorf("Add after the name was dropped: %v, Len %d", err, x.Len(nameA))
	}
}

func TestDeleteAndReplace(t *testing.T) {
	t.Parallel()
	x, _ := newIndex(t, 64, 1<<20)
	r := rand.New(rand.NewPCG(7, 8))
	vs := make([][]float32, 5)
	for i := range vs {
		vs[i] = randUnit(r, 64)
		x.Add(nameA, id(i), vs[i], time.Hour)
	}
	if !x.Delete(nameA, id(1)) || x.Delete(nameA, id(1)) || x.Delete(nameB, id(1)) {
		t.Fatal("Delete reports")
	}
	if m, ok := x.Search(nameA, vs[1], 0.99); ok {
		t.Errorf("deleted id found: %+v", m)
	}
	// The last vector moved into the hole and is still found as itself.
	for _, i := range []int{0, 2, 3, 4} {
		if m, ok := x.Search(nameA, vs[i], 0.999); !ok || m.ID != id(i) {
			t.Errorf("id %d after a delete: %+v, %v", i, m, ok)
		}
	}
	// Adding an id again replaces its vector.
	x.Add(nameA, id(0), vs[1], time.Hour)
	if m, ok := x.Search(nameA, vs[1], 0.999); !ok || m.ID != id(0) || x.Len(nameA) != 4 {
		t.Errorf("replace: %+v, %v, Len %d", m, ok, x.Len(nameA))
	}
}

// TestBounded: MaxBytes holds; a full name gives up its soonest-expiring
// vector; a name with nothing to give is refused.
func TestBounded(t *testing.T) {
	t.Parallel()
	const per = 4*64 + 8 + 16 + 96 // float32s, code, sketch, id/expiry/slot
	x, _ := newIndex(t, 64, 3*per)
	if x.VectorBytes() != per {
		t.Fatalf("VectorBytes = %d, want %d", x.VectorBytes(), per)
	}
	r := rand.New(rand.NewPCG(9, 10))
	v := make([][]float32, 5)
	for i := range v {
		v[i] = randUnit(r, 64)
	}
	x.Add(nameA, id(0), v[0], 3*time.Hour)
	x.Add(nameA, id(1), v[1], time.Hour) // soonest
	x.Add(nameA, id(2), v[2], 2*time.Hour)
	if err := x.Add(nameA, id(3), v[3], 4*time.Hour); err != nil {
		t.Fatal(err)
	}
	if x.Bytes() != 3*per || x.Len(nameA) != 3 {
		t.Errorf("Bytes %d, Len %d", x.Bytes(), x.Len(nameA))
	}
	if _, ok := x.Search(nameA, v[1], 0.999); ok {
		t.Error("the soonest-expiring vector was kept")
	}
	if err := x.Add(nameB, id(4), v[4], time.Hour); !errors.Is(err, ErrFull) {
		t.Errorf("Add to an empty name of a full index: %v, want ErrFull", err)
	}
}

func TestBadVectors(t *testing.T) {
	t.Parallel()
	x, _ := newIndex(t, 4, 1<<20)
	for _, v := range [][]float32{nil, {1, 2, 3}, {0, 0, 0, 0}, {1, float32(math.NaN()), 0, 0}, {float32(math.Inf(1)), 0, 0, 0}} {
		if err := x.Add(nameA, id(1), v, time.Hour); err == nil {
			t.Errorf("Add(%v) accepted", v)
		}
		if _, ok := x.Search(nameA, v, -1); ok {
			t.Errorf("Search(%v) found", v)
		}
	}
	if err := x.Add(nameA, id(1), []float32{1, 0, 0, 0}, 0); err == nil {
		t.Error("ttl 0 accepted")
	}
	if _, err := New(Options{Dims: 0, MaxBytes: 1}); err == nil {
		t.Error("Dims 0 accepted")
	}
}

// TestConcurrent: searches, adds, deletes and sweeps together (run with
// -race); the byte count stays exact.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	x, c := newIndex(t, 64, 200*(4*64+8+16+96))
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 11))
			name := cache.Key{byte(g % 2)}
			for i := 0; i < 300; i++ {
				v := randUnit(r, 64)
				x.Add(name, id(g*1000+i), v, time.Duration(1+i%5)*time.Minute)
				x.Search(name, v, 0.9)
				if i%7 == 0 {
					x.Delete(name, id(g*1000+i-3))
				}
				if i%50 == 0 {
					c.add(time.Minute)
					x.Sweep()
				}
			}
		}(g)
	}
	wg.Wait()
	total := 0
	for _, n := range []cache.Key{{0}, {1}} {
		total += x.Len(n)
	}
	if x.Bytes() != int64(total)*x.VectorBytes() || x.Bytes() > 200*x.VectorBytes() {
		t.Errorf("Bytes %d for %d vectors", x.Bytes(), total)
	}
}
