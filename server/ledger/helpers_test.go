package ledger

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexway/flexway/internal/redistest"
)

// clock is an injectable, settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func i64(v int64) *int64 { return &v }

// storeKind opens fresh, empty stores of one kind.
type storeKind struct {
	name string
	open func(t *testing.T) Store
}

func embeddedKind() storeKind {
	return storeKind{"embedded", func(t *testing.T) Store {
		s, err := OpenEmbedded(filepath.Join(t.TempDir(), "data", "ledger.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}}
}

func redisKind() storeKind {
	return storeKind{"redis", func(t *testing.T) Store {
		srv := startRedis(t)
		if _, err := InitRedis(context.Background(), srv.url); err != nil {
			t.Fatal(err)
		}
		return srv.open(t)
	}}
}

// forEachStore runs f against each store kind (Redis skipped when
// redis-server is not installed, unless FLEXWAY_REQUIRE_REDIS=1).
func forEachStore(t *testing.T, f func(t *testing.T, k storeKind)) {
	for _, k := range []storeKind{embeddedKind(), redisKind()} {
		t.Run(k.name, func(t *testing.T) { f(t, k) })
	}
}

// newLedger opens a fresh store of kind k and a ledger over it, closed at
// the end of the test.
func newLedger(t *testing.T, k storeKind, p Policy, o Options) *Ledger {
	t.Helper()
	l := New(p, k.open(t), o)
	t.Cleanup(func() { l.Close() })
	return l
}

// redisServer is a redis-server started by a test, killed in t.Cleanup.
type redisServer struct {
	url  string
	port int
	cmd  *exec.Cmd
}

func startRedis(t testing.TB) *redisServer {
	t.Helper()
	bin := redistest.Bin(t)
	for attempt := 0; ; attempt++ {
		port := redistest.FreePort(t)
		dir := t.TempDir()
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		srv := &redisServer{url: fmt.Sprintf("redis://127.0.0.1:%d/0", port), port: port, cmd: cmd}
		t.Cleanup(srv.kill)
		if srv.waitUp(5 * time.Second) {
			return srv
		}
		srv.kill()
		if attempt == 3 {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("redis-server did not start on port %d:\n%s", port, log)
		}
	}
}

func (s *redisServer) waitUp(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return true
		}
		if s.cmd.ProcessState != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func (s *redisServer) kill() {
	if s.cmd.Process != nil && s.cmd.ProcessState == nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

func (s *redisServer) open(t *testing.T) Store {
	t.Helper()
	st, err := OpenRedis(context.Background(), s.url)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// countingStore counts the store calls of a ledger.
type countingStore struct {
	Store
	calls atomic.Int64
}

func (c *countingStore) reserve(ctx context.Context, id string, lines []line, now, deadline time.Time) (int, balance, error) {
	c.calls.Add(1)
	return c.Store.reserve(ctx, id, lines, now, deadline)
}

func (c *countingStore) commit(ctx context.Context, id string, lines []line, now time.Time) error {
	c.calls.Add(1)
	return c.Store.commit(ctx, id, lines, now)
}

func (c *countingStore) release(ctx context.Context, id string, lines []line, now time.Time) error {
	c.calls.Add(1)
	return c.Store.release(ctx, id, lines, now)
}

func (c *countingStore) balances(ctx context.Context, buckets []string, now time.Time) ([]balance, error) {
	c.calls.Add(1)
	return c.Store.balances(ctx, buckets, now)
}

// usageOf returns the account's CapUsage for cap c, failing the test when
// absent.
func usageOf(t *testing.T, l *Ledger, a Account, c Cap) CapUsage {
	t.Helper()
	us, err := l.Usage(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range us {
		if u.Cap == c {
			return u
		}
	}
	t.Fatalf("%v has no %s cap in force: %+v", a, c, us)
	return CapUsage{}
}

// committedIn reads a bucket's committed total straight from the store.
func committedIn(t *testing.T, s Store, a Account, agent bool, c Cap, period string) int64 {
	t.Helper()
	b, err := s.balances(context.Background(), []string{bucketID(a, agent, c, period)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return b[0].committed
}
