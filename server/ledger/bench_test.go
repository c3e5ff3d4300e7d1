package ledger

import (
	"context"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
)

// benchConcurrency is the number of goroutines reserving and committing.
const benchConcurrency = 64

// benchReserveCommit runs reserve+commit pairs from 64 goroutines (agents of
// 16 tenants, every day and month cap set, none ever reached) and reports
// pairs/s.
func benchReserveCommit(b *testing.B, s Store) { benchReserveCommitCtx(b, s, ctx, false) }

// benchReserveCommitPerMinute is benchReserveCommit with tokens_per_minute
// and requests_per_minute set on the tenants and on the agents too (four
// windows per call, never reached).
func benchReserveCommitPerMinute(b *testing.B, s Store) { benchReserveCommitCtx(b, s, ctx, true) }

// benchReserveCommitCtx is benchReserveCommit committing with cctx (its
// values: a note), with the per-minute caps when perMinute.
func benchReserveCommitCtx(b *testing.B, s Store, cctx context.Context, perMinute bool) {
	p := Policy{
		Soft:    0.8,
		Default: Limits{TokensPerDay: i64(1 << 60), TokensPerMonth: i64(1 << 60), NanoEURPerMonth: i64(1 << 60)},
		Tenants: map[string]TenantPolicy{},
	}
	agent := Limits{NanoEURPerMonth: i64(1 << 60)}
	if perMinute {
		p.Default.TokensPerMinute, p.Default.RequestsPerMinute = i64(1<<60), i64(1<<60)
		agent.TokensPerMinute, agent.RequestsPerMinute = i64(1<<60), i64(1<<60)
	}
	for i := 0; i < 16; i++ {
		p.Tenants["tenant-"+strconv.Itoa(i)] = TenantPolicy{Agents: map[string]Limits{"agent": agent}}
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
			if err := l.Commit(cctx, r, Amount{Tokens: 700, NanoEUR: price.Cost(500, 200)}); err != nil {
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

// BenchmarkEmbeddedReserveCommitPerMinute is BenchmarkEmbeddedReserveCommit
// with the tenant's and the agent's per-minute caps (issue 16's target:
// at most 2 µs more per pair).
func BenchmarkEmbeddedReserveCommitPerMinute(b *testing.B) {
	s, err := openEmbedded(filepath.Join(b.TempDir(), "ledger.db"), true)
	if err != nil {
		b.Fatal(err)
	}
	benchReserveCommitPerMinute(b, s)
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

// BenchmarkRedisReserveCommitPerMinute is BenchmarkRedisReserveCommit with
// the tenant's and the agent's per-minute caps: still one script per
// reserve and one per commit.
func BenchmarkRedisReserveCommitPerMinute(b *testing.B) {
	srv := startRedis(b)
	if _, err := InitRedis(ctx, srv.url); err != nil {
		b.Fatal(err)
	}
	s, err := OpenRedis(ctx, srv.url)
	if err != nil {
		b.Fatal(err)
	}
	benchReserveCommitPerMinute(b, s)
}

// benchNote is a note of an audit line's usual size (about 500 bytes).
var benchNote = []byte(`{"time":"2026-12-01T22:00:00.123456Z","request_id":"0123456789abcdef0123456789abcdef","operation":"chat.completions","tenant":"tenant-1","agent":"agent","backend":"main","model_requested":"gpt-4o-mini","model_served":"gpt-4o-mini-2024-07-18","capability":"chat","input_tokens":500,"output_tokens":200,"cost_eur":"0.000550000","usage_estimated":false,"metered_by":"upstream","key_hash":"hk1:0123456789abcdef0123","user_hash":"hu1:0123456789abcdef0123","outcome":"ok","status":200,"duration_ms":812}`)

// BenchmarkRedisReserveCommitNotes is BenchmarkRedisReserveCommit with the
// replica's local files and every commit carrying a ~500-byte note (the
// audit line), which the store writes to its notes file before the
// commit's script runs.
func BenchmarkRedisReserveCommitNotes(b *testing.B) {
	srv := startRedis(b)
	if _, err := InitRedis(ctx, srv.url); err != nil {
		b.Fatal(err)
	}
	s, err := OpenRedisWithOptions(ctx, srv.url, RedisOptions{Path: filepath.Join(b.TempDir(), "redis-ledger")})
	if err != nil {
		b.Fatal(err)
	}
	benchReserveCommitCtx(b, s, WithNote(ctx, func() []byte { return benchNote }), false)
}

// BenchmarkRedisNoteWrite measures what a note costs a Redis commit: its
// line (crc32c, base64) and one write(2) to the notes file.
func BenchmarkRedisNoteWrite(b *testing.B) {
	loc, _, err := openRedisLocal(filepath.Join(b.TempDir(), "redis-ledger"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer loc.close()
	if err := loc.openNotes(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(benchNote)))
	for i := 0; b.Loop(); i++ {
		if err := loc.note("r.0123456789abcdef", benchNote); err != nil {
			b.Fatal(err)
		}
		if i%4096 == 4095 { // as the store's rotation every second does
			if err := loc.rotateNotes(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
