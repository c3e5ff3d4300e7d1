package credentials_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexway/flexway/server/backends/credentials"
)

func newPool(t testing.TB, strategy string, weights ...int) *credentials.Pool {
	t.Helper()
	keys := make([]credentials.Key, len(weights))
	for i, w := range weights {
		keys[i] = credentials.Key{Name: string(rune('a' + i)), Weight: w}
	}
	p, err := credentials.New(credentials.Options{Backend: "main", Strategy: strategy, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func count(p *credentials.Pool, n int, now time.Time) []int {
	got := make([]int, p.Len())
	for range n {
		i, ok := p.Pick(now, 0)
		if !ok {
			panic("no key")
		}
		got[i]++
	}
	return got
}

// N calls over K keys: each key within ±1 of N/K.
func TestRoundRobinEven(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct{ n, k int }{{1000, 3}, {7, 4}, {1, 2}, {64, 64}, {1001, 7}} {
		p := newPool(t, credentials.RoundRobin, make([]int, tc.k)...)
		got := count(p, tc.n, now)
		for i, c := range got {
			if lo := tc.n / tc.k; c < lo || c > lo+1 {
				t.Errorf("n=%d k=%d: key %d served %d, want %d or %d", tc.n, tc.k, i, c, lo, lo+1)
			}
		}
	}
}

// Weighted: one turn of the wheel serves each key exactly its weight, and
// the turn is interleaved (the heavy key never serves twice in a row when
// the light ones could).
func TestWeightedProportions(t *testing.T) {
	now := time.Now()
	p := newPool(t, credentials.Weighted, 5, 3, 2)
	got := count(p, 1000, now)
	if got[0] != 500 || got[1] != 300 || got[2] != 200 {
		t.Fatalf("1000 calls at 5:3:2 = %v, want [500 300 200]", got)
	}
	// Common divisor: 20:20 is 1:1, a wheel of 2.
	p = newPool(t, credentials.Weighted, 20, 20)
	seq := []int{}
	for range 4 {
		i, _ := p.Pick(now, 0)
		seq = append(seq, i)
	}
	if seq[0] == seq[1] || seq[1] == seq[2] || seq[2] == seq[3] {
		t.Fatalf("20:20 picked %v, want alternating", seq)
	}
	// 3:1 interleaves: a a b a, never b twice.
	p = newPool(t, credentials.Weighted, 3, 1)
	var b strings.Builder
	for range 8 {
		i, _ := p.Pick(now, 0)
		b.WriteByte(byte('a' + i))
	}
	if b.String() != "aabaaaba" {
		t.Fatalf("3:1 picked %s", b.String())
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    credentials.Options
		want string
	}{
		{"no key", credentials.Options{}, "at least one key"},
		{"no name", credentials.Options{Keys: []credentials.Key{{Name: ""}}}, "keys[0]: a name is required"},
		{"duplicate", credentials.Options{Keys: []credentials.Key{{Name: "a"}, {Name: "a"}}}, `keys[1]: duplicate name "a"`},
		{"weight 0", credentials.Options{Strategy: credentials.Weighted, Keys: []credentials.Key{{Name: "a", Weight: 0}}}, "weight 0, want at least 1"},
		{"wheel", credentials.Options{Strategy: credentials.Weighted, Keys: []credentials.Key{{Name: "a", Weight: 10000}, {Name: "b", Weight: 1}}}, "more than 10000"},
		{"strategy", credentials.Options{Strategy: "random", Keys: []credentials.Key{{Name: "a"}}}, `unknown strategy "random"`},
		{"too many", credentials.Options{Keys: make([]credentials.Key, 65)}, "65 keys, at most 64"},
	} {
		if _, err := credentials.New(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A resting key is skipped until its time, then used again; Unusable
// gives the earliest return once every key rests.
func TestRest(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p := newPool(t, credentials.RoundRobin, 1, 1)
	p.Rest(0, credentials.RestUntil(now, 7))
	for range 4 {
		if i, ok := p.Pick(now, 0); !ok || i != 1 {
			t.Fatalf("key 0 rests: picked %d %v, want 1", i, ok)
		}
	}
	if i, ok := p.Pick(now, 1<<1); ok {
		t.Fatalf("key 1 tried, key 0 resting: picked %d", i)
	}
	if got := p.States(now)[0].String(); got != "resting until 2027-01-15T08:00:07Z" {
		t.Fatalf("state %q", got)
	}
	p.Rest(1, credentials.RestUntil(now, 0)) // no Retry-After: 60 s
	if _, ok := p.Pick(now, 0); ok {
		t.Fatal("every key rests, yet one was picked")
	}
	if ra, resting := p.Unusable(now.Add(500 * time.Millisecond)); !resting || ra != 7 {
		t.Fatalf("Unusable = %d %v, want 7 (6.5 s rounded up) true", ra, resting)
	}
	later := now.Add(7 * time.Second)
	if i, ok := p.Pick(later, 0); !ok || i != 0 {
		t.Fatalf("at its Retry-After key 0 is back: picked %d %v", i, ok)
	}
	// A shorter rest does not shorten a longer one.
	p.Rest(1, now.Add(time.Second))
	if p.States(now.Add(2 * time.Second))[1].State != credentials.StateResting {
		t.Fatal("a shorter rest replaced a longer one")
	}
}

// A key set aside stays aside, is logged once with its name, and a pool
// of keys all set aside is exhausted, not resting.
func TestSetAside(t *testing.T) {
	var log bytes.Buffer
	p, err := credentials.New(credentials.Options{Backend: "main", Keys: []credentials.Key{{Name: "k1"}, {Name: "k2"}},
		Log: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p.SetAside(0, 401)
	p.SetAside(0, 403)
	if n := strings.Count(log.String(), "credential=k1"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "status=401") || !strings.Contains(log.String(), "backend=main") {
		t.Fatalf("log: %s", log.String())
	}
	if got := p.States(now)[0].String(); got != "set aside: 401" {
		t.Fatalf("state %q", got)
	}
	if i, ok := p.Pick(now.Add(time.Hour), 0); !ok || i != 1 {
		t.Fatalf("picked %d %v, want 1", i, ok)
	}
	p.Rest(1, now.Add(3*time.Second))
	if ra, resting := p.Unusable(now); !resting || ra != 3 {
		t.Fatalf("one aside, one resting: %d %v, want 3 true", ra, resting)
	}
	p.SetAside(1, 402)
	if _, resting := p.Unusable(now); resting {
		t.Fatal("every key set aside, yet resting")
	}
	if got := p.States(now)[1].String(); got != "set aside: 402" {
		t.Fatalf("state %q", got)
	}
}

// Concurrent picks, rests and snapshots (run with -race): every pick is a
// usable key, and round robin stays even.
func TestConcurrent(t *testing.T) {
	p := newPool(t, credentials.RoundRobin, 1, 1, 1, 1)
	now := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := make([]int, 4)
	for range 8 {
		wg.Go(func() {
			local := make([]int, 4)
			for range 1000 {
				i, ok := p.Pick(now, 0)
				if !ok {
					t.Error("no key")
					return
				}
				local[i]++
				_ = p.States(now)
			}
			mu.Lock()
			for i := range local {
				got[i] += local[i]
			}
			mu.Unlock()
		})
	}
	wg.Go(func() {
		for range 1000 {
			p.Rest(3, now.Add(-time.Second)) // already over: no effect on picks
		}
	})
	wg.Wait()
	for i, c := range got {
		if c != 2000 {
			t.Errorf("key %d served %d of 8000, want 2000", i, c)
		}
	}
}

func BenchmarkPick(b *testing.B) {
	now := time.Now()
	for _, tc := range []struct {
		name     string
		strategy string
		weights  []int
	}{{"round_robin_4", credentials.RoundRobin, []int{1, 1, 1, 1}}, {"weighted_5_3_2", credentials.Weighted, []int{5, 3, 2}}} {
		p := newPool(b, tc.strategy, tc.weights...)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, ok := p.Pick(now, 0); !ok {
						b.Fatal("no key")
					}
				}
			})
		})
	}
	p := newPool(b, credentials.RoundRobin, 1, 1, 1, 1)
	p.Rest(0, now.Add(time.Hour))
	p.SetAside(1, 401)
	b.Run("round_robin_4_two_unusable_with_time_now", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := p.Pick(time.Now(), 0); !ok {
				b.Fatal("no key")
			}
		}
	})
}
