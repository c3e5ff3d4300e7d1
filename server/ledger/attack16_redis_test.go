package ledger

import (
	"math"
	"testing"
	"time"
)

// TestAttack16RedisAbsurdUsageWindow: an upstream that reports usage near
// math.MaxInt64 (committed past its reservation, as Commit documents)
// must not break the Redis window: the next call's commit in the same
// minute must be applied (no Lua "increment would overflow" error) and
// its tokens must count until its slot ages out, as they do in the
// embedded ledger (TestAttack16WindowSaturationUndercounts).
//
// On the Redis store the finish script's HINCRBY of the window's "s" by
// 99 on top of MaxInt64-1 overflows: Redis aborts the script after it
// already removed the hold (ZREM, "r" decremented), so the 99 tokens are
// neither held nor committed, and 61 s later the same 99 tokens are
// admitted again under a 100-token cap.
func TestAttack16RedisAbsurdUsageWindow(t *testing.T) {
	clk := newClock(t0)
	l := newLedger(t, redisKind(), Policy{Default: Limits{TokensPerMinute: i64(100)}}, Options{Now: clk.Now})

	r1 := mustReserve(t, l, acme, Amount{Tokens: 1}) // slot t0
	clk.Add(time.Second)
	r2 := mustReserve(t, l, acme, Amount{Tokens: 99}) // slot t0+1
	mustCommit(t, l, r1, Amount{Tokens: math.MaxInt64 - 1})
	if err := l.Commit(ctx, r2, Amount{Tokens: 99}); err != nil {
		t.Errorf("the commit of an ordinary 99-token call failed after a huge one: %v", err)
	}

	clk.Set(t0.Add(61 * time.Second)) // t0's slot aged out; t0+1's 99 tokens count until t0+62
	if _, err := l.Reserve(ctx, acme, Amount{Tokens: 99}); err == nil {
		t.Fatal("99 tokens admitted at t0+61s although 99 of the 100-token cap were committed at t0+1s")
	}
}

// TestAttack16RedisAbsurdUsageDay: the same on a per-day cap: after one
// call committed near math.MaxInt64 tokens, a second call's commit in the
// same day must not fail with a Lua overflow error (the tenant is over
// its cap either way, but the failed script leaves the commit unapplied:
// the committed usage of the day stays at the first call's and the
// second's tokens are lost).
func TestAttack16RedisAbsurdUsageDay(t *testing.T) {
	clk := newClock(t0)
	l := newLedger(t, redisKind(), Policy{Default: Limits{TokensPerDay: i64(1_000_000)}}, Options{Now: clk.Now})
	r1 := mustReserve(t, l, acme, Amount{Tokens: 10})
	r2 := mustReserve(t, l, acme, Amount{Tokens: 10})
	mustCommit(t, l, r1, Amount{Tokens: math.MaxInt64 - 5})
	if err := l.Commit(ctx, r2, Amount{Tokens: 10}); err != nil {
		t.Fatalf("commit after a huge one failed (Redis HINCRBY overflow, not saturated): %v", err)
	}
}

// TestAttack16RedisAbsurdUsageBricksReplica: with its local journal (as
// flexway serve opens it), a commit Redis refuses with the Lua overflow
// error is journaled and replayed before every later reservation; the
// replay fails the same way for as long as the bucket lives (a day
// bucket: three days), so one tenant's absurd upstream usage refuses
// every other tenant's calls on this replica.
func TestAttack16RedisAbsurdUsageBricksReplica(t *testing.T) {
	srv := startRedis(t)
	if _, err := InitRedis(ctx, srv.url); err != nil {
		t.Fatal(err)
	}
	st, err := OpenRedisWithOptions(ctx, srv.url, RedisOptions{Path: t.TempDir() + "/replica"})
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock(t0)
	l := New(Policy{Default: Limits{TokensPerDay: i64(1_000_000)}}, st, Options{Now: clk.Now})
	t.Cleanup(func() { l.Close() })
	r1 := mustReserve(t, l, acme, Amount{Tokens: 10})
	r2 := mustReserve(t, l, acme, Amount{Tokens: 10})
	mustCommit(t, l, r1, Amount{Tokens: math.MaxInt64 - 5})
	_ = l.Commit(ctx, r2, Amount{Tokens: 10}) // overflows in Redis: journaled

	globex := Account{Tenant: "globex"}
	if _, err := l.Reserve(ctx, globex, Amount{Tokens: 10}); err != nil {
		t.Fatalf("another tenant, far under its own cap, is refused after acme's absurd usage: %v", err)
	}
}
