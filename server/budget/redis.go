package budget

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis key layout. Every key starts with keyPrefix:
//
//	flexway:ledger:marker     the marker; absent = new or emptied Redis
//	flexway:ledger:b:<bucket> hash: "c" → committed total, "r" → reserved total
//	flexway:ledger:z:<bucket> sorted set: "<reservation id>/<amount>" → deadline (unix ms)
//	flexway:ledger:d:<id>     a finished reservation (tombstone), for 1 minute
//
// <bucket> is "t:<tenant>:<cap>:<period>" or "a:<tenant>:<agent>:<cap>:<period>".
// The keys of a day bucket expire 3 days after the day began, those of a
// month bucket 70 days after the month began (EXPIREAT, set when the key is
// created).
//
// All keys of one operation are passed in KEYS, but they span several
// tenants' buckets and the marker: the store runs on a single Redis (or a
// primary with replicas), not on Redis Cluster.
const (
	keyPrefix = "flexway:ledger:"
	markerKey = keyPrefix + "marker"
	// tombstoneGrace is how long a finished reservation is remembered (by
	// the Redis server's clock), so that a retried commit or release (the
	// reply was lost) is not applied twice.
	tombstoneGrace = time.Minute
	noMarkerReply  = "FLEXWAY_NO_MARKER"
)

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

// reserve: KEYS = marker, then b, z per line.
// ARGV = id, now ms, deadline ms, then limit, amount, expireAt per line.
// Returns {-1} when granted, {i, committed, reserved} (decimal strings) when
// line i (0-based) refused. Expired reservations are purged only when a
// line would refuse: they can only make a bucket look fuller, so a grant
// never needs the purge.
var reserveScript = redis.NewScript(luaPurge + `
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('` + noMarkerReply + `') end
local id, now, dl = ARGV[1], ARGV[2], ARGV[3]
local n = (#KEYS - 1) / 2
for i = 0, n - 1 do
  local limit = tonumber(ARGV[4 + 3*i])
  if limit >= 0 then
    local b, z = KEYS[2 + 2*i], KEYS[3 + 2*i]
    local amt = tonumber(ARGV[5 + 3*i])
    local cr = redis.call('HMGET', b, 'c', 'r')
    if tonumber(cr[1] or '0') + tonumber(cr[2] or '0') + amt > limit then
      purge(b, z, now)
      cr = redis.call('HMGET', b, 'c', 'r')
      if tonumber(cr[1] or '0') + tonumber(cr[2] or '0') + amt > limit then
        return {i, cr[1] or '0', cr[2] or '0'}
      end
    end
  end
end
for i = 0, n - 1 do
  local b, z = KEYS[2 + 2*i], KEYS[3 + 2*i]
  local amt, exp = ARGV[5 + 3*i], ARGV[6 + 3*i]
  redis.call('ZADD', z, dl, id .. '/' .. amt)
  if redis.call('HINCRBY', b, 'r', amt) == tonumber(amt) then
    redis.call('EXPIREAT', b, exp)
    redis.call('EXPIREAT', z, exp)
  end
end
return {-1}
`)

// finish (commit and release): KEYS = marker, tombstone, then b, z per line.
// ARGV = id, add (1 commit, 0 release), then held, amount, expireAt per
// line (held "-1": not reserved there). The reservation is removed from each
// bucket that still holds it; on commit each amount is added to "c". The
// tombstone makes a second call a no-op. id "" = nothing was reserved.
var finishScript = redis.NewScript(`
local m = redis.call('MGET', KEYS[1], KEYS[2])
if not m[1] then return redis.error_reply('` + noMarkerReply + `') end
local id, add = ARGV[1], ARGV[2] == '1'
if id ~= '' and m[2] then return 0 end
for i = 0, (#KEYS - 2) / 2 - 1 do
  local b, z = KEYS[3 + 2*i], KEYS[4 + 2*i]
  local held, amt = ARGV[3 + 3*i], ARGV[4 + 3*i]
  if held ~= '-1' and redis.call('ZREM', z, id .. '/' .. held) == 1 and held ~= '0' then
    redis.call('HINCRBY', b, 'r', '-' .. held)
  end
  if add and amt ~= '0' then
    if redis.call('HINCRBY', b, 'c', amt) == tonumber(amt) then
      redis.call('EXPIREAT', b, ARGV[5 + 3*i])
    end
  end
end
if id ~= '' then redis.call('SET', KEYS[2], '1', 'PX', ` + strconv.FormatInt(tombstoneGrace.Milliseconds(), 10) + `) end
return 1
`)

// balances: KEYS = marker, then b, z per bucket; ARGV = now ms.
// Returns committed, reserved per bucket (decimal strings), after purging
// the expired reservations.
var balancesScript = redis.NewScript(luaPurge + `
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('` + noMarkerReply + `') end
local now = ARGV[1]
local out = {}
for i = 0, (#KEYS - 1) / 2 - 1 do
  local b, z = KEYS[2 + 2*i], KEYS[3 + 2*i]
  purge(b, z, now)
  local cr = redis.call('HMGET', b, 'c', 'r')
  out[#out + 1] = cr[1] or '0'
  out[#out + 1] = cr[2] or '0'
end
return out
`)

// renew: KEYS = marker, then z per reservation line; ARGV = deadline ms,
// then the member ("<id>/<amount>") per key. ZADD XX: a reservation that
// was finished or purged is not brought back.
var renewScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('` + noMarkerReply + `') end
for i = 2, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', ARGV[1], ARGV[i])
end
return 1
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

// renewBatch is how many reservation lines one renew script carries.
const renewBatch = 512

// redisStore is the Redis-backed Store. Amounts are exact int64 in Redis
// (INCRBY, HINCRBY); the limit comparison inside the reserve script uses
// Lua numbers (doubles), exact up to 2^53 (9e15 tokens, or about 9 million
// euros per month in nano-euros).
type redisStore struct {
	c    *redis.Client
	addr string // the URL with its password redacted, for messages
}

// OpenRedis returns the Redis ledger at url ("redis://[user:password@]
// host:port/db", or "rediss://" for TLS; go-redis URL options such as
// ?pool_size=128 are honoured). It connects lazily, so that a gateway starts
// while Redis is down and meters calls as soon as it is back; see
// [CheckRedis] to report its state at start. Unless the URL sets them,
// timeouts are 1s (dial, read, write) and failed commands are not retried:
// a Redis that is down makes calls fail fast rather than pile up.
//
// Errors: an invalid URL is reported as such (without the URL's password).
// Every later call wraps [ErrUnavailable] while Redis is unreachable, and
// [ErrNoMarker] too while the marker is missing (see [InitRedis]).
//
// Redis must run with persistence (AOF or RDB): a Redis that restarts empty
// is detected by the missing marker and refuses metered calls.
func OpenRedis(ctx context.Context, url string) (Store, error) {
	c, addr, err := redisClient(url)
	if err != nil {
		return nil, err
	}
	return &redisStore{c: c, addr: addr}, nil
}

// quietRedis silences go-redis's own logger, which prints every failed
// dial to stderr: the ledger's errors already say that Redis is down, once
// per call, in the caller's log format.
var quietRedis sync.Once

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// CheckRedis reports whether the Redis ledger at url can meter calls: nil
// when it answers and holds its marker; an error wrapping [ErrUnavailable]
// (and [ErrNoMarker] when the marker is missing) otherwise.
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
// the ledger, empty or not. created is false when the marker already
// existed. Errors: invalid URL, or unreachable Redis (wrapping
// [ErrUnavailable]).
func InitRedis(ctx context.Context, url string) (created bool, err error) {
	c, addr, err := redisClient(url)
	if err != nil {
		return false, err
	}
	defer c.Close()
	s := &redisStore{c: c, addr: addr}
	created, err = c.SetNX(ctx, markerKey, "flexway ledger v1, created "+time.Now().UTC().Format(time.RFC3339), 0).Result()
	if err != nil {
		return false, s.fail(ctx, "init", err)
	}
	return created, nil
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

// fail turns a Redis error into one wrapping ErrUnavailable.
func (s *redisStore) fail(ctx context.Context, op string, err error) error {
	if strings.Contains(err.Error(), noMarkerReply) {
		return fmt.Errorf("%w: redis %s: %w", ErrUnavailable, s.addr, ErrNoMarker)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: redis %s: %s: %w", ErrUnavailable, s.addr, op, ctx.Err())
	}
	return fmt.Errorf("%w: redis %s unreachable or failing (%s): %v", ErrUnavailable, s.addr, op, err)
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

func (s *redisStore) reserve(ctx context.Context, id string, lines []line, now, deadline time.Time) (int, balance, error) {
	keys := make([]string, 1, 1+2*len(lines))
	keys[0] = markerKey
	args := make([]any, 3, 3+3*len(lines))
	args[0], args[1], args[2] = id, unixMs(now), unixMs(deadline)
	for _, l := range lines {
		keys = bucketKeys(keys, l.bucket)
		args = append(args, l.limit, l.amount, l.expireAt)
	}
	res, err := reserveScript.Run(ctx, s.c, keys, args...).Slice()
	if err != nil {
		return 0, balance{}, s.fail(ctx, "reserve", err)
	}
	if len(res) == 1 {
		if v, ok := res[0].(int64); ok && v == -1 {
			return -1, balance{}, nil
		}
	}
	if len(res) == 3 {
		i, ok := res[0].(int64)
		com, err1 := replyInt(res[1])
		rsv, err2 := replyInt(res[2])
		if ok && i >= 0 && int(i) < len(lines) && err1 == nil && err2 == nil {
			return int(i), balance{committed: com, reserved: rsv}, nil
		}
	}
	return 0, balance{}, s.fail(ctx, "reserve", fmt.Errorf("unexpected reply %v", res))
}

func (s *redisStore) finish(ctx context.Context, op string, id string, lines []line, add bool) error {
	keys := make([]string, 2, 2+2*len(lines))
	keys[0], keys[1] = markerKey, keyPrefix+"d:"+id
	args := make([]any, 2, 2+3*len(lines))
	args[0], args[1] = id, "0"
	if add {
		args[1] = "1"
	}
	for _, l := range lines {
		keys = bucketKeys(keys, l.bucket)
		args = append(args, l.held, l.amount, l.expireAt)
	}
	if err := finishScript.Run(ctx, s.c, keys, args...).Err(); err != nil {
		return s.fail(ctx, op, err)
	}
	return nil
}

func (s *redisStore) commit(ctx context.Context, id string, lines []line, _ time.Time) error {
	return s.finish(ctx, "commit", id, lines, true)
}

func (s *redisStore) release(ctx context.Context, id string, lines []line, _ time.Time) error {
	return s.finish(ctx, "release", id, lines, false)
}

func (s *redisStore) balances(ctx context.Context, buckets []string, now time.Time) ([]balance, error) {
	keys := make([]string, 1, 1+2*len(buckets))
	keys[0] = markerKey
	for _, b := range buckets {
		keys = bucketKeys(keys, b)
	}
	res, err := balancesScript.Run(ctx, s.c, keys, unixMs(now)).Slice()
	if err != nil {
		return nil, s.fail(ctx, "balances", err)
	}
	if len(res) != 2*len(buckets) {
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

func (s *redisStore) renew(ctx context.Context, leases []lease, _, deadline time.Time) error {
	keys := []string{markerKey}
	args := []any{unixMs(deadline)}
	flush := func() error {
		if err := renewScript.Run(ctx, s.c, keys, args...).Err(); err != nil {
			return s.fail(ctx, "renew", err)
		}
		keys, args = keys[:1], args[:1]
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
	if len(keys) > 1 {
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

// Close closes the Redis client. Idempotent.
func (s *redisStore) Close() error {
	if err := s.c.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return err
	}
	return nil
}

// ping implements Store: Redis answers and holds the marker.
// writable implements Store: Redis's failures show on each call.
func (s *redisStore) writable() error { return nil }

func (s *redisStore) ping(ctx context.Context) error {
	n, err := s.c.Exists(ctx, markerKey).Result()
	if err != nil {
		return s.fail(ctx, "ping", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: redis %s: %w", ErrUnavailable, s.addr, ErrNoMarker)
	}
	return nil
}
