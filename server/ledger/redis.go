package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis key layout. Every key starts with keyPrefix:
//
//	flexway:ledger:marker     the marker; absent = new or emptied Redis
//	flexway:ledger:seq        hash: "e" → epoch, "s" → commit sequence, "rb" → a detected rollback
//	flexway:ledger:b:<bucket> hash: "c" → committed total, "r" → reserved total
//	flexway:ledger:z:<bucket> sorted set: "<reservation id>/<amount>" → deadline (unix ms)
//	flexway:ledger:d:<id>     a finished reservation (tombstone), for tombstoneGrace: "c" committed, "1" released
//
// <bucket> is "t:<tenant>:<cap>:<period>" or "a:<tenant>:<agent>:<cap>:<period>".
// The keys of a day bucket expire 3 days after the day began, those of a
// month bucket 70 days after the month began (EXPIREAT, set when the key is
// created).
//
// Rollback detection: every commit increments "s" in the same script that
// applies it; every script returns (e, s), and every replica remembers the
// highest (e, s) it was told (and keeps it in its state file, see
// [RedisOptions.Path]) and passes it to every script, which refuses — and
// records "rb", so that every replica refuses — when Redis's (e, s) is
// below it: Redis lost commits a replica saw. `flexway ledger init` (a new
// ledger) and `flexway ledger accept-rollback` set "e" to a new, higher
// epoch (unix milliseconds, or e+1), which replicas adopt, and clear "rb".
// A missing "seq" key is epoch 0, sequence 0 (a ledger made before it).
//
// All keys of one operation are passed in KEYS, but they span several
// tenants' buckets and the marker: the store runs on a single Redis (or a
// primary with replicas), not on Redis Cluster.
const (
	keyPrefix = "flexway:ledger:"
	markerKey = keyPrefix + "marker"
	seqKey    = keyPrefix + "seq"
	// tombstoneGrace is how long a finished reservation is remembered (by
	// the Redis server's clock), so that a retried commit or release (the
	// reply was lost) or a journaled commit replayed again is not applied
	// twice. It costs about 100 bytes of Redis memory per call for that
	// long (60 MB at 1,000 calls/s).
	tombstoneGrace = 10 * time.Minute
	noMarkerReply  = "FLEXWAY_NO_MARKER"
	rollbackReply  = "FLEXWAY_ROLLBACK"
)

// luaGuard is the start of every script but leaseEnd: KEYS[1] is the
// marker, KEYS[2] the seq hash; ARGV[1], ARGV[2] the epoch and sequence
// the replica knows, ARGV[3] "1" when it knows of a rollback. guard()
// returns nil and an error reply to return, or Redis's epoch and sequence
// (decimal strings). A rollback reply carries "<e> <s> <known e> <known s>".
const luaGuard = `
local function guard()
  if redis.call('EXISTS', KEYS[1]) == 0 then return nil, redis.error_reply('` + noMarkerReply + `') end
  local st = redis.call('HMGET', KEYS[2], 'e', 's', 'rb')
  if st[3] then return nil, redis.error_reply('` + rollbackReply + ` ' .. st[3]) end
  local e, s = st[1] or '0', st[2] or '0'
  local en, ke = tonumber(e), tonumber(ARGV[1])
  if en < ke or (en == ke and (tonumber(s) < tonumber(ARGV[2]) or ARGV[3] == '1')) then
    local why = e .. ' ' .. s .. ' ' .. ARGV[1] .. ' ' .. ARGV[2]
    redis.call('HSET', KEYS[2], 'rb', why)
    return nil, redis.error_reply('` + rollbackReply + ` ' .. why)
  end
  return e, s
end
`

// luaPurge removes the expired reservations of bucket (b, z) at now (ms),
// at most 256 per call (the rest go on the next call). Amounts stay decimal
// strings: HINCRBY gets exact integers, never Lua doubles.
const luaPurge = `
local function purge(b, z, now)
  local ms = redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 256)
  if #ms == 0 then return end
  for i = 1, #ms do
    local v = string.match(ms[i], '/(%d+)$')
    if v and v ~= '0' then redis.call('HINCRBY', b, 'r', '-' .. v) end
  end
  redis.call('ZREM', z, unpack(ms))
end
`

// reserve: KEYS = marker, seq, then b, z per line.
// ARGV = known e, known s, known rollback, id, now ms, deadline ms, then
// limit, amount, expireAt per line.
// Returns {-1, e, s} when granted, {i, committed, reserved, e, s} (decimal
// strings) when line i (0-based) refused. Expired reservations are purged
// only when a line would refuse: they can only make a bucket look fuller,
// so a grant never needs the purge.
var reserveScript = redis.NewScript(luaGuard + luaPurge + `
local e, s = guard()
if not e then return s end
local id, now, dl = ARGV[4], ARGV[5], ARGV[6]
local n = (#KEYS - 2) / 2
for i = 0, n - 1 do
  local limit = tonumber(ARGV[7 + 3*i])
  if limit >= 0 then
    local b, z = KEYS[3 + 2*i], KEYS[4 + 2*i]
    local amt = tonumber(ARGV[8 + 3*i])
    local cr = redis.call('HMGET', b, 'c', 'r')
    if tonumber(cr[1] or '0') + tonumber(cr[2] or '0') + amt > limit then
      purge(b, z, now)
      cr = redis.call('HMGET', b, 'c', 'r')
      if tonumber(cr[1] or '0') + tonumber(cr[2] or '0') + amt > limit then
        return {i, cr[1] or '0', cr[2] or '0', e, s}
      end
    end
  end
end
for i = 0, n - 1 do
  local b, z = KEYS[3 + 2*i], KEYS[4 + 2*i]
  local amt, exp = ARGV[8 + 3*i], ARGV[9 + 3*i]
  redis.call('ZADD', z, dl, id .. '/' .. amt)
  if redis.call('HINCRBY', b, 'r', amt) == tonumber(amt) then
    redis.call('EXPIREAT', b, exp)
    redis.call('EXPIREAT', z, exp)
  end
end
return {-1, e, s}
`)

// finish (commit and release): KEYS = marker, seq, tombstone, then b, z
// per line. ARGV = known e, known s, known rollback, id, add (1 commit, 0
// release), then held, amount, expireAt per line (held "-1": not reserved
// there). The reservation is removed from each bucket that still holds it;
// on commit each amount is added to "c" and the commit sequence
// incremented. The tombstone ("c" after a commit, "1" after a release:
// the notes check at open tells them apart) makes a second call a no-op. id "" = nothing
// was reserved. Returns {applied (0 or 1), e, s}.
var finishScript = redis.NewScript(luaGuard + `
local e, s = guard()
if not e then return s end
local id, add = ARGV[4], ARGV[5] == '1'
if id ~= '' and redis.call('EXISTS', KEYS[3]) == 1 then return {0, e, s} end
for i = 0, (#KEYS - 3) / 2 - 1 do
  local b, z = KEYS[4 + 2*i], KEYS[5 + 2*i]
  local held, amt = ARGV[6 + 3*i], ARGV[7 + 3*i]
  if held ~= '-1' and redis.call('ZREM', z, id .. '/' .. held) == 1 and held ~= '0' then
    redis.call('HINCRBY', b, 'r', '-' .. held)
  end
  if add and amt ~= '0' then
    if redis.call('HINCRBY', b, 'c', amt) == tonumber(amt) then
      redis.call('EXPIREAT', b, ARGV[8 + 3*i])
    end
  end
end
if add then s = tostring(redis.call('HINCRBY', KEYS[2], 's', 1)) end
if id ~= '' then redis.call('SET', KEYS[3], add and 'c' or '1', 'PX', ` + strconv.FormatInt(tombstoneGrace.Milliseconds(), 10) + `) end
return {1, e, s}
`)

// balances: KEYS = marker, seq, then b, z per bucket; ARGV = known e, known
// s, known rollback, now ms. Returns committed, reserved per bucket
// (decimal strings), after purging the expired reservations, then e, s.
var balancesScript = redis.NewScript(luaGuard + luaPurge + `
local e, s = guard()
if not e then return s end
local now = ARGV[4]
local out = {}
for i = 0, (#KEYS - 2) / 2 - 1 do
  local b, z = KEYS[3 + 2*i], KEYS[4 + 2*i]
  purge(b, z, now)
  local cr = redis.call('HMGET', b, 'c', 'r')
  out[#out + 1] = cr[1] or '0'
  out[#out + 1] = cr[2] or '0'
end
out[#out + 1] = e
out[#out + 1] = s
return out
`)

// renew: KEYS = marker, seq, then z per reservation line; ARGV = known e,
// known s, known rollback, deadline ms, then the member ("<id>/<amount>")
// per z key. ZADD XX: a reservation that was finished or purged is not
// brought back. Returns {e, s}; with no z key it is the periodic check of
// the marker and the sequence (and ping's).
var renewScript = redis.NewScript(luaGuard + `
local e, s = guard()
if not e then return s end
for i = 3, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', ARGV[4], ARGV[i + 2])
end
return {e, s}
`)

// leaseEnd: KEYS = z; ARGV = now ms, need. Returns the deadline (ms) at
// which the unexpired reservations ending first hold need in total, or -1
// (they hold less, among the first 1024).
var leaseEndScript = redis.NewScript(`
local ms = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, 1024)
local need, freed = tonumber(ARGV[2]), 0
for i = 1, #ms, 2 do
  freed = freed + tonumber(string.match(ms[i], '/(%d+)$') or '0')
  if freed >= need then return ms[i + 1] end
end
return -1
`)

// initScript: KEYS = marker, seq; ARGV = marker text, epoch candidate (unix
// ms). Writes the marker when absent and then starts a new epoch (the
// candidate, or e+1 when that is not higher). Returns 1 when it wrote it.
var initScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 0 end
local e = tonumber(redis.call('HGET', KEYS[2], 'e') or '0')
local ne = ARGV[2]
if tonumber(ne) <= e then ne = tostring(e + 1) end
redis.call('HSET', KEYS[2], 'e', ne)
redis.call('HDEL', KEYS[2], 'rb')
return 1
`)

// acceptScript: KEYS = marker, seq; ARGV = epoch candidate (unix ms).
// Starts a new epoch over Redis's current state and clears "rb". Returns
// {old e, s, rb or "", new e}.
var acceptScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('` + noMarkerReply + `') end
local st = redis.call('HMGET', KEYS[2], 'e', 's', 'rb')
local e = tonumber(st[1] or '0')
local ne = ARGV[1]
if tonumber(ne) <= e then ne = tostring(e + 1) end
redis.call('HSET', KEYS[2], 'e', ne)
redis.call('HDEL', KEYS[2], 'rb')
return {st[1] or '0', st[2] or '0', st[3] or '', ne}
`)

// renewBatch is how many reservation lines one renew script carries.
const renewBatch = 512

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

// quietRedis silences go-redis's own logger, which prints every failed
// dial to stderr: the ledger's errors already say that Redis is down, once
// per call, in the caller's log format.
var quietRedis sync.Once

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// CheckRedis reports whether the Redis ledger at url can meter calls: nil
// when it answers and holds its marker; an error wrapping [ErrUnavailable]
// (and [ErrNoMarker] when the marker is missing) otherwise. It knows no
// replica's sequence: a rollback shows on the first call.
func CheckRedis(ctx context.Context, url string) error {
	c, addr, err := redisClient(url)
	if err != nil {
		return err
	}
	defer c.Close()
	s := &redisStore{c: c, addr: addr}
	n, err := c.Exists(ctx, markerKey).Result()
	if err != nil {
		return s.fail(ctx, "ping", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: redis %s: %w", ErrUnavailable, addr, ErrNoMarker)
	}
	return nil
}

// InitRedis creates the marker key of the Redis ledger at url (SET NX):
// the operator's explicit step (`flexway ledger init`) declaring this Redis
// the ledger, empty or not. Creating it starts a new epoch of the commit
// sequence, which replicas adopt: a Redis that lost its data and is
// initialised again is a new ledger, not a rollback. created is false when
// the marker already existed (nothing changes then). Errors: invalid URL,
// or unreachable Redis (wrapping [ErrUnavailable]).
func InitRedis(ctx context.Context, url string) (created bool, err error) {
	c, addr, err := redisClient(url)
	if err != nil {
		return false, err
	}
	defer c.Close()
	s := &redisStore{c: c, addr: addr}
	now := time.Now()
	n, err := initScript.Run(ctx, c, []string{markerKey, seqKey},
		"flexway ledger v1, created "+now.UTC().Format(time.RFC3339), unixMs(now)).Int64()
	if err != nil {
		return false, s.fail(ctx, "init", err)
	}
	return n == 1, nil
}

// RedisSequence is a Redis ledger's commit history as
// [AcceptRedisRollback] found it.
type RedisSequence struct {
	// Epoch is the epoch of the commit sequence (unix milliseconds of the
	// `ledger init` or `ledger accept-rollback` that started it; 0 for a
	// ledger made before epochs).
	Epoch int64
	// Seq is the number of commits applied in the epoch.
	Seq int64
	// RolledBack is "" when no replica had reported a rollback, else
	// what the first one to find it saw: "<epoch> <seq> <its epoch> <its
	// seq>" (Redis's, then the replica's).
	RolledBack string
}

// AcceptRedisRollback accepts the Redis ledger at url as it is now (the
// operator's step, `flexway ledger accept-rollback`, after a rollback was
// reported): it starts a new epoch of the commit sequence (unix
// milliseconds now, or one above the current epoch) and clears the
// rollback mark, so that every replica adopts Redis's state at its next
// call and meters again; the commits Redis lost stay lost, except those
// replicas journaled, which they replay. It returns the sequence found
// and the new epoch. Errors: invalid URL, unreachable Redis, or no marker
// (wrapping [ErrUnavailable], [ErrNoMarker]).
func AcceptRedisRollback(ctx context.Context, url string) (found RedisSequence, epoch int64, err error) {
	c, addr, err := redisClient(url)
	if err != nil {
		return found, 0, err
	}
	defer c.Close()
	s := &redisStore{c: c, addr: addr}
	res, err := acceptScript.Run(ctx, c, []string{markerKey, seqKey}, unixMs(time.Now())).StringSlice()
	if err == nil && len(res) != 4 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return found, 0, s.fail(ctx, "accept rollback", err)
	}
	found.Epoch, _ = strconv.ParseInt(res[0], 10, 64)
	found.Seq, _ = strconv.ParseInt(res[1], 10, 64)
	found.RolledBack = res[2]
	epoch, _ = strconv.ParseInt(res[3], 10, 64)
	return found, epoch, nil
}

func redisClient(raw string) (*redis.Client, string, error) {
	quietRedis.Do(func() { redis.SetLogger(discardLogger{}) })
	addr := redactURL(raw)
	o, err := redis.ParseURL(raw)
	if err != nil {
		msg := err.Error()
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			msg = ue.Err.Error() // url.Error's text repeats the URL, password included
		}
		msg = strings.ReplaceAll(msg, raw, addr)
		if u, err := url.Parse(raw); err == nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
		return nil, "", fmt.Errorf("budget: invalid redis URL %s: %s", addr, msg)
	}
	var q url.Values
	if u, err := url.Parse(raw); err == nil {
		q = u.Query()
	}
	has := q.Has
	if !has("dial_timeout") {
		o.DialTimeout = time.Second
	}
	if !has("read_timeout") {
		o.ReadTimeout = time.Second
	}
	if !has("write_timeout") {
		o.WriteTimeout = time.Second
	}
	if !has("max_retries") {
		o.MaxRetries = -1
	}
	if !has("pool_timeout") {
		o.PoolTimeout = time.Second
	}
	o.DialerRetries = 1
	o.ContextTimeoutEnabled = true
	if o.PoolSize == 0 {
		o.PoolSize = 64
	}
	return redis.NewClient(o), addr, nil
}

// redactURL returns raw with its password replaced by "xxxxx", or a
// placeholder when raw does not parse (it might still hold a password).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL not shown)"
	}
	return u.Redacted()
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

func (s *redisStore) reserve(ctx context.Context, id string, lines []line, now, deadline time.Time) (int, balance, error) {
	if s.local != nil && s.local.count() > 0 {
		// Usage this replica holds in its journal counts before it holds
		// more: nothing is reserved against totals that lack it.
		if err := s.replay(ctx); err != nil {
			return 0, balance{}, err
		}
	}
	keys := make([]string, 2, 2+2*len(lines))
	keys[0], keys[1] = markerKey, seqKey
	args := s.args(id, unixMs(now), unixMs(deadline))
	for _, l := range lines {
		keys = bucketKeys(keys, l.bucket)
		args = append(args, l.limit, l.amount, l.expireAt)
	}
	res, err := reserveScript.Run(ctx, s.c, keys, args...).Slice()
	if err != nil {
		return 0, balance{}, s.fail(ctx, "reserve", err)
	}
	if len(res) == 3 && s.observe(res[1], res[2]) == nil {
		if v, ok := res[0].(int64); ok && v == -1 {
			return -1, balance{}, nil
		}
	}
	if len(res) == 5 && s.observe(res[3], res[4]) == nil {
		i, ok := res[0].(int64)
		com, err1 := replyInt(res[1])
		rsv, err2 := replyInt(res[2])
		if ok && i >= 0 && int(i) < len(lines) && err1 == nil && err2 == nil {
			return int(i), balance{committed: com, reserved: rsv}, nil
		}
	}
	return 0, balance{}, s.fail(ctx, "reserve", fmt.Errorf("unexpected reply %v", res))
}

// finish runs the finish script once.
func (s *redisStore) finish(ctx context.Context, op string, id string, lines []line, add bool) error {
	keys := make([]string, 3, 3+2*len(lines))
	keys[0], keys[1], keys[2] = markerKey, seqKey, keyPrefix+"d:"+id
	flag := "0"
	if add {
		flag = "1"
	}
	args := s.args(id, flag)
	for _, l := range lines {
		keys = bucketKeys(keys, l.bucket)
		args = append(args, l.held, l.amount, l.expireAt)
	}
	res, err := finishScript.Run(ctx, s.c, keys, args...).Slice()
	if err == nil && (len(res) != 3 || s.observe(res[1], res[2]) != nil) {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return s.fail(ctx, op, err)
	}
	return nil
}

// commit implements Store. A commit Redis does not take (unreachable,
// without its marker, rolled back) goes to the journal when the store has
// one, and is replayed later: it returns nil then, the usage being durable
// on this machine. A commit without a reservation gets an id of its own
// there, so that its replay is recognised too.
//
// With local files, the note ctx carries ([WithNote]) of a commit that
// charges anything is first appended to the notes file under the commit's
// id (one is made for a commit without a reservation), so that a crash
// before the call's audit line is written leaves its note (see
// [RedisOptions.Notes]). A note that cannot be written does not fail the
// commit (the log says so, once per failure streak).
func (s *redisStore) commit(ctx context.Context, id string, lines []line, now time.Time) error {
	if s.local != nil {
		for _, l := range lines {
			if l.amount != 0 {
				if note := noteOf(ctx); note != nil {
					if id == "" {
						id = newJournalID()
					}
					if err := s.local.note(id, note); err != nil {
						s.noteFailed(err)
					} else {
						s.noteOK()
					}
				}
				break
			}
		}
	}
	err := s.finish(ctx, "commit", id, lines, true)
	if err == nil || s.local == nil {
		return err
	}
	if id == "" {
		id = newJournalID()
	}
	first, jerr := s.local.append(jcommit{ID: id, At: now.UnixMilli(), Lines: toJLines(lines)})
	if jerr != nil {
		return fmt.Errorf("%w; and the journal cannot take it: %v", err, jerr)
	}
	if first {
		s.log.Warn("budget ledger: a commit could not be applied in Redis; it and the next ones are journaled on this machine and replayed once Redis takes them (new calls are refused until then)",
			"journal", s.local.journalPath(), "error", err.Error())
	}
	return nil
}

// noteFailed logs the first failure to write a note or rotate the notes
// files since the last success.
func (s *redisStore) noteFailed(err error) {
	if s.noteErr.CompareAndSwap(false, true) {
		s.log.Warn("budget ledger: the audit notes of Redis commits cannot be written on this machine: a crash before a call's audit line is written leaves it without one", "notes", s.local.notesPath(), "error", err.Error())
	}
}

func (s *redisStore) noteOK() {
	if s.noteErr.Load() {
		s.noteErr.Store(false)
	}
}

// handNotes, at open, hands to notes those of the notes files whose
// commits Redis holds (tombstone "c") or the journal holds (it will be
// replayed), then removes the files and opens a new one.
func (s *redisStore) handNotes(ctx context.Context, notes func([][]byte) error) error {
	fail := func(err error) error {
		return fmt.Errorf("%w: redis ledger's notes files %s: %v", ErrUnavailable, s.local.notesPath(), err)
	}
	found, err := s.local.readNotes()
	if err != nil {
		return fail(err)
	}
	if len(found) > 0 && notes != nil {
		journaled := map[string]bool{}
		for _, r := range s.local.pending() {
			journaled[r.ID] = true
		}
		keep := make([]bool, len(found))
		var ask []int // indexes of found only Redis can tell about
		for i, n := range found {
			if journaled[n.id] {
				keep[i] = true
			} else {
				ask = append(ask, i)
			}
		}
		if len(ask) > 0 {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			pipe := s.c.Pipeline()
			gets := make([]*redis.StringCmd, len(ask))
			for j, i := range ask {
				gets[j] = pipe.Get(cctx, keyPrefix+"d:"+found[i].id)
			}
			_, perr := pipe.Exec(cctx)
			cancel()
			if perr != nil && !errors.Is(perr, redis.Nil) {
				s.log.Warn("budget ledger: Redis cannot be asked which of this replica's last commits before it stopped it holds: their audit lines, if they were not written, are not rebuilt", "redis", s.addr, "notes", len(ask), "error", s.fail(ctx, "notes check", perr).Error())
				ask = nil
			}
			for j, i := range ask {
				if v, err := gets[j].Result(); err == nil && v == "c" {
					keep[i] = true
				}
			}
		}
		var kept [][]byte
		for i, n := range found {
			if keep[i] {
				kept = append(kept, n.note)
			}
		}
		if len(kept) > 0 {
			if err := notes(kept); err != nil {
				return fail(fmt.Errorf("the notes of the last commits could not be kept (the files stay): %w", err))
			}
		}
	}
	if err := s.local.openNotes(); err != nil {
		return fail(err)
	}
	return nil
}

// replay applies the journal's commits in order, stopping at the first
// Redis refuses, and removes those applied from the journal. A commit
// applied before (its reply lost, or a replay cut by a crash) is
// recognised by its tombstone and not counted again, for tombstoneGrace.
func (s *redisStore) replay(ctx context.Context) error {
	s.replayMu.Lock()
	defer s.replayMu.Unlock()
	recs := s.local.pending()
	applied := 0
	var err error
	for _, r := range recs {
		if err = s.finish(ctx, "replay", r.ID, r.lines(), true); err != nil {
			break
		}
		applied++
	}
	if applied > 0 {
		if derr := s.local.drop(applied); derr != nil && err == nil {
			err = fmt.Errorf("%w: the journal %s cannot be rewritten: %v", ErrUnavailable, s.local.journalPath(), derr)
		}
		if err == nil {
			s.log.Warn("budget ledger: the journaled commits are applied in Redis", "commits", applied)
		}
	}
	return err
}

func (s *redisStore) release(ctx context.Context, id string, lines []line, _ time.Time) error {
	return s.finish(ctx, "release", id, lines, false)
}

func (s *redisStore) balances(ctx context.Context, buckets []string, now time.Time) ([]balance, error) {
	keys := make([]string, 2, 2+2*len(buckets))
	keys[0], keys[1] = markerKey, seqKey
	for _, b := range buckets {
		keys = bucketKeys(keys, b)
	}
	res, err := balancesScript.Run(ctx, s.c, keys, s.args(unixMs(now))...).Slice()
	if err != nil {
		return nil, s.fail(ctx, "balances", err)
	}
	if len(res) != 2*len(buckets)+2 || s.observe(res[len(res)-2], res[len(res)-1]) != nil {
		return nil, s.fail(ctx, "balances", fmt.Errorf("unexpected reply %v", res))
	}
	out := make([]balance, len(buckets))
	for i := range out {
		com, err1 := replyInt(res[2*i])
		rsv, err2 := replyInt(res[2*i+1])
		if err1 != nil || err2 != nil {
			return nil, s.fail(ctx, "balances", fmt.Errorf("unexpected reply %v", res))
		}
		out[i] = balance{committed: com, reserved: rsv}
	}
	return out, nil
}

// renew implements Store: the ledger's leases and those of the journaled
// commits (whose holds stay until they are replayed), in batches; with
// none, one script checks the marker and the sequence.
func (s *redisStore) renew(ctx context.Context, leases []lease, _, deadline time.Time) error {
	if s.local != nil {
		for _, r := range s.local.pending() {
			l := lease{id: r.ID}
			for _, ln := range r.Lines {
				if ln.Held >= 0 {
					l.lines = append(l.lines, line{bucket: ln.Bucket, amount: ln.Held})
				}
			}
			leases = append(leases, l)
		}
	}
	keys := []string{markerKey, seqKey}
	args := s.args(unixMs(deadline))
	flush := func() error {
		res, err := renewScript.Run(ctx, s.c, keys, args...).Slice()
		if err == nil && (len(res) != 2 || s.observe(res[0], res[1]) != nil) {
			err = fmt.Errorf("unexpected reply %v", res)
		}
		if err != nil {
			return s.fail(ctx, "renew", err)
		}
		keys, args = keys[:2], s.args(unixMs(deadline))
		return nil
	}
	for _, l := range leases {
		for _, ln := range l.lines {
			keys = append(keys, keyPrefix+"z:"+ln.bucket)
			args = append(args, l.id+"/"+strconv.FormatInt(ln.amount, 10))
		}
		if len(keys) > renewBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if len(keys) > 2 || len(leases) == 0 {
		return flush()
	}
	return nil
}

func (s *redisStore) leaseEnd(ctx context.Context, bucket string, need int64, now time.Time) (time.Time, error) {
	v, err := leaseEndScript.Run(ctx, s.c, []string{keyPrefix + "z:" + bucket}, unixMs(now), need).Result()
	if err != nil {
		return time.Time{}, s.fail(ctx, "lease end", err)
	}
	ms, err := replyInt(v)
	if err != nil {
		return time.Time{}, s.fail(ctx, "lease end", fmt.Errorf("unexpected reply %v", v))
	}
	if ms < 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(ms), nil
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

// writable implements Store: Redis's failures show on each call, but a
// rollback this replica knows of refuses even calls that reserve nothing.
func (s *redisStore) writable() error {
	s.mu.Lock()
	rb := s.known.RolledBack
	s.mu.Unlock()
	if rb != "" {
		return s.rolledBack(rb)
	}
	return nil
}

// ping implements Store: Redis answers, holds the marker, and has not gone
// back below the sequence this replica knows.
func (s *redisStore) ping(ctx context.Context) error {
	res, err := renewScript.Run(ctx, s.c, []string{markerKey, seqKey}, s.args(0)...).Slice()
	if err == nil && (len(res) != 2 || s.observe(res[0], res[1]) != nil) {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return s.fail(ctx, "ping", err)
	}
	return nil
}
