package budget

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestEmbeddedPersistence(t *testing.T) {
	for _, noSync := range []bool{true, false} {
		t.Run(fmt.Sprintf("noSync=%v", noSync), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "nested", "dir", "ledger.db") // parent created
			p := Policy{
				Default: Limits{TokensPerDay: i64(1000), NanoEURPerMonth: i64(1_000_000)},
				Tenants: map[string]TenantPolicy{"acme": {Agents: map[string]Limits{"bot": {TokensPerMonth: i64(5000)}}}},
			}
			clk := newClock(t0)
			s, err := openEmbedded(path, noSync)
			if err != nil {
				t.Fatal(err)
			}
			l := New(p, s, Options{Now: clk.Now})
			mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 100, NanoEUR: 1000}), Amount{Tokens: 90, NanoEUR: 900})
			mustCommit(t, l, mustReserve(t, l, acBot, Amount{Tokens: 10, NanoEUR: 100}), Amount{Tokens: 7, NanoEUR: 70})
			mustReserve(t, l, acme, Amount{Tokens: 500}) // reservations die with the process
			before := map[Account][]CapUsage{}
			for _, a := range []Account{acme, acBot} {
				us, err := l.Usage(ctx, a)
				if err != nil {
					t.Fatal(err)
				}
				before[a] = us
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}

			s2, err := OpenEmbedded(path)
			if err != nil {
				t.Fatal(err)
			}
			l = New(p, s2, Options{Now: clk.Now})
			defer l.Close()
			for a, want := range before {
				got, err := l.Usage(ctx, a)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					want[i].Reserved = 0
					want[i].Remaining = want[i].Limit - want[i].Committed
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%v after reopen:\n got %+v\nwant %+v", a, got, want)
				}
			}
			if got := usageOf(t, l, acme, TokensPerDay); got.Committed != 97 || got.Reserved != 0 {
				t.Errorf("tenant day after reopen: %+v", got)
			}
			if got := committedIn(t, s2, acBot, true, EURPerMonth, "2026-11"); got != 70 {
				t.Errorf("agent nano-euros after reopen: %d", got)
			}
		})
	}
}

func TestEmbeddedLockedByAnotherOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s1, err := OpenEmbedded(path)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s2, err := OpenEmbedded(path)
	took := time.Since(start)
	if err == nil {
		s2.Close()
		t.Fatal("second open of a held ledger file succeeded")
	}
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "locked by another process") {
		t.Errorf("error %q: want ErrUnavailable naming %s and the lock", err, path)
	}
	if took < 900*time.Millisecond || took > 3*time.Second {
		t.Errorf("gave up after %v, want about 1s", took)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err = OpenEmbedded(path)
	if err != nil {
		t.Fatalf("open after the first closed: %v", err)
	}
	s2.Close()
}

func TestEmbeddedClosed(t *testing.T) {
	l := New(Policy{Default: Limits{TokensPerDay: i64(10)}}, embeddedKind().open(t), Options{})
	r := mustReserve(t, l, acme, Amount{Tokens: 1})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := l.Reserve(ctx, acme, Amount{Tokens: 1}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Reserve after Close: %v", err)
	}
	if err := l.Commit(ctx, r, Amount{Tokens: 1}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Commit after Close: %v", err)
	}
	if _, err := l.Check(ctx, acme); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Check after Close: %v", err)
	}
}

const kill9Env = "FLEXWAY_BUDGET_KILL9_LEDGER"

const kill9Workers, kill9Tokens = 8, 7

// TestEmbeddedKill9Child is the child of TestEmbeddedKill9: it commits calls
// until killed, printing "begin W" before and "done W" after each Commit.
func TestEmbeddedKill9Child(t *testing.T) {
	path := os.Getenv(kill9Env)
	if path == "" {
		t.Skip("child of TestEmbeddedKill9")
	}
	s, err := OpenEmbedded(path)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	l := New(Policy{Default: Limits{TokensPerMonth: i64(1 << 60)}}, s, Options{Now: func() time.Time { return t0 }})
	var mu sync.Mutex
	say := func(s string) {
		mu.Lock()
		os.Stdout.WriteString(s + "\n") // one write(2) per line
		mu.Unlock()
	}
	for w := 0; w < kill9Workers; w++ {
		go func() {
			a := Account{Tenant: "t" + strconv.Itoa(w)}
			for {
				r, err := l.Reserve(ctx, a, Amount{Tokens: kill9Tokens})
				if err != nil {
					say("error " + err.Error())
					return
				}
				say("begin " + strconv.Itoa(w))
				if err := l.Commit(ctx, r, Amount{Tokens: kill9Tokens}); err != nil {
					say("error " + err.Error())
					return
				}
				say("done " + strconv.Itoa(w))
			}
		}()
	}
	select {}
}

// TestEmbeddedKill9 kills a process committing under load with SIGKILL and
// checks that every commit it reported done is in the file — and nothing
// else but the commits it had begun.
func TestEmbeddedKill9(t *testing.T) {
	if os.Getenv(kill9Env) != "" {
		t.Skip("in the child")
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestEmbeddedKill9Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), kill9Env+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var begun, done [kill9Workers]int64
	sc := bufio.NewScanner(out)
	killed := false
	total := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] != "begin" && f[0] != "done" {
			if strings.HasPrefix(f[0], "error") {
				t.Errorf("child: %s", sc.Text())
			}
			continue
		}
		w, _ := strconv.Atoi(f[1])
		if f[0] == "begin" {
			begun[w]++
		} else {
			done[w]++
			total++
		}
		if total == 3000 && !killed {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	cmd.Wait()
	if !killed {
		t.Fatalf("the child stopped before 3000 commits (%d)", total)
	}
	s, err := OpenEmbedded(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	month := t0.Format("2006-01")
	var sumDone, sumDisk int64
	for w := range kill9Workers {
		got := committedIn(t, s, Account{Tenant: "t" + strconv.Itoa(w)}, false, TokensPerMonth, month)
		want := done[w] * kill9Tokens
		inFlight := begun[w] - done[w] // 0 or 1: killed between "begin" and "done"
		if got != want && (inFlight != 1 || got != want+kill9Tokens) {
			t.Errorf("worker %d: %d tokens in the file, reported done %d (%d calls, %d in flight)", w, got, want, done[w], inFlight)
		}
		sumDone += want
		sumDisk += got
	}
	t.Logf("killed after %d reported commits: %d tokens reported, %d in the file", total, sumDone, sumDisk)
}
