package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flexway/flexway/internal/redistest"
	"github.com/flexway/flexway/server/ledger"
)

// testLeaseEnv sets the reservations' lease of a `flexway serve` child
// (see TestMain): 2s in the short versions of the replica tests, so that
// a killed replica's hold frees within seconds; unset under FLEXWAY_SOAK=1,
// which runs them with the real lease (budget.LeaseTTL, 30 s).
const testLeaseEnv = "FLEXWAY_TEST_LEASE"

// testLease is the lease the replica tests' children run with.
func testLease(t *testing.T) time.Duration {
	if soak() {
		return ledger.LeaseTTL
	}
	t.Setenv(testLeaseEnv, "2s")
	return 2 * time.Second
}

// ownRedis is a redis-server of one test, on its own files, which the test
// can kill -9 and start again on the same port and data.
type ownRedis struct {
	bin, dir, addr string
	args           []string
	cmd            *exec.Cmd
	out            bytes.Buffer
}

func startOwnRedis(t *testing.T, args ...string) *ownRedis {
	t.Helper()
	r := &ownRedis{bin: redistest.Bin(t), dir: t.TempDir(), addr: freePort(t), args: args}
	t.Cleanup(r.kill)
	r.start(t)
	return r
}

func (r *ownRedis) url() string { return "redis://" + r.addr + "/0" }

func (r *ownRedis) start(t *testing.T) {
	t.Helper()
	_, port, _ := net.SplitHostPort(r.addr)
	r.out.Reset()
	r.cmd = exec.Command(r.bin, append([]string{"--bind", "127.0.0.1", "--port", port, "--dir", r.dir}, r.args...)...)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(5 * time.Second); c.Ping(context.Background()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not start:\n%s", r.out.String())
		}
	}
}

// kill sends SIGKILL and waits for the process.
func (r *ownRedis) kill() {
	if r.cmd != nil && r.cmd.ProcessState == nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
}

// save makes Redis write its RDB snapshot now.
func (r *ownRedis) save(t *testing.T) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.addr})
	defer c.Close()
	if err := c.Save(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// replica is one `flexway serve` of a replica test: its directory (its
// configuration, audit and own ledger files) survives its restarts.
type replica struct {
	*child
	dir, cfg string
}

// startReplicas writes a configuration per replica on the Redis at url
// with the given tokens_per_day cap, initialises the ledger and starts n
// replicas.
func startReplicas(t *testing.T, n int, upURL, url string, tokensPerDay int64) []*replica {
	t.Helper()
	t.Setenv("FLEXWAY_TEST_KEY", demoKey)
	var rs []*replica
	for i := range n {
		r := &replica{dir: t.TempDir(), cfg: budgetConfig(t, upURL, upURL, redisBudget(url, tokensPerDay))}
		if i == 0 {
			path := filepath.Join(r.dir, "flexway.yaml")
			if err := os.WriteFile(path, []byte(r.cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if err := run(context.Background(), []string{"ledger", "init", "--config", path}, &out, &errb); err != nil {
				t.Fatalf("ledger init: %v\n%s%s", err, out.String(), errb.String())
			}
		}
		r.child = startChild(t, r.dir, r.cfg)
		rs = append(rs, r)
	}
	return rs
}

// restart starts the replica again on its directory, after a kill;
// ready false waits for its listener only (a replica refusing metered
// calls is not ready).
func (r *replica) restart(t *testing.T, ready bool) {
	t.Helper()
	if ready {
		r.child = startChild(t, r.dir, r.cfg)
		return
	}
	c := &child{stderr: &syncBuffer{}}
	c.cmd = exec.Command(os.Args[0], "serve", "--config", filepath.Join(r.dir, "flexway.yaml"))
	c.cmd.Env = append(os.Environ(), "FLEXWAY_TEST_EXEC=1")
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stderr = c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.kill)
	// The restarted process binds ports of its own (server.http is
	// 127.0.0.1:0) and says which.
	c.HTTP = servingAddr(t, stdout, c.stderr)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(c.HTTP + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flexway serve did not start:\n%s", c.stderr.String())
		}
	}
	r.child = c
}

// journalEmpty reports whether the replica's Redis commit journal holds
// nothing to replay.
func (r *replica) journalEmpty(t *testing.T) bool {
	st, err := os.Stat(filepath.Join(r.dir, "flexway-data", "redis-ledger.journal"))
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return st.Size() == 0
}

// callOutcome is what one chat call got.
type callOutcome struct {
	status     int
	retryAfter int64
}

func chat(client *http.Client, g *testGW, body string) (callOutcome, error) {
	req, _ := http.NewRequest("POST", g.HTTP+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+demoKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return callOutcome{}, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return callOutcome{}, err
	}
	ra, _ := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
	return callOutcome{status: resp.StatusCode, retryAfter: ra}, nil
}

// TestRedisReplicasHoldAcrossRedisRestarts: two replicas on one Redis (AOF,
// appendfsync always: the setting that loses nothing), 16 concurrent
// callers, an upstream that honours max_tokens (it bills exactly what was
// reserved), and Redis killed with SIGKILL and restarted while calls run:
// every call answered 200 is committed once (the commits Redis could not
// take were journaled and replayed), the cap is reached exactly and never
// passed, and nothing stays reserved. The soak version restarts Redis five
// times over a larger cap.
func TestRedisReplicasHoldAcrossRedisRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	testLease(t)
	n, restarts := int64(60), 1
	if soak() {
		n, restarts = 600, 5
	}
	srv := startOwnRedis(t, "--save", "", "--appendonly", "yes", "--appendfsync", "always")
	est := reservedFor(t, chatBody, 1024)
	perCall := est.Input + est.Output
	var served atomic.Int64
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		time.Sleep(10 * time.Millisecond)
		usageUpstream(est.Input, est.Output)(w, r)
	})
	rs := startReplicas(t, 2, up.URL, srv.url(), n*perCall)

	var answered, unavailable, byReservations atomic.Int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	deadline := time.Now().Add(60 * time.Second)
	client := &http.Client{Timeout: 10 * time.Second}
	var stopOnce sync.Once
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				select {
				case <-done:
					return
				default:
				}
				o, err := chat(client, &rs[i%2].testGW, chatBody)
				switch {
				case err != nil:
					t.Errorf("call: %v", err)
					return
				case o.status == 200:
					answered.Add(1)
				case o.status == 503:
					unavailable.Add(1)
					time.Sleep(50 * time.Millisecond)
				case o.status == 429 && o.retryAfter > 60:
					// Committed usage reached the cap: the day's reset.
					stopOnce.Do(func() { close(done) })
					return
				case o.status == 429 && o.retryAfter >= 1:
					// Reservations in the way: they end within the lease.
					byReservations.Add(1)
					time.Sleep(100 * time.Millisecond)
				default:
					t.Errorf("status %d, Retry-After %d", o.status, o.retryAfter)
					return
				}
			}
		}()
	}
	for k := 1; k <= restarts; k++ {
		for answered.Load() < n*int64(k)/int64(restarts+1) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		srv.kill()
		time.Sleep(300 * time.Millisecond)
		srv.start(t)
	}
	wg.Wait()
	stopOnce.Do(func() { close(done) })
	if time.Now().After(deadline) {
		t.Fatalf("the callers did not reach the cap in time: %d answered of %d", answered.Load(), n)
	}
	for _, r := range rs {
		for wait := time.Now().Add(5 * time.Second); !r.journalEmpty(t); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(wait) {
				t.Fatalf("replica %s did not replay its journal:\n%s", r.HTTP, r.stderr.String())
			}
		}
	}
	u := usageOf(t, &rs[0].testGW, "")["tokens_per_day"]
	t.Logf("%d answered (%d served upstream), %d refused 503 during the restarts, %d refused 429 by reservations; ledger %+v",
		answered.Load(), served.Load(), unavailable.Load(), byReservations.Load(), u)
	if u.Committed != answered.Load()*perCall {
		t.Errorf("committed %d tokens, want %d: %d calls answered 200 × %d", u.Committed, answered.Load()*perCall, answered.Load(), perCall)
	}
	if u.Committed > n*perCall || answered.Load() != n {
		t.Errorf("%d calls answered, committed %d of a %d cap; want exactly %d calls, never past the cap", answered.Load(), u.Committed, n*perCall, n)
	}
	if u.Reserved != 0 {
		t.Errorf("still reserved: %+v", u)
	}
	if unavailable.Load() == 0 {
		t.Errorf("no call was refused while Redis was down: the restart did not happen during the calls")
	}
}

// TestRedisReplicaKilledMidStream: a replica killed with SIGKILL while it
// streams frees the stream's hold within the lease: meanwhile the other
// replica's 429 says to retry within the lease (not at the day's reset),
// and once the lease ended its call is served. While the replica lives,
// its renewals keep the hold past the lease.
func TestRedisReplicaKilledMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	lease := testLease(t)
	srv := startOwnRedis(t, "--save", "", "--appendonly", "no")
	// max_tokens leaves the stream far from its cut (one token per event at
	// least: 1,000 events, 50 s) for the whole test.
	const streamBody = `{"model":"m","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"Count to three, please."}]}`
	sEst, cEst := reservedFor(t, streamBody, 1024), reservedFor(t, chatBody, 1024)
	streaming := make(chan struct{}, 1)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if !bytes.Contains(mustRead(r), []byte(`"stream":true`)) {
			usageUpstream(cEst.Input, cEst.Output)(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			fmt.Fprintf(w, "data: %s\n\n", chunk(`[{"index":0,"delta":{"content":"word "}}]`, ""))
			w.(http.Flusher).Flush()
			if i == 0 {
				streaming <- struct{}{}
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	// The stream's hold and one chat call do not fit together.
	cap := sEst.Input + sEst.Output + cEst.Input + cEst.Output - 1
	rs := startReplicas(t, 2, up.URL, srv.url(), cap)
	a, b := rs[0], rs[1]

	req, _ := http.NewRequest("POST", a.HTTP+"/v1/chat/completions", strings.NewReader(streamBody))
	req.Header.Set("Authorization", "Bearer "+demoKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	go io.Copy(io.Discard, resp.Body)
	<-streaming

	client := &http.Client{Timeout: 5 * time.Second}
	check := func(what string) {
		t.Helper()
		o, err := chat(client, &b.testGW, chatBody)
		if err != nil || o.status != 429 || o.retryAfter < 1 || o.retryAfter > int64(lease/time.Second) {
			t.Fatalf("%s: %+v %v; want 429 with Retry-After within the lease (%v)", what, o, err, lease)
		}
	}
	check("while the stream runs")
	time.Sleep(lease + lease/2) // renewed by the live replica: still held
	check("a lease and a half later, the stream still running")

	a.kill()
	killed := time.Now()
	for {
		o, err := chat(client, &b.testGW, chatBody)
		if err != nil {
			t.Fatal(err)
		}
		if o.status == 200 {
			break
		}
		if o.status != 429 || o.retryAfter > int64(lease/time.Second) {
			t.Fatalf("after the kill: %+v; want 429 within the lease, then 200", o)
		}
		if time.Since(killed) > lease+lease/2+time.Second {
			t.Fatalf("the killed replica's hold was not freed %v after the kill (lease %v)", time.Since(killed), lease)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("hold freed %v after kill -9 (lease %v)", time.Since(killed).Round(10*time.Millisecond), lease)
}

func mustRead(r *http.Request) []byte {
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b
}

// TestRedisRollbackRefusedByReplicas: Redis killed with SIGKILL and
// restarted from an RDB snapshot that lacks the last commits, one replica
// killed and restarted with it: both replicas refuse metered calls (503,
// /readyz 503, a log line saying why) until `flexway ledger
// accept-rollback`, then meter from what Redis holds.
func TestRedisRollbackRefusedByReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	srv := startOwnRedis(t, "--save", "", "--appendonly", "no")
	est := reservedFor(t, chatBody, 1024)
	perCall := est.Input + est.Output
	up := newUpstream(t, usageUpstream(est.Input, est.Output))
	rs := startReplicas(t, 2, up.URL, srv.url(), 1000*perCall)
	a, b := rs[0], rs[1]
	client := &http.Client{Timeout: 5 * time.Second}
	calls := func(g *replica, k int, want int) {
		t.Helper()
		for range k {
			o, err := chat(client, &g.testGW, chatBody)
			if err != nil || o.status != want {
				t.Fatalf("call to %s: %+v %v; want %d\n%s", g.HTTP, o, err, want, g.stderr.String())
			}
		}
	}
	calls(a, 5, 200)
	srv.save(t) // the snapshot holds 5 calls
	calls(a, 5, 200)
	calls(b, 1, 200)
	time.Sleep(1500 * time.Millisecond) // the replicas' state files catch up
	a.kill()
	srv.kill()
	srv.start(t)
	a.restart(t, false)

	for _, g := range []*replica{a, b} {
		calls(g, 1, 503)
		if resp, err := http.Get(g.HTTP + "/readyz"); err != nil || resp.StatusCode != 503 {
			t.Fatalf("/readyz of %s after the rollback: %v %v; want 503", g.HTTP, resp, err)
		}
	}
	if log := a.stderr.String(); !strings.Contains(log, "went back in time") || !strings.Contains(log, "flexway ledger accept-rollback") {
		t.Errorf("no log line says why:\n%s", log)
	}
	if n := len(up.requests()); n != 11 {
		t.Fatalf("%d calls reached the upstream, want the 11 served before the rollback", n)
	}

	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"ledger", "accept-rollback", "--config", filepath.Join(a.dir, "flexway.yaml")}, &out, &errb); err != nil {
		t.Fatalf("ledger accept-rollback: %v\n%s%s", err, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "Redis holds commit 5 of epoch") || !strings.Contains(out.String(), "accepted as it is") {
		t.Errorf("accept-rollback said:\n%s", out.String())
	}
	for _, g := range []*replica{a, b} {
		calls(g, 1, 200)
		if resp, err := http.Get(g.HTTP + "/readyz"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("/readyz of %s after accept-rollback: %v %v; want 200", g.HTTP, resp, err)
		}
	}
	if u := usageOf(t, &b.testGW, "")["tokens_per_day"]; u.Committed != 7*perCall {
		t.Errorf("committed %d after accepting, want the snapshot's 5 calls and 2 new ones (%d)", u.Committed, 7*perCall)
	}
}
