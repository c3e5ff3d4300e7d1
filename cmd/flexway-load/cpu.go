package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's utime
// and stime: `getconf CLK_TCK`, 100 when that cannot be run (Linux's value
// on every common architecture).
func clockTicks() int64 {
	out, err := runOutput("getconf", "CLK_TCK")
	if err != nil {
		return 100
	}
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil || n <= 0 {
		return 100
	}
	return n
}

// groupCPUTicks returns utime + stime, in clock ticks, summed over every
// process whose process group is pgid (the middle process of a path and
// whatever it started: nginx's master and its workers), read from
// /proc/PID/stat. A process that exits between the listing and the read is
// skipped; one that exited earlier no longer counts (the harness's
// children do not fork while they are measured).
func groupCPUTicks(pgid int) (int64, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var total int64
	found := false
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		pg, ticks, err := parseStat(string(b))
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		if pg == pgid {
			total += ticks
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("no process in group %d", pgid)
	}
	return total, nil
}

// parseStat reads the process group and utime + stime from the text of a
// /proc/PID/stat. The command name, in parentheses, may itself hold spaces
// and parentheses: the fields are counted after the last ')'.
func parseStat(stat string) (pgrp int, ticks int64, err error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("no command name in %q", stat)
	}
	// After ')': state(3) ppid(4) pgrp(5) ... utime(14) stime(15).
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	pgrp, err = strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, err
	}
	utime, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, 0, err
	}
	stime, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, 0, err
	}
	return pgrp, utime + stime, nil
}

// cpuUse is the CPU time a path's middle process (group) used over some
// turns, and the requests it answered in them.
type cpuUse struct {
	Ticks    int64 // utime + stime, in clock ticks
	Requests int   // answered with a 200
	Hz       int64 // clock ticks per second
}

// add adds one turn's use.
func (c *cpuUse) add(ticks int64, requests int) {
	c.Ticks += ticks
	c.Requests += requests
}

// PerRequest is the CPU time per answered request; 0 when none was.
func (c cpuUse) PerRequest() time.Duration {
	if c.Requests == 0 || c.Hz == 0 {
		return 0
	}
	return time.Duration(float64(c.Ticks) * float64(time.Second) / float64(c.Hz) / float64(c.Requests))
}

// cpuMeter reads the CPU time of a path's middle process group; nil for a
// path with nothing in the middle (direct).
type cpuMeter func() (int64, error)

// groupMeter is the cpuMeter of p's process group.
func groupMeter(p *proc) cpuMeter {
	pgid := p.cmd.Process.Pid // Setpgid: the child leads its own group
	return func() (int64, error) { return groupCPUTicks(pgid) }
}
