// Package redistest starts a real redis-server for tests (redis-server
// is what .ci/run installs): on a free loopback port, without
// persistence, killed when the test ends.
package redistest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Bin is redis-server's path; without it the test is skipped, unless
// FLEXWAY_REQUIRE_REDIS=1, which fails it.
func Bin(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("FLEXWAY_REQUIRE_REDIS") == "1" {
			t.Fatal("redis-server not on PATH and FLEXWAY_REQUIRE_REDIS=1")
		}
		t.Skip("redis-server not on PATH (FLEXWAY_REQUIRE_REDIS=1 makes this a failure)")
	}
	return bin
}

// Start starts a redis-server on a free loopback port, killed in
// t.Cleanup; skipped without redis-server ([Bin]). It returns the
// server's host:port and a kill that stops it at once (idempotent).
func Start(t testing.TB) (addr string, kill func()) {
	t.Helper()
	bin := Bin(t)
	for attempt := 0; attempt < 4; attempt++ {
		port := FreePort(t)
		dir := t.TempDir()
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		kill := func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		}
		t.Cleanup(kill)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
				c.Close()
				return addr, kill
			}
		}
		kill()
	}
	t.Fatal("redis-server did not start")
	return "", nil
}

var portSeq atomic.Int32

// FreePort finds a loopback port in 18500-18799 that was free a moment
// ago (a caller that loses it to a race retries).
func FreePort(t testing.TB) int {
	t.Helper()
	start := int(portSeq.Add(1)) + os.Getpid()
	for i := 0; i < 300; i++ {
		port := 18500 + (start+i)%300
		if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			ln.Close()
			return port
		}
	}
	t.Fatal("no free port in 18500-18799")
	return 0
}
