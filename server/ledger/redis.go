package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStore is the Redis-backed Store. Amounts are exact int64 in Redis
// (INCRBY, HINCRBY); the limit comparison inside the reserve script uses
// Lua numbers (doubles), exact up to 2^53 (9e15 tokens, or about 9 million
// euros per month in nano-euros).
type redisStore struct {
	c    *redis.Client
	addr string // the URL with its password redacted, for messages
	log  *slog.Logger

	mu    sync.Mutex
	known redisState // the highest (epoch, sequence) Redis reported, and a rollback seen
	dirty bool       // known changed since it was last saved

	local    *redisLocal // this replica's state file and commit journal; nil: none
	replayMu sync.Mutex  // one replay of the journal at a time
	noteErr  atomic.Bool // a note could not be written (logged once)

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// redisState is what a replica knows of the Redis ledger's history: the
// highest epoch and commit sequence Redis reported to it, and, when it
// found Redis below them, why ("" when not).
type redisState struct {
	Epoch      int64  `json:"epoch"`
	Seq        int64  `json:"seq"`
	RolledBack string `json:"rolled_back,omitempty"`
}

// RedisOptions are the options of [OpenRedisWithOptions].
type RedisOptions struct {
	// Path is the prefix of this replica's own files, which no other
	// process may share (the first holds Path+".lock"):
	//
	//   - Path+".state": the highest commit sequence this replica saw
	//     Redis report (JSON, rewritten at most once a second and at
	//     once when a rollback is found), so that a rollback is detected
	//     even when Redis and the replica restart together;
	//   - Path+".journal": commits that could not be applied in Redis
	//     (unreachable, without its marker, or rolled back), one line
	//     each, "<crc32c of the JSON, 8 hex digits> <JSON>", fsynced
	//     before the commit returns, replayed in order once Redis takes
	//     them (before this replica reserves again) and then removed.
	//   - Path+".notes" and Path+".notes.old": the notes ([WithNote]: the
	//     calls' audit lines) of this replica's commits of the last one
	//     to two seconds, each written (one write(2), no fsync) before its
	//     commit runs in Redis; at open, those whose commits Redis holds
	//     (their tombstone says committed) or the journal holds go to
	//     Notes, and both files are removed. A kill -9 loses no note; an
	//     OS crash can lose the last second's.
	//
	// "" keeps the first two in memory only, and no notes: a restart
	// forgets the sequence, and a commit Redis does not take fails (the
	// usage is lost).
	Path string
	// Notes, when set (with Path), is given at open the notes of the
	// commits this replica made in the last seconds before it stopped
	// that Redis (or the journal) holds, oldest first, before the store
	// is used; an error fails the open (the notes files stay). Not called
	// when there is none. When Redis cannot be asked at open, the notes
	// whose commits only Redis could hold are not given (Logger is told
	// how many).
	Notes func(notes [][]byte) error
	// Logger receives the ledger's events: a rollback found (error), a
	// rollback accepted, commits journaled and replayed (warn). nil
	// discards them.
	Logger *slog.Logger
}

// OpenRedis returns the Redis ledger at url ("redis://[user:password@]
// host:port/db", or "rediss://" for TLS; go-redis URL options such as
// ?pool_size=128 are honoured), without local files ([RedisOptions] zero).
// It connects lazily, so that a gateway starts
// while Redis is down and meters calls as soon as it is back; see
// [CheckRedis] to report its state at start. Unless the URL sets them,
// timeouts are 1s (dial, read, write) and failed commands are not retried:
// a Redis that is down makes calls fail fast rather than pile up.
//
// Errors: an invalid URL is reported as such (without the URL's password).
// Every later call wraps [ErrUnavailable] while Redis is unreachable,
// [ErrNoMarker] too while the marker is missing (see [InitRedis]), and
// [ErrRolledBack] once Redis was found to have lost commits.
//
// Redis must run with persistence (AOF or RDB): a Redis that restarts empty
// is detected by the missing marker and refuses metered calls; one that
// restarts with fewer commits than a replica saw is detected by the
// commit sequence (see [ErrRolledBack]).
func OpenRedis(ctx context.Context, url string) (Store, error) {
	return OpenRedisWithOptions(ctx, url, RedisOptions{})
}

// OpenRedisWithOptions is [OpenRedis] with this replica's local files
// (o.Path) and a logger. Errors, besides OpenRedis's: Path's directory
// cannot be created, another process holds Path+".lock", or the state file
// or the journal cannot be read or is corrupt other than by a torn last
// line (all wrapping [ErrUnavailable], naming the file).
func OpenRedisWithOptions(ctx context.Context, url string, o RedisOptions) (Store, error) {
	c, addr, err := redisClient(url)
	if err != nil {
		return nil, err
	}
	s := &redisStore{c: c, addr: addr, log: o.Logger, stop: make(chan struct{}), done: make(chan struct{})}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if o.Path != "" {
		loc, st, err := openRedisLocal(o.Path, s.log)
		if err != nil {
			c.Close()
			return nil, err
		}
		s.local, s.known = loc, st
		if err := s.handNotes(ctx, o.Notes); err != nil {
			loc.close()
			c.Close()
			return nil, err
		}
		if n := loc.count(); n > 0 {
			s.log.Warn("budget ledger: commits journaled while Redis could not take them are replayed before this replica reserves", "journal", loc.journalPath(), "commits", n)
		}
		go s.maintain()
	} else {
		close(s.done)
	}
	return s, nil
}

// redisMaintainEvery is how often the store saves its known sequence
// (when it changed) and retries replaying its journal (when it holds
// commits).
const redisMaintainEvery = time.Second

func (s *redisStore) maintain() {
	defer close(s.done)
	t := time.NewTicker(redisMaintainEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.saveState()
		if err := s.local.rotateNotes(); err != nil {
			s.noteFailed(err)
		}
		if s.local.count() > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.replay(ctx) // a failure is retried next tick; calls report it
			cancel()
		}
	}
}

// saveState writes known to the state file when it changed.
func (s *redisStore) saveState() {
	s.mu.Lock()
	st, dirty := s.known, s.dirty
	s.dirty = false
	s.mu.Unlock()
	if !dirty || s.local == nil {
		return
	}
	if err := s.local.saveState(st); err != nil {
		s.mu.Lock()
		s.dirty = true
		s.mu.Unlock()
		s.log.Warn("budget ledger: cannot save the Redis commit sequence this replica saw; a rollback of Redis may then go unnoticed after a restart", "error", err.Error())
	}
}

func bucketKeys(keys []string, bucket string) []string {
	return append(keys, keyPrefix+"b:"+bucket, keyPrefix+"z:"+bucket)
}

// replyInt parses a decimal string reply.
func replyInt(v any) (int64, error) {
	switch v := v.(type) {
	case string:
		return strconv.ParseInt(v, 10, 64)
	case int64:
		return v, nil
	}
	return 0, fmt.Errorf("not an integer: %v", v)
}

func unixMs(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// fail turns a Redis error into one wrapping ErrUnavailable.
func (s *redisStore) fail(ctx context.Context, op string, err error) error {
	if msg := err.Error(); strings.Contains(msg, rollbackReply) {
		return s.rolledBack(msg[strings.Index(msg, rollbackReply)+len(rollbackReply):])
	}
	if strings.Contains(err.Error(), noMarkerReply) {
		return fmt.Errorf("%w: redis %s: %w", ErrUnavailable, s.addr, ErrNoMarker)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: redis %s: %s: %w", ErrUnavailable, s.addr, op, ctx.Err())
	}
	return fmt.Errorf("%w: redis %s unreachable or failing (%s): %v", ErrUnavailable, s.addr, op, err)
}

// rolledBack records a rollback Redis reported ("<e> <s> <known e> <known
// s>"): saved at once, logged the first time, and returned as the error.
func (s *redisStore) rolledBack(detail string) error {
	detail = strings.TrimSpace(detail)
	f := strings.Fields(detail)
	if len(f) != 4 {
		f = []string{"?", "?", "?", "?"}
	}
	s.mu.Lock()
	first := s.known.RolledBack == ""
	if first {
		s.known.RolledBack = detail
		s.dirty = true
	}
	s.mu.Unlock()
	err := fmt.Errorf("%w: redis %s: %w (Redis holds commit %s of epoch %s; a replica had seen commit %s of epoch %s)", ErrUnavailable, s.addr, ErrRolledBack, f[1], f[0], f[3], f[2])
	if first && s.log != nil {
		s.saveState()
		s.log.Error("budget ledger: "+err.Error(), "redis", s.addr)
	}
	return err
}

// args returns what the scripts' guard needs: known epoch, sequence and
// rollback flag, followed by rest.
func (s *redisStore) args(rest ...any) []any {
	s.mu.Lock()
	k := s.known
	s.mu.Unlock()
	rb := "0"
	if k.RolledBack != "" {
		rb = "1"
	}
	return append([]any{k.Epoch, k.Seq, rb}, rest...)
}

// observe takes the epoch and sequence a script reported: a higher one is
// remembered; a newer epoch is adopted (`ledger init` or `ledger
// accept-rollback` was run), which ends a rollback this replica saw.
func (s *redisStore) observe(ev, sv any) error {
	e, err1 := replyInt(ev)
	q, err2 := replyInt(sv)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("unexpected sequence %v %v", ev, sv)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case e > s.known.Epoch:
		if s.known.RolledBack != "" {
			s.log.Warn("budget ledger: the Redis ledger's state was accepted (flexway ledger accept-rollback or init): metering again", "redis", s.addr, "epoch", e, "seq", q)
		}
		s.known, s.dirty = redisState{Epoch: e, Seq: q}, true
	case e == s.known.Epoch && q > s.known.Seq:
		s.known.Seq, s.dirty = q, true
	}
	return nil
}

// Close stops the store's background work, saves the known sequence and
// closes the journal and the Redis client. Idempotent.
func (s *redisStore) Close() error {
	s.closeOnce.Do(func() {
		if s.local != nil {
			close(s.stop)
			<-s.done
			s.saveState()
			s.closeErr = s.local.close()
		}
		if err := s.c.Close(); err != nil && !errors.Is(err, redis.ErrClosed) && s.closeErr == nil {
			s.closeErr = err
		}
	})
	return s.closeErr
}
