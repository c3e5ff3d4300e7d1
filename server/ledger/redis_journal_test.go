package ledger

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func journalLines(t *testing.T, path string) int {
	t.Helper()
	raw, err := os.ReadFile(path + ".journal")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(raw, []byte("\n"))
}

// TestRedisOutageCommitsJournaled: commits made while Redis is down (the
// attack pass: 16 calls answered 200 during a 3-second restart were never
// committed) go to the replica's journal and are applied once Redis is
// back, before the replica reserves again; their holds stay meanwhile; a
// replay that runs twice counts once; a replica restarted with a journal
// replays it.
func TestRedisOutageCommitsJournaled(t *testing.T) {
	srv := startPersistentRedis(t, "--save", "", "--appendonly", "yes", "--appendfsync", "always")
	if _, err := InitRedis(ctx, srv.url); err != nil {
		t.Fatal(err)
	}
	p := Policy{Default: Limits{TokensPerDay: i64(1000)}}
	clk := newClock(t0)
	path := filepath.Join(t.TempDir(), "redis-ledger")
	l := New(p, openReplica(t, srv.url, path), Options{Now: clk.Now})
	defer func() { l.Close() }()
	mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 100}), Amount{Tokens: 100})
	r1 := mustReserve(t, l, acme, Amount{Tokens: 50})
	r2 := mustReserve(t, l, acme, Amount{Tokens: 50})

	srv.kill()
	mustCommit(t, l, r1, Amount{Tokens: 40}) // journaled: nil, durable here
	mustCommit(t, l, r2, Amount{Tokens: 45})
	if n := journalLines(t, path); n != 2 {
		t.Fatalf("journal holds %d lines, want 2", n)
	}
	if _, err := l.Reserve(ctx, acme, Amount{Tokens: 1}); err == nil {
		t.Fatal("reserved with Redis down")
	}

	srv.start(t) // AOF with appendfsync always: nothing applied is lost
	// The journaled commits' holds are still there (renewed by the store).
	clk.Add(LeaseTTL - time.Second)
	if err := l.renew(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Add(LeaseTTL - time.Second)
	raw := New(p, srv.open(t), Options{Now: clk.Now})
	defer raw.Close()
	if u := usageOf(t, raw, acme, TokensPerDay); u.Committed != 100 || u.Reserved != 100 {
		t.Fatalf("before the replay: %+v; want 100 committed and the two holds", u)
	}
	// The next reservation replays first: it is granted against 185.
	r3 := mustReserve(t, l, acme, Amount{Tokens: 815})
	if u := usageOf(t, raw, acme, TokensPerDay); u.Committed != 185 || u.Reserved != 815 {
		t.Fatalf("after the replay: %+v; want 185 committed", u)
	}
	if n := journalLines(t, path); n != 0 {
		t.Fatalf("journal holds %d lines after the replay", n)
	}

	// A commit applied whose reply was lost, journaled and replayed: once.
	st := l.store.(*redisStore)
	mustCommit(t, l, r3, Amount{Tokens: 15})
	rec := jcommit{ID: r3.id, At: clk.Now().UnixMilli(), Lines: toJLines(append([]line(nil), r3.lines...))}
	for i := range rec.Lines {
		rec.Lines[i].Held, rec.Lines[i].Amount = -1, 15
	}
	if _, err := st.local.append(rec); err != nil {
		t.Fatal(err)
	}
	if err := st.replay(ctx); err != nil {
		t.Fatal(err)
	}
	if u := usageOf(t, raw, acme, TokensPerDay); u.Committed != 200 || u.Reserved != 0 {
		t.Fatalf("after replaying an applied commit: %+v; want 200", u)
	}

	// A replica that stops with a journal replays it at its next start,
	// and drops a torn last line (a crash while writing it).
	r4 := mustReserve(t, l, acme, Amount{Tokens: 10})
	srv.kill()
	mustCommit(t, l, r4, Amount{Tokens: 10})
	l.Close()
	f, err := os.OpenFile(path+".journal", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`1234abcd {"id":"torn`)
	f.Close()
	srv.start(t)
	var logs strings.Builder
	st2, err := OpenRedisWithOptions(ctx, srv.url, RedisOptions{Path: path, Logger: testLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	l = New(p, st2, Options{Now: clk.Now})
	if !strings.Contains(logs.String(), "torn last line") {
		t.Errorf("no warning about the torn line: %s", logs.String())
	}
	mustReserve(t, l, acme, Amount{Tokens: 1})
	if u := usageOf(t, raw, acme, TokensPerDay); u.Committed != 210 {
		t.Fatalf("after the restart's replay: %+v; want 210", u)
	}

	// Another process cannot share the files.
	if _, err := OpenRedisWithOptions(ctx, srv.url, RedisOptions{Path: path}); err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Errorf("a second open of the same files: %v", err)
	}
}

// testLogger writes JSON log lines to b.
func testLogger(b *strings.Builder) *slog.Logger {
	return slog.New(slog.NewJSONHandler(&lockedWriter{w: b}, nil))
}

type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
