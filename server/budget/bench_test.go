package budget

import (
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
)

// benchConcurrency is the number of goroutines reserving and committing.
const benchConcurrency = 64

// benchReserveCommit runs reserve+commit pairs from 64 goroutines (agents of
// 16 tenants, every cap set, none ever reached) and reports pairs/s.
func benchReserveCommit(b *testing.B, s Store) {
	p := Policy{
		Soft:    0.8,
		Default: Limits{TokensPerDay: i64(1 << 60), TokensPerMonth: i64(1 << 60), NanoEURPerMonth: i64(1 << 60)},
		Tenants: map[string]TenantPolicy{},
	}
	for i := 0; i < 16; i++ {
		p.Tenants["tenant-"+strconv.Itoa(i)] = TenantPolicy{Agents: map[string]Limits{
			"agent": {NanoEURPerMonth: i64(1 << 60)},
		}}
	}
	l := New(p, s, Options{})
	defer l.Close()
	var next atomic.Int64
	price := Price{Input: 500_000_000, Output: 1_500_000_000}
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((benchConcurrency + procs - 1) / procs)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		a := Account{Tenant: "tenant-" + strconv.Itoa(int(next.Add(1))%16), Agent: "agent"}
		for pb.Next() {
			r, err := l.Reserve(ctx, a, Amount{Tokens: 1500, NanoEUR: price.Cost(500, 1000)})
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Commit(ctx, r, Amount{Tokens: 700, NanoEUR: price.Cost(500, 200)}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}

// BenchmarkEmbeddedReserveCommit measures the embedded store as shipped:
// each commit written to the file before it returns, fsync every second.
func BenchmarkEmbeddedReserveCommit(b *testing.B) {
	s, err := openEmbedded(filepath.Join(b.TempDir(), "ledger.db"), true)
	if err != nil {
		b.Fatal(err)
	}
	benchReserveCommit(b, s)
}

// BenchmarkEmbeddedReserveCommitFsync is the alternative not taken: an
// fsync of the journal after every commit record.
func BenchmarkEmbeddedReserveCommitFsync(b *testing.B) {
	s, err := openEmbedded(filepath.Join(b.TempDir(), "ledger.db"), false)
	if err != nil {
		b.Fatal(err)
	}
	benchReserveCommit(b, s)
}

// BenchmarkRedisReserveCommit measures the Redis store against a local
// redis-server started for the benchmark.
func BenchmarkRedisReserveCommit(b *testing.B) {
	srv := startRedis(b)
	if _, err := InitRedis(ctx, srv.url); err != nil {
		b.Fatal(err)
	}
	s, err := OpenRedis(ctx, srv.url)
	if err != nil {
		b.Fatal(err)
	}
	benchReserveCommit(b, s)
}
