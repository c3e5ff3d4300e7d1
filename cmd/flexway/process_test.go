package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flexway/flexway/cmd/flexway/gateway"
	"github.com/flexway/flexway/internal/redistest"
	"github.com/flexway/flexway/server/ledger"
)

// TestMain lets a test run the gateway as its own process: the test binary,
// re-executed with FLEXWAY_TEST_EXEC=1, is the flexway command.
func TestMain(m *testing.M) {
	if os.Getenv("FLEXWAY_TEST_EXEC") == "1" {
		// A test's short reservation lease (testLeaseEnv), for the
		// replica-kill tests; production binaries have no such hook.
		if v, err := time.ParseDuration(os.Getenv(testLeaseEnv)); err == nil {
			tuneOptions = func(o *gateway.Options) { o.ReservationTTL = v }
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child is a `flexway serve` running as a separate process.
type child struct {
	testGW
	cmd    *exec.Cmd
	stderr *syncBuffer
}

// startChild writes cfg into dir and runs `flexway serve` on it as a
// process until the test ends or kill. The child binds its own listeners
// (server.http may be 127.0.0.1:0): their addresses are read from the line
// it prints once serving.
func startChild(t *testing.T, dir, cfg string) *child {
	t.Helper()
	path := filepath.Join(dir, "flexway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &child{stderr: &syncBuffer{}}
	c.cmd = exec.Command(os.Args[0], "serve", "--config", path)
	c.cmd.Env = append(os.Environ(), "FLEXWAY_TEST_EXEC=1")
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stderr = c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.kill() })
	c.HTTP = servingAddr(t, stdout, c.stderr)
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(c.HTTP + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("flexway serve did not become ready:\n%s", c.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// servingAddr reads a child's stdout up to its "flexway: serving OpenAI
// API on URL/v1" line and returns URL; the rest of stdout is discarded.
func servingAddr(t *testing.T, stdout io.Reader, stderr *syncBuffer) string {
	t.Helper()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "flexway: serving OpenAI API on "); ok {
				found <- strings.TrimSuffix(strings.Fields(rest)[0], "/v1")
				break
			}
		}
		close(found)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case u, ok := <-found:
		if !ok {
			t.Fatalf("flexway serve exited before serving:\n%s", stderr.String())
		}
		return u
	case <-time.After(15 * time.Second):
		t.Fatalf("flexway serve did not say where it serves:\n%s", stderr.String())
		return ""
	}
}

// kill sends SIGKILL and waits for the process.
func (c *child) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
}

// testRedis returns the URL of a Redis database for one test, flushed: the
// server .ci/run started (FLEXWAY_TEST_REDIS_URL, database db), else a
// redis-server this test starts. Without either the test is skipped,
// unless FLEXWAY_REQUIRE_REDIS=1.
func testRedis(t *testing.T, db int) string {
	t.Helper()
	base := os.Getenv("FLEXWAY_TEST_REDIS_URL")
	if base == "" {
		base = startRedis(t)
	}
	u := strings.TrimRight(base, "/") + "/" + strconv.Itoa(db)
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	if err := rc.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("redis at %s: %v", base, err)
	}
	return u
}

// startRedis starts a redis-server on a free loopback port, without
// persistence, stopped when the test ends.
func startRedis(t *testing.T) string {
	t.Helper()
	bin := redistest.Bin(t)
	addr := freePort(t)
	_, port, _ := net.SplitHostPort(addr)
	var out bytes.Buffer
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(5 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "redis://" + addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not start:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKill9KeepsEveryCommittedCall: a gateway killed with SIGKILL under
// load, then restarted on the same ledger file, holds the usage of every
// call its callers saw answered, and never more than the upstream served.
func TestKill9KeepsEveryCommittedCall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const perCall = 15 // the upstream's usage: 10 + 5 tokens
	var upstreamCount int64
	var mu sync.Mutex
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * time.Millisecond)
		usageUpstream(10, 5)(w, r)
		mu.Lock()
		upstreamCount++
		mu.Unlock()
	})
	dir := t.TempDir()
	t.Setenv("FLEXWAY_TEST_KEY", demoKey)
	cfg := budgetConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 100000000}")
	g := startChild(t, dir, cfg)

	var answered int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	client := &http.Client{Timeout: 5 * time.Second}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", g.HTTP+"/v1/chat/completions", strings.NewReader(chatBody))
				req.Header.Set("Authorization", "Bearer "+demoKey)
				resp, err := client.Do(req)
				if err != nil {
					return // the gateway is gone
				}
				var buf bytes.Buffer
				_, err = buf.ReadFrom(resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode == 200 && strings.Contains(buf.String(), `"total_tokens":15`) {
					mu.Lock()
					answered++
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(700 * time.Millisecond)
	g.kill()
	close(stop)
	wg.Wait()
	mu.Lock()
	lo, hi := answered*perCall, upstreamCount*perCall
	mu.Unlock()
	if answered < 10 {
		t.Fatalf("only %d calls answered before the kill: the load did not run", answered)
	}

	// The restarted gateway reads the same ledger file (the same directory).
	g2 := startChild(t, dir, cfg)
	committed := usageOf(t, &g2.testGW, "")["tokens_per_day"].Committed
	if committed < lo || committed > hi || committed%perCall != 0 {
		t.Fatalf("committed %d tokens after kill -9; want between %d (%d calls answered) and %d (%d served upstream), a multiple of %d",
			committed, lo, lo/perCall, hi, hi/perCall, perCall)
	}
	t.Logf("answered %d, upstream served %d, committed %d calls", lo/perCall, hi/perCall, committed/perCall)
}

// redisBudget is the ai.budget block of a Redis ledger at url with a
// tokens_per_day cap.
func redisBudget(url string, tokensPerDay int64) string {
	return fmt.Sprintf("    store: {type: redis, url: %q}\n    default: {tokens_per_day: %d}", url, tokensPerDay)
}

// TestRedisLedgerSharedByTwoGateways: two gateway processes on one Redis
// hold one cap together: 64 callers spread over both get exactly N
// answers.
func TestRedisLedgerSharedByTwoGateways(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	url := testRedis(t, 1)
	est := reservedFor(t, chatBody, 1024)
	perCall := est.Input + est.Output
	const n = 12
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		usageUpstream(est.Input, est.Output)(w, r)
	})
	t.Setenv("FLEXWAY_TEST_KEY", demoKey)
	var gws []*child
	for range 2 {
		cfg := budgetConfig(t, up.URL, up.URL, redisBudget(url, n*perCall))
		dir := t.TempDir()
		if len(gws) == 0 {
			path := filepath.Join(dir, "flexway.yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if err := run(context.Background(), []string{"ledger", "init", "--config", path}, &out, &errb); err != nil || !strings.Contains(out.String(), "marker written") {
				t.Fatalf("ledger init: %v\n%s%s", err, out.String(), errb.String())
			}
		}
		gws = append(gws, startChild(t, dir, cfg))
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := post(t, &gws[i%2].testGW, "/v1/chat/completions", chatBody)
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[200] != n || codes[429] != 64-n {
		t.Fatalf("answers by status %v; want exactly %d 200s and %d 429s", codes, n, 64-n)
	}
	for _, g := range gws {
		if u := usageOf(t, &g.testGW, "")["tokens_per_day"]; u.Committed != n*perCall || u.Reserved != 0 {
			t.Fatalf("ledger seen by %s: %+v; want %d committed", g.HTTP, u, n*perCall)
		}
	}
}

// TestRedisLedgerRefusesWhenLost: a Redis ledger without its marker (new,
// or emptied by a restart without persistence) and an unreachable Redis
// refuse metered calls with 503 rather than serve them unmetered.
func TestRedisLedgerRefusesWhenLost(t *testing.T) {
	url := testRedis(t, 2)
	up := newUpstream(t, usageUpstream(10, 5))
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, redisBudget(url, 1000000)))
	resp := post(t, g, "/v1/chat/completions", chatBody)
	body := readJSON(t, resp)
	if resp.StatusCode != 503 || !strings.Contains(fmt.Sprint(body), "budget ledger is unavailable") {
		t.Fatalf("no marker: %d %v; want 503 naming the ledger", resp.StatusCode, body)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("%d calls reached the upstream unmetered", n)
	}
	if r, err := http.Get(g.HTTP + "/readyz"); err != nil || r.StatusCode != 503 {
		t.Fatalf("/readyz without the marker: %v %v; want 503", r.StatusCode, err)
	}
	// Once initialised, the gateway is ready and meters.
	if _, err := ledger.InitRedis(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	if r, err := http.Get(g.HTTP + "/readyz"); err != nil || r.StatusCode != 200 {
		t.Fatalf("/readyz after ledger init: %v %v; want 200", r.StatusCode, err)
	}
	if resp := post(t, g, "/v1/chat/completions", chatBody); resp.StatusCode != 200 {
		t.Fatalf("after ledger init: %d", resp.StatusCode)
	}

	closed := freePort(t) // nothing listens here
	g2 := startGateway(t, budgetConfig(t, up.URL, up.URL, redisBudget("redis://"+closed+"/0", 1000000)))
	resp = post(t, g2, "/v1/chat/completions", chatBody)
	if resp.StatusCode != 503 {
		t.Fatalf("unreachable Redis: %d; want 503", resp.StatusCode)
	}
	if n := len(up.requests()); n != 1 {
		t.Fatalf("%d calls reached the upstream, want only the one metered after init", n)
	}
}
