package semantic

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/flexway/flexway/server/cache"
)

// dataset is stored vectors and queries with the brute-force answers.
type dataset struct {
	vecs    [][]float32
	queries [][]float32
	answers map[float32][]answer // by threshold, computed once
}

type answer struct {
	id int
	ok bool
}

// answersAt are the brute-force answers to the queries at threshold.
func (d *dataset) answersAt(threshold float32) []answer {
	if a, ok := d.answers[threshold]; ok {
		return a
	}
	var as []answer
	for _, q := range d.queries {
		i, _, ok := bruteForce(*d, q, threshold)
		as = append(as, answer{i, ok})
	}
	if d.answers == nil {
		d.answers = map[float32][]answer{}
	}
	d.answers[threshold] = as
	return as
}

// randomData: n random unit vectors; queries are stored vectors moved to
// a cosine in [0.90, 0.995] of their source, and a fifth random (no
// answer at the thresholds used).
func randomData(n, dims, queries int, seed uint64) dataset {
	r := rand.New(rand.NewPCG(seed, 1))
	var d dataset
	for i := 0; i < n; i++ {
		d.vecs = append(d.vecs, randUnit(r, dims))
	}
	d.queries = makeQueries(r, d.vecs, queries)
	return d
}

// clusteredData: n vectors in n/size clusters of size members, each at
// cosine spread from its cluster's centre (0.93: members about 0.86 from
// each other; 0.96: about 0.92, an FAQ's paraphrases crowding the query).
func clusteredData(n, size, dims, queries int, spread float64, seed uint64) dataset {
	r := rand.New(rand.NewPCG(seed, 2))
	var d dataset
	for len(d.vecs) < n {
		c := randUnit(r, dims)
		for j := 0; j < size && len(d.vecs) < n; j++ {
			d.vecs = append(d.vecs, near(r, c, spread))
		}
	}
	d.queries = makeQueries(r, d.vecs, queries)
	return d
}

func makeQueries(r *rand.Rand, vecs [][]float32, n int) [][]float32 {
	var qs [][]float32
	for i := 0; i < n; i++ {
		if i%5 == 4 {
			qs = append(qs, randUnit(r, len(vecs[0])))
			continue
		}
		qs = append(qs, near(r, vecs[r.IntN(len(vecs))], 0.90+0.095*r.Float64()))
	}
	return qs
}

func build(t testing.TB, d *dataset, candidates, prefilter int) *Index {
	t.Helper()
	dims := len(d.vecs[0])
	x, err := New(Options{Dims: dims, MaxBytes: int64(len(d.vecs)) * int64(4*dims+dims/8+200), Candidates: candidates, Prefilter: prefilter})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range d.vecs {
		if err := x.Add(nameA, id(i), v, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

// bruteForce is the exact answer: the nearest stored vector at or above
// threshold, by a float32 dot over every vector.
func bruteForce(d dataset, q []float32, threshold float32) (int, float32, bool) {
	best, bestSim := -1, float32(-2)
	for i, v := range d.vecs {
		if s := dot(q, v); s > bestSim {
			best, bestSim = i, s
		}
	}
	return best, bestSim, bestSim >= threshold
}

// recall is the fraction of queries on which Search gives the
// brute-force answer (the same id, or both nothing).
func recall(x *Index, d *dataset, threshold float32) float64 {
	agree := 0
	for i, q := range d.queries {
		want := d.answersAt(threshold)[i]
		m, ok := x.Search(nameA, q, threshold)
		if ok == want.ok && (!ok || m.ID == id(want.id)) {
			agree++
		}
	}
	return float64(agree) / float64(len(d.queries))
}

// TestRecall: against brute force, on random and clustered data (small
// enough for -race; the 100,000-vector figures are the benchmarks').
func TestRecall(t *testing.T) {
	t.Parallel()
	n, qs := 4000, 100
	if raceEnabled {
		n, qs = 600, 30
	}
	for _, tc := range []struct {
		name string
		d    dataset
		min  float64
	}{
		{"random", randomData(n, 768, qs, 1), 1},
		{"clustered", clusteredData(n, 200, 768, qs, 0.93, 2), 0.98},
		{"tight_clusters", clusteredData(n, 200, 768, qs, 0.96, 6), 0.98},
	} {
		x := build(t, &tc.d, 0, 0)
		for _, th := range []float32{0.9, 0.95} {
			if got := recall(x, &tc.d, th); got < tc.min {
				t.Errorf("%s, threshold %v: recall %.3f, want ≥ %.2f", tc.name, th, got, tc.min)
			}
		}
	}
}

var sink float32

// BenchmarkBruteForce100k is the floor: a float32 dot with every one of
// 100,000 vectors of 768 dimensions (77 M multiply-adds).
func BenchmarkBruteForce100k(b *testing.B) {
	d := randomData(100000, 768, 20, 3)
	b.ResetTimer()
	i := 0
	for b.Loop() {
		_, s, _ := bruteForce(d, d.queries[i%len(d.queries)], 0.95)
		sink += s
		i++
	}
}

// BenchmarkSearch100k is one search over 100,000 vectors of 768
// dimensions in one name; recall (against brute force, threshold 0.95,
// 100 queries) is reported as a metric.
func BenchmarkSearch100k(b *testing.B) {
	for _, tc := range []struct {
		name string
		data func() dataset
	}{
		{"random", func() dataset { return randomData(100000, 768, 100, 4) }},
		{"clustered", func() dataset { return clusteredData(100000, 1000, 768, 100, 0.93, 5) }},
		{"tight_clusters", func() dataset { return clusteredData(100000, 1000, 768, 100, 0.96, 7) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			d := tc.data()
			for _, c := range [][2]int{{16, 256}, {32, 512}, {64, 512}, {64, 2048}} {
				b.Run("candidates="+itoa(c[0])+"/prefilter="+itoa(c[1]), func(b *testing.B) {
					x := build(b, &d, c[0], c[1])
					r := recall(x, &d, 0.95)
					b.ResetTimer()
					i := 0
					for b.Loop() {
						x.Search(nameA, d.queries[i%len(d.queries)], 0.95)
						i++
					}
					b.ReportMetric(r, "recall")
				})
			}
		})
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

var _ = cache.Key{}
