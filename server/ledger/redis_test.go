package ledger

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexway/flexway/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func rawClient(t *testing.T, srv *redisServer) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(srv.port)})
	t.Cleanup(func() { c.Close() })
	return c
}

const noMarkerText = "the Redis ledger has no marker — it is new or lost its data; run `flexway ledger init` for a new one, or restore its data; metered calls are refused until then"

func wantNoMarker(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrNoMarker) || !strings.Contains(err.Error(), noMarkerText) {
		t.Errorf("%s: %v; want ErrUnavailable with the no-marker message", what, err)
	}
}

func TestRedisMarker(t *testing.T) {
	srv := startRedis(t)
	p := Policy{Default: Limits{TokensPerDay: i64(100)}}
	l := New(p, srv.open(t), Options{Now: newClock(t0).Now})
	defer l.Close()

	wantNoMarker(t, "Ping", l.Ping(ctx))
	_, err := l.Reserve(ctx, acme, Amount{Tokens: 1})
	wantNoMarker(t, "Reserve", err)
	_, err = l.Check(ctx, acme)
	wantNoMarker(t, "Check", err)
	_, err = l.Usage(ctx, acme)
	wantNoMarker(t, "Usage", err)
	// Even an account without caps cannot commit into an unmarked Redis.
	free := New(Policy{}, srv.open(t), Options{Now: newClock(t0).Now})
	defer free.Close()
	r := mustReserve(t, free, acme, Amount{Tokens: 1})
	wantNoMarker(t, "Commit", free.Commit(ctx, r, Amount{Tokens: 1}))
	if got := err.Error(); !strings.Contains(got, srv.url) {
		t.Errorf("message %q does not name the Redis", got)
	}

	created, err := InitRedis(ctx, srv.url)
	if err != nil || !created {
		t.Fatalf("InitRedis: %v, %v", created, err)
	}
	created, err = InitRedis(ctx, srv.url)
	if err != nil || created {
		t.Fatalf("second InitRedis: %v, %v; want not created", created, err)
	}
	if err := l.Ping(ctx); err != nil {
		t.Fatalf("Ping after init: %v", err)
	}
	mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 1}), Amount{Tokens: 1})
	mustCommit(t, free, r, Amount{Tokens: 1}) // the failed commit can be retried
	if u := usageOf(t, l, acme, TokensPerDay); u.Committed != 2 {
		t.Errorf("committed %d, want 2", u.Committed)
	}
}

func TestRedisLostData(t *testing.T) {
	srv := startRedis(t)
	if _, err := InitRedis(ctx, srv.url); err != nil {
		t.Fatal(err)
	}
	l := New(Policy{Default: Limits{TokensPerDay: i64(100)}}, srv.open(t), Options{Now: newClock(t0).Now})
	defer l.Close()
	mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 90}), Amount{Tokens: 90})
	r := mustReserve(t, l, acme, Amount{Tokens: 5})
	if err := rawClient(t, srv).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Not served against a budget silently reset to zero.
	_, err := l.Reserve(ctx, acme, Amount{Tokens: 1})
	wantNoMarker(t, "Reserve after FLUSHALL", err)
	_, err = l.Check(ctx, acme)
	wantNoMarker(t, "Check after FLUSHALL", err)
	wantNoMarker(t, "Commit after FLUSHALL", l.Commit(ctx, r, Amount{Tokens: 5}))
	wantNoMarker(t, "Release after FLUSHALL", l.Release(ctx, r))
}

func TestRedisDown(t *testing.T) {
	srv := startRedis(t)
	if _, err := InitRedis(ctx, srv.url); err != nil {
		t.Fatal(err)
	}
	l := New(Policy{Default: Limits{TokensPerDay: i64(100)}}, srv.open(t), Options{Now: newClock(t0).Now})
	defer l.Close()
	r := mustReserve(t, l, acme, Amount{Tokens: 5})
	srv.kill()

	for name, f := range map[string]func() error{
		"Reserve": func() error { _, err := l.Reserve(ctx, acme, Amount{Tokens: 1}); return err },
		"Check":   func() error { _, err := l.Check(ctx, acme); return err },
		"Commit":  func() error { return l.Commit(ctx, r, Amount{Tokens: 5}) },
		"Release": func() error { return l.Release(ctx, r) },
	} {
		start := time.Now()
		err := f()
		if took := time.Since(start); took > 1500*time.Millisecond {
			t.Errorf("%s took %v with Redis down", name, took)
		}
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoMarker) || !strings.Contains(err.Error(), srv.url) {
			t.Errorf("%s with Redis down: %v", name, err)
		}
	}
	start := time.Now()
	if err := CheckRedis(ctx, srv.url); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoMarker) || time.Since(start) > 1500*time.Millisecond {
		t.Errorf("CheckRedis of a stopped Redis: %v after %v", err, time.Since(start))
	}
	if _, err := InitRedis(ctx, srv.url); !errors.Is(err, ErrUnavailable) {
		t.Errorf("InitRedis of a stopped Redis: %v", err)
	}
}

func TestRedisURLRedacted(t *testing.T) {
	port := redistest.FreePort(t) // nothing listens there
	for _, u := range []string{
		"redis://flexway:s3cret-pw@127.0.0.1:notaport/0",
		"redis://flexway:s3cret-pw@127.0.0.1:6379/notadb",
		"redis://flexway:s3cret-pw@127.0.0.1:6379/0?pool_size=abc",
		"http://flexway:s3cret-pw@127.0.0.1:6379/0",
		"redis://flexway:s3cret-pw@[::1/0",
	} {
		_, err := OpenRedis(ctx, u)
		if err == nil {
			t.Errorf("OpenRedis(%q) succeeded", u)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error leaks the password: %v", err)
		}
		_, err = InitRedis(ctx, u)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("InitRedis(%q): %v", u, err)
		}
	}
	unreachable := "redis://flexway:s3cret-pw@127.0.0.1:" + strconv.Itoa(port) + "/0"
	for name, err := range map[string]error{"CheckRedis": CheckRedis(ctx, unreachable), "InitRedis": second(InitRedis(ctx, unreachable))} {
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "redis://flexway:xxxxx@127.0.0.1:") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s, unreachable: %v", name, err)
		}
	}
	// OpenRedis connects lazily: the first call reports it.
	st, err := OpenRedis(ctx, unreachable)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := New(Policy{Default: Limits{TokensPerDay: i64(10)}}, st, Options{}).Reserve(ctx, Account{Tenant: "acme"}, Amount{Tokens: 1}); !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Reserve, unreachable: %v", err)
	}
}

// TestRedisTwoReplicasExactlyN: two stores (two clients, as two replicas)
// on one Redis; 64 goroutines race for a cap that fits N reservations.
func TestRedisTwoReplicasExactlyN(t *testing.T) {
	srv := startRedis(t)
	if _, err := InitRedis(ctx, srv.url); err != nil {
		t.Fatal(err)
	}
	const n, each = 100, 10
	p := Policy{Default: Limits{TokensPerDay: i64(n * each)}}
	l1 := New(p, srv.open(t), Options{Now: newClock(t0).Now})
	defer l1.Close()
	l2 := New(p, srv.open(t), Options{Now: newClock(t0).Now})
	defer l2.Close()
	concurrentExactlyN(t, []*Ledger{l1, l2}, n, each)
}

// TestRedisCrashedReplicaStrandsNothing: a replica reserves and dies; once
// the deadline passed, another replica gets the budget back.
func TestRedisCrashedReplicaStrandsNothing(t *testing.T) {
	srv := startRedis(t)
	if _, err := InitRedis(ctx, srv.url); err != nil {
		t.Fatal(err)
	}
	p := Policy{Default: Limits{TokensPerDay: i64(100)}}
	clk := newClock(t0)
	crashed := New(p, srv.open(t), Options{Now: clk.Now, ReservationTTL: time.Minute})
	mustReserve(t, crashed, acme, Amount{Tokens: 100})
	crashed.Close()

	l := New(p, srv.open(t), Options{Now: clk.Now})
	defer l.Close()
	if u := usageOf(t, l, acme, TokensPerDay); u.Reserved != 100 {
		t.Fatalf("reserved %d before the deadline, want 100", u.Reserved)
	}
	clk.Add(time.Minute) // the deadline itself: expired
	if u := usageOf(t, l, acme, TokensPerDay); u.Reserved != 0 || u.Remaining != 100 {
		t.Fatalf("after the deadline: %+v", u)
	}
	mustReserve(t, l, acme, Amount{Tokens: 100})
	// The purge left no entry behind but the new reservation.
	c := rawClient(t, srv)
	b := bucketID(acme, false, TokensPerDay, "2026-11-30")
	if n, err := c.ZCard(ctx, keyPrefix+"z:"+b).Result(); err != nil || n != 1 {
		t.Errorf("zset holds %d entries (%v), want 1", n, err)
	}
	if got, err := c.HGetAll(ctx, keyPrefix+"b:"+b).Result(); err != nil || len(got) != 1 || got["r"] != "100" {
		t.Errorf("bucket hash %v (%v), want r=100 only", got, err)
	}
}

// TestRedisRetriedFinishAppliesOnce: a commit or release whose reply was
// lost and which is retried (by this replica or another) applies once.
func TestRedisRetriedFinishAppliesOnce(t *testing.T) {
	srv := startRedis(t)
	if _, err := InitRedis(ctx, srv.url); err != nil {
		t.Fatal(err)
	}
	p := Policy{Default: Limits{TokensPerDay: i64(100)}}
	st := srv.open(t)
	l := New(p, st, Options{Now: newClock(t0).Now})
	defer l.Close()
	r := mustReserve(t, l, acme, Amount{Tokens: 10})
	lines := append([]line(nil), r.lines...)
	for i := range lines {
		if i < r.nres {
			lines[i].held = lines[i].amount
		}
		lines[i].amount = 8
	}
	for i := 0; i < 3; i++ {
		if err := st.commit(ctx, r.id, lines, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.release(ctx, r.id, lines[:r.nres], t0); err != nil {
		t.Fatal(err)
	}
	if u := usageOf(t, l, acme, TokensPerDay); u.Committed != 8 || u.Reserved != 0 {
		t.Errorf("after three commits and a release of one reservation: %+v", u)
	}
	c := rawClient(t, srv)
	b := bucketID(acme, false, TokensPerDay, "2026-11-30")
	if got, err := c.HGetAll(ctx, keyPrefix+"b:"+b).Result(); err != nil || len(got) != 2 || got["c"] != "8" || got["r"] != "0" {
		t.Errorf("bucket hash %v (%v), want c=8 r=0 only", got, err)
	}
	if n, err := c.Exists(ctx, keyPrefix+"z:"+b).Result(); err != nil || n != 0 {
		t.Errorf("deadline set still exists (%d, %v)", n, err)
	}
	if ms, err := c.PTTL(ctx, keyPrefix+"d:"+r.id).Result(); err != nil || ms <= 0 || ms > tombstoneGrace {
		t.Errorf("tombstone TTL %v (%v), want (0, %v]", ms, err, tombstoneGrace)
	}
}

func TestRedisKeyLayoutAndTTL(t *testing.T) {
	srv := startRedis(t)
	if _, err := InitRedis(ctx, srv.url); err != nil {
		t.Fatal(err)
	}
	l := New(Policy{Default: Limits{TokensPerDay: i64(100)}}, srv.open(t), Options{Now: newClock(t0).Now})
	defer l.Close()
	mustCommit(t, l, mustReserve(t, l, acBot, Amount{Tokens: 10, NanoEUR: 3}), Amount{Tokens: 9, NanoEUR: 2})
	c := rawClient(t, srv)
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	month := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for key, want := range map[string]struct {
		val string
		exp time.Time
	}{
		"flexway:ledger:b:t:acme:tokens_per_day:2026-11-30":     {"9", day.Add(3 * 24 * time.Hour)},
		"flexway:ledger:b:t:acme:tokens_per_month:2026-11":      {"9", month.Add(70 * 24 * time.Hour)},
		"flexway:ledger:b:t:acme:eur_per_month:2026-11":         {"2", month.Add(70 * 24 * time.Hour)},
		"flexway:ledger:b:a:acme:bot:tokens_per_day:2026-11-30": {"9", day.Add(3 * 24 * time.Hour)},
		"flexway:ledger:b:a:acme:bot:eur_per_month:2026-11":     {"2", month.Add(70 * 24 * time.Hour)},
	} {
		v, err := c.HGet(ctx, key, "c").Result()
		if err != nil || v != want.val {
			t.Errorf("%s = %q (%v), want %q", key, v, err, want.val)
		}
		// The life left by the ledger's clock (t0), whatever Redis's own
		// clock says: an EXPIREAT of want.exp would be in Redis's past
		// once the real date passes it, and the bucket gone at once (the
		// ledger tests broke so on 2026-12-03).
		ttl, err := c.TTL(ctx, key).Result()
		if d := ttl - want.exp.Sub(t0); err != nil || d > time.Second || d < -5*time.Second {
			t.Errorf("%s lives %v (%v), want %v", key, ttl, err, want.exp.Sub(t0))
		}
	}
	if v, err := c.Get(ctx, markerKey).Result(); err != nil || !strings.HasPrefix(v, "flexway ledger v1") {
		t.Errorf("marker %q %v", v, err)
	}
	if n, err := c.Do(ctx, "TTL", markerKey).Int64(); err != nil || n != -1 {
		t.Errorf("marker TTL %d %v, want none", n, err)
	}
}

func second[T any](_ T, err error) error { return err }
