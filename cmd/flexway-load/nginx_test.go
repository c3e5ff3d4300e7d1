package main

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStartNginx starts the nginx path's nginx, when this machine has one,
// and checks it proxies a JSON answer and a stream chunk by chunk, as the
// Go floor does, and that its CPU time can be read by process group.
func TestStartNginx(t *testing.T) {
	t.Parallel()
	bin, err := findNginx()
	if err != nil {
		t.Skip(err)
	}
	next := make(chan struct{})
	up := goproxyUpstream(t, next)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	ng, err := startNginx(ctx, bin, dir, "nginx", hostPort(up.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer ng.stop()
	checkGoProxy(t, ctx, "http://"+ng.addr, next)
	if _, err := groupMeter(ng.proc)(); err != nil {
		t.Errorf("nginx's CPU time: %v", err)
	}
	if b, err := os.ReadFile(dir + "/nginx/access.log"); err != nil || strings.Count(string(b), "\n") != 2 {
		t.Errorf("access log %q, %v; want two lines", b, err)
	}
	ng.stop()
	if !ng.exited() {
		t.Error("nginx is still running after stop")
	}
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	// A command name with a space and a parenthesis in it.
	stat := "4242 (nginx: (worker) x) S 4240 4240 4240 0 -1 4194624 100 0 0 0 37 5 0 0 20 0 1 0 123 456 789"
	pg, ticks, err := parseStat(stat)
	if err != nil || pg != 4240 || ticks != 42 {
		t.Errorf("parseStat = %d, %d, %v; want 4240, 42, nil", pg, ticks, err)
	}
	if _, _, err := parseStat("4242 (short) S 1 2"); err == nil {
		t.Error("parseStat of a short line returned no error")
	}
	if _, err := groupCPUTicks(syscall.Getpgrp()); err != nil {
		t.Errorf("groupCPUTicks of this test's own group: %v", err)
	}
}

func TestCPUPerRequest(t *testing.T) {
	t.Parallel()
	c := cpuUse{Hz: 100}
	c.add(3, 100) // 30 ms over 100 requests
	c.add(1, 100)
	if got, want := c.PerRequest(), 200*time.Microsecond; got != want {
		t.Errorf("PerRequest = %v, want %v", got, want)
	}
	if got := (cpuUse{Hz: 100}).PerRequest(); got != 0 {
		t.Errorf("PerRequest with no request = %v, want 0", got)
	}
}
