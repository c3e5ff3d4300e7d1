package ledger

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// openNotesReplica opens the Redis store with local files at path, giving
// the notes handed at open to *got.
func openNotesReplica(t *testing.T, url, path string, got *[]string, log *strings.Builder) Store {
	t.Helper()
	st, err := OpenRedisWithOptions(ctx, url, RedisOptions{Path: path, Logger: testLogger(log), Notes: func(ns [][]byte) error {
		for _, n := range ns {
			*got = append(*got, string(n))
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func withNote(note string) context.Context {
	return WithNote(ctx, func() []byte { return []byte(note) })
}

// TestRedisNotesHandedAtOpen: the Redis store keeps each commit's note in
// its notes file, written before the commit runs in Redis, and its next
// open hands on exactly the notes of the commits Redis holds or the
// journal holds (to be replayed): not that of a call whose commit never
// reached Redis (a kill between the note and the commit), nor that of a
// released reservation, nor a note over 8 KiB; and they are handed once.
func TestRedisNotesHandedAtOpen(t *testing.T) {
	srv := startPersistentRedis(t, "--save", "", "--appendonly", "yes", "--appendfsync", "always")
	if _, err := InitRedis(ctx, srv.url); err != nil {
		t.Fatal(err)
	}
	p := Policy{Default: Limits{TokensPerDay: i64(1000)}}
	path := filepath.Join(t.TempDir(), "redis-ledger")
	var got []string
	var log strings.Builder
	st := openNotesReplica(t, srv.url, path, &got, &log)
	l := New(p, st, Options{})
	r1 := mustReserve(t, l, acme, Amount{Tokens: 50})
	if err := l.Commit(withNote("one"), r1, Amount{Tokens: 40}); err != nil {
		t.Fatal(err)
	}
	r2 := mustReserve(t, l, acme, Amount{Tokens: 50})
	if err := l.Commit(withNote("two"), r2, Amount{Tokens: 5}); err != nil {
		t.Fatal(err)
	}
	big := mustReserve(t, l, acme, Amount{Tokens: 1})
	if err := l.Commit(withNote(strings.Repeat("x", maxNote+1)), big, Amount{Tokens: 1}); err != nil {
		t.Fatal(err)
	}
	// A note whose commit never reached Redis (the process died between
	// the two), and one of a reservation that was released.
	lost := mustReserve(t, l, acme, Amount{Tokens: 10})
	rel := mustReserve(t, l, acme, Amount{Tokens: 10})
	if err := l.Release(ctx, rel); err != nil {
		t.Fatal(err)
	}
	loc := st.(*redisStore).local
	for _, id := range []string{lost.id, rel.id} {
		if err := loc.note(id, []byte("uncommitted "+id)); err != nil {
			t.Fatal(err)
		}
	}
	// The notes survive a rotation (the old file is read too).
	if err := loc.rotateNotes(); err != nil {
		t.Fatal(err)
	}
	// Redis down: the commit is journaled, and so is its note kept.
	r3 := mustReserve(t, l, acme, Amount{Tokens: 50})
	srv.kill()
	if err := l.Commit(withNote("three"), r3, Amount{Tokens: 7}); err != nil {
		t.Fatal(err)
	}
	if n := journalLines(t, path); n != 1 {
		t.Fatalf("journal holds %d lines, want 1", n)
	}
	l.Close()
	if len(got) != 0 {
		t.Fatalf("notes handed before any reopen: %q", got)
	}
	srv.start(t) // AOF, appendfsync always: it holds every commit and tombstone
	st = openNotesReplica(t, srv.url, path, &got, &log)
	if want := []string{"one", "two", "three"}; !slices.Equal(got, want) {
		t.Errorf("notes handed at open: %q; want %q", got, want)
	}
	st.Close()
	got = nil
	st = openNotesReplica(t, srv.url, path, &got, &log)
	defer st.Close()
	if len(got) != 0 {
		t.Errorf("notes handed again at the next open: %q", got)
	}
	if _, err := os.Stat(path + ".notes.old"); err == nil {
		t.Errorf("%s.notes.old stays after the notes were handed", path)
	}
}
