package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexway/flexway/internal/redistest"
)

// persistentRedis is a redis-server with a data directory of its own,
// which the test can kill -9 and start again on the same port and files.
type persistentRedis struct {
	*redisServer
	bin, dir string
	args     []string
}

// startPersistentRedis starts redis-server with args (e.g. "--save", "",
// "--appendonly", "yes", "--appendfsync", "always") in a data directory of
// its own.
func startPersistentRedis(t *testing.T, args ...string) *persistentRedis {
	t.Helper()
	p := &persistentRedis{redisServer: &redisServer{port: redistest.FreePort(t)}, bin: redistest.Bin(t), dir: t.TempDir(), args: args}
	p.url = fmt.Sprintf("redis://127.0.0.1:%d/0", p.port)
	t.Cleanup(func() { p.kill() })
	p.start(t)
	return p
}

func (p *persistentRedis) start(t *testing.T) {
	t.Helper()
	args := append([]string{"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1", "--dir", p.dir,
		"--logfile", filepath.Join(p.dir, "redis.log")}, p.args...)
	p.cmd = exec.Command(p.bin, args...)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !p.waitUp(5 * time.Second) {
		log, _ := os.ReadFile(filepath.Join(p.dir, "redis.log"))
		t.Fatalf("redis-server did not start on port %d:\n%s", p.port, log)
	}
	// Up means loaded: a PING answers only once the data is read.
	c := rawClient(t, p.redisServer)
	for deadline := time.Now().Add(5 * time.Second); c.Ping(ctx).Err() != nil; {
		if time.Now().After(deadline) {
			t.Fatal("redis-server does not answer")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// restart kills redis-server with SIGKILL and starts it again on its files.
func (p *persistentRedis) restart(t *testing.T) {
	t.Helper()
	p.kill()
	p.start(t)
}

func openReplica(t *testing.T, url, path string) Store {
	t.Helper()
	st, err := OpenRedisWithOptions(ctx, url, RedisOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func wantRolledBack(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), "flexway ledger accept-rollback") {
		t.Errorf("%s: %v; want ErrUnavailable and ErrRolledBack", what, err)
	}
}

func savedSeq(t *testing.T, path string) redisState {
	t.Helper()
	var st redisState
	raw, err := os.ReadFile(path + ".state")
	if err == nil {
		err = json.Unmarshal(raw, &st)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return st
}

// TestRedisRollbackDetected: Redis restarted from an RDB snapshot older
// than the last commits (the attack pass's `--save '60 1'` and kill -9:
// 180,000 committed tokens became 0 and calls were served at once) is
// detected — even when the replica restarted too — and refused until
// `flexway ledger accept-rollback`; a wiped Redis initialised again is a
// new ledger, not a rollback.
func TestRedisRollbackDetected(t *testing.T) {
	srv := startPersistentRedis(t, "--save", "", "--appendonly", "no")
	if _, err := InitRedis(ctx, srv.url); err != nil {
		t.Fatal(err)
	}
	p := Policy{Default: Limits{TokensPerDay: i64(1000)}}
	clk := newClock(t0)
	path := filepath.Join(t.TempDir(), "replica1", "redis-ledger")
	l1 := New(p, openReplica(t, srv.url, path), Options{Now: clk.Now})
	for i := 0; i < 3; i++ {
		mustCommit(t, l1, mustReserve(t, l1, acme, Amount{Tokens: 10}), Amount{Tokens: 10})
	}
	if err := rawClient(t, srv.redisServer).Save(ctx).Err(); err != nil { // the snapshot: 30 tokens
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		mustCommit(t, l1, mustReserve(t, l1, acme, Amount{Tokens: 10}), Amount{Tokens: 10})
	}
	// The replica remembers on disk what it saw (within a second).
	for deadline := time.Now().Add(3 * time.Second); savedSeq(t, path).Seq != 5; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("state file %+v, want seq 5", savedSeq(t, path))
		}
	}
	// Both restart: the replica's memory is its file, Redis's the snapshot.
	l1.Close()
	srv.restart(t)
	if got := committedIn(t, srv.open(t), acme, false, TokensPerDay, "2026-11-30"); got != 30 {
		t.Fatalf("Redis came back with %d committed, want the snapshot's 30", got)
	}
	l1 = New(p, openReplica(t, srv.url, path), Options{Now: clk.Now})
	defer func() { l1.Close() }()
	_, err := l1.Reserve(ctx, acme, Amount{Tokens: 1})
	wantRolledBack(t, "Reserve after the rollback", err)
	_, err = l1.Check(ctx, acme)
	wantRolledBack(t, "Check after the rollback", err)
	wantRolledBack(t, "Ping after the rollback", l1.Ping(ctx))
	if msg := fmt.Sprint(err); !strings.Contains(msg, "Redis holds commit 3 of epoch") || !strings.Contains(msg, "had seen commit 5 of epoch") {
		t.Errorf("message does not give the sequences: %s", msg)
	}
	// Another replica, which saw nothing, is stopped too: the first one
	// marked the rollback in Redis.
	l2 := New(p, openReplica(t, srv.url, filepath.Join(t.TempDir(), "replica2", "redis-ledger")), Options{Now: clk.Now})
	defer l2.Close()
	_, err = l2.Reserve(ctx, acme, Amount{Tokens: 1})
	wantRolledBack(t, "another replica's Reserve", err)
	// So is a call that reserves nothing, once this replica knows.
	free := New(Policy{}, openReplica(t, srv.url, filepath.Join(t.TempDir(), "replica3", "redis-ledger")), Options{Now: clk.Now})
	defer free.Close()
	_ = free.Ping(ctx)
	_, err = free.Reserve(ctx, acme, Amount{Tokens: 1})
	wantRolledBack(t, "an uncapped account's Reserve", err)

	found, epoch, err := AcceptRedisRollback(ctx, srv.url)
	if err != nil {
		t.Fatal(err)
	}
	if found.Seq != 3 || !strings.HasPrefix(found.RolledBack, strconv.FormatInt(found.Epoch, 10)+" 3 ") || epoch <= found.Epoch {
		t.Fatalf("accept-rollback found %+v, new epoch %d", found, epoch)
	}
	for i, l := range []*Ledger{l1, l2} {
		if err := l.Ping(ctx); err != nil {
			t.Fatalf("replica %d after accept-rollback: %v", i+1, err)
		}
		mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 10}), Amount{Tokens: 10})
	}
	_ = free.Ping(ctx) // its next script (a renewal, /readyz) adopts the new epoch
	if _, err := free.Reserve(ctx, acme, Amount{Tokens: 1}); err != nil {
		t.Errorf("uncapped replica after accept-rollback and a ping: %v", err)
	}
	if u := usageOf(t, l1, acme, TokensPerDay); u.Committed != 50 {
		t.Errorf("committed %d after accepting, want 30 + 2 × 10", u.Committed)
	}
	l1.Close()
	if st := savedSeq(t, path); st.Epoch != epoch || st.RolledBack != "" || st.Seq < 4 {
		t.Errorf("state file after accepting: %+v", st)
	}

	// A Redis that lost everything and was initialised again is a new
	// ledger: replicas adopt it.
	if err := rawClient(t, srv.redisServer).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	wantNoMarker(t, "after FLUSHALL", l2.Ping(ctx))
	if _, err := InitRedis(ctx, srv.url); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, l2, mustReserve(t, l2, acme, Amount{Tokens: 10}), Amount{Tokens: 10})
}
