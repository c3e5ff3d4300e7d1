package ledger

import (
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis key layout. Every key starts with keyPrefix:
//
//	flexway:ledger:marker     the marker; absent = new or emptied Redis
//	flexway:ledger:seq        hash: "e" → epoch, "s" → commit sequence, "rb" → a detected rollback
//	flexway:ledger:b:<bucket> hash: "c" → committed total, "r" → reserved total
//	                          (a per-minute window: "r" → reserved total, "s" → the live
//	                          slots' total, "lo" → the oldest second not pruned, and
//	                          "<unix second>" → what was committed in that second's slot)
//	flexway:ledger:z:<bucket> sorted set: "<reservation id>/<amount>" → deadline (unix ms)
//	flexway:ledger:d:<id>     a finished reservation (tombstone), for tombstoneGrace: "c" committed, "1" released
//
// <bucket> is "t:<tenant>:<cap>:<period>" or "a:<tenant>:<agent>:<cap>:<period>",
// a policy's "p:<policy>:..." (see policyBucketID), and for a per-minute
// window the same without ":<period>".
// The keys of a day bucket expire 3 days after the day began, those of a
// month bucket 70 days after the month began, by the ledger's clock (an
// EXPIRE of the life left, set when the key is created: Redis's own clock
// may be off the gateway's); those of a window windowLife (2 minutes) after their last
// reservation or commit (PEXPIRE, by the Redis server's clock). A window's
// slots are pruned, in the scripts that read it, by the ledger's clock.
// Both keys of a window get the same TTL whenever one is set, so that no
// hold outlives its deadline set. A call that holds a window for longer
// than windowLife while nothing else uses that window loses its hold there
// (its slot aged out long before: only the hold was still counted).
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

// luaWindow reads a per-minute window (hash b) at second nows: it prunes
// the slots that aged out (fields of seconds below nows - 60: from "lo"
// up, or all of them after a long idle time), keeping "s" their live
// total, and returns "s" and "r" (decimal strings), and true when the
// window has no "lo" yet (it is new). A window that does not exist is not
// created. wttl is the windows' TTL (ms).
var luaWindow = `
local wttl = ` + strconv.FormatInt(windowLife.Milliseconds(), 10) + `
local function wread(b, nows)
  local st = redis.call('HMGET', b, 'lo', 's', 'r')
  local lo, cut = tonumber(st[1]), nows - 60
  if not lo then return '0', st[3] or '0', true end
  if lo >= cut then return st[2] or '0', st[3] or '0' end
  local dead = {}
  if cut - lo > 61 then
    local all = redis.call('HGETALL', b)
    for i = 1, #all, 2 do
      local sec = tonumber(all[i])
      if sec and sec < cut then dead[#dead + 1] = all[i] end
    end
  else
    for t = lo, cut - 1 do dead[#dead + 1] = string.format('%d', t) end
  end
  local vs, gone = {}, {}
  if #dead > 0 then vs = redis.call('HMGET', b, unpack(dead)) end
  for i = 1, #vs do
    if vs[i] then
      gone[#gone + 1] = dead[i]
      if vs[i] ~= '0' then redis.call('HINCRBY', b, 's', '-' .. vs[i]) end
    end
  end
  if #gone > 0 then redis.call('HDEL', b, unpack(gone)) end
  redis.call('HSET', b, 'lo', string.format('%d', cut))
  return redis.call('HGET', b, 's') or '0', st[3] or '0'
end
`

// reserve: KEYS = marker, seq, then b, z per line.
// ARGV = known e, known s, known rollback, id, now ms, deadline ms, then
// limit, amount, ttl (seconds: the bucket's life left), slot per line (slot "0": a period's bucket;
// else a per-minute window, the second of the reservation).
// Returns {-1, e, s, used...} when granted, {i, committed, reserved, e, s,
// used...} (decimal strings) when line i (0-based) refused, where used are
// the window lines' committed+reserved before this reservation, in line
// order (integers). Expired reservations are purged only when a line would
// refuse: they can only make a bucket look fuller, so a grant never needs
// the purge.
var reserveScript = redis.NewScript(luaGuard + luaPurge + luaWindow + `
local e, s = guard()
if not e then return s end
local id, now, dl = ARGV[4], ARGV[5], ARGV[6]
local nows = math.floor(tonumber(now) / 1000)
local n = (#KEYS - 2) / 2
local refused, rc, rr = -1, '0', '0'
local used, fresh = {}, {}
for i = 0, n - 1 do
  local b, z = KEYS[3 + 2*i], KEYS[4 + 2*i]
  local limit, amt = tonumber(ARGV[7 + 4*i]), tonumber(ARGV[8 + 4*i])
  local win = ARGV[10 + 4*i] ~= '0'
  local c, r
  if win then
    c, r, fresh[i] = wread(b, nows)
  else
    local cr = redis.call('HMGET', b, 'c', 'r')
    c, r = cr[1] or '0', cr[2] or '0'
  end
  if refused < 0 and limit >= 0 and tonumber(c) + tonumber(r) + amt > limit then
    purge(b, z, now)
    r = redis.call('HGET', b, 'r') or '0'
    if tonumber(c) + tonumber(r) + amt > limit then refused, rc, rr = i, c, r end
  end
  if win then used[#used + 1] = tonumber(c) + tonumber(r) end
end
local out
if refused >= 0 then
  out = {refused, rc, rr, e, s}
else
  for i = 0, n - 1 do
    local b, z = KEYS[3 + 2*i], KEYS[4 + 2*i]
    local amt, exp, slot = ARGV[8 + 4*i], ARGV[9 + 4*i], ARGV[10 + 4*i]
    redis.call('ZADD', z, dl, id .. '/' .. amt)
    if slot ~= '0' then
      redis.call('HINCRBY', b, 'r', amt)
      if fresh[i] then redis.call('HSET', b, 'lo', string.format('%d', nows - 60)) end
      redis.call('PEXPIRE', b, wttl)
      redis.call('PEXPIRE', z, wttl)
    elseif redis.call('HINCRBY', b, 'r', amt) == tonumber(amt) then
      redis.call('EXPIRE', b, exp)
      redis.call('EXPIRE', z, exp)
    end
  end
  out = {-1, e, s}
end
for i = 1, #used do out[#out + 1] = used[i] end
return out
`)

// Saturation bounds of the finish script, in the unit of the bucket
// (tokens, requests, nano-euros): luaSlotMax (2^46) for one second's slot
// of a per-minute window, so that the window's running sum of 61 slots
// stays exact in Lua's doubles (below 2^53); luaCommittedMax (9·10^18,
// under math.MaxInt64) for a period's committed total. An upstream that
// reports an absurd usage saturates a bucket (its tenant is refused until
// the bucket ends) instead of overflowing HINCRBY, which would abort the
// script half applied.
const (
	luaSlotMax      = "70368744177664"
	luaCommittedMax = "9000000000000000000"
)

// finish (commit and release): KEYS = marker, seq, tombstone, then b, z
// per line. ARGV = known e, known s, known rollback, id, add (1 commit, 0
// release), then held, amount, ttl (seconds), slot per line (held "-1": not
// reserved there; slot "0": a period's bucket, else a window's line, whose
// amount goes to the field of its slot when the slot was not pruned yet,
// or nowhere: it aged out). The reservation is removed from each bucket that still holds it;
// on commit each amount is added to "c" and the commit sequence
// incremented. The tombstone ("c" after a commit, "1" after a release:
// the notes check at open tells them apart) makes a second call a no-op. id "" = nothing
// was reserved. Returns {applied (0 or 1), e, s}.
var finishScript = redis.NewScript(luaGuard + luaWindow + `
local e, s = guard()
if not e then return s end
local id, add = ARGV[4], ARGV[5] == '1'
if id ~= '' and redis.call('EXISTS', KEYS[3]) == 1 then return {0, e, s} end
for i = 0, (#KEYS - 3) / 2 - 1 do
  local b, z = KEYS[4 + 2*i], KEYS[5 + 2*i]
  local held, amt, slot = ARGV[6 + 4*i], ARGV[7 + 4*i], ARGV[9 + 4*i]
  if held ~= '-1' and redis.call('ZREM', z, id .. '/' .. held) == 1 and held ~= '0' then
    redis.call('HINCRBY', b, 'r', '-' .. held)
  end
  if add and amt ~= '0' then
    if slot ~= '0' then
      local lo = tonumber(redis.call('HGET', b, 'lo'))
      if lo and tonumber(slot) >= lo then
        -- A slot holds at most slotMax, so that "s", the sum of 61
        -- slots, stays exact (below 2^53, where Lua's doubles are) and
        -- an absurd usage never overflows HINCRBY: it saturates.
        local cur = tonumber(redis.call('HGET', b, slot) or '0')
        local d = math.min(cur + tonumber(amt), ` + luaSlotMax + `) - cur
        if d > 0 then
          d = string.format('%d', d)
          redis.call('HINCRBY', b, slot, d)
          redis.call('HINCRBY', b, 's', d)
        end
        -- b and z always expire together: a z gone before b would leave
        -- the holds it listed in "r" for good.
        redis.call('PEXPIRE', b, wttl)
        redis.call('PEXPIRE', z, wttl)
      end
    else
      -- A period's total saturates at committedMax rather than overflow
      -- HINCRBY (which would abort the script half applied).
      local cur = tonumber(redis.call('HGET', b, 'c') or '0')
      if cur + tonumber(amt) > ` + luaCommittedMax + ` then
        redis.call('HSET', b, 'c', '` + luaCommittedMax + `')
      else
        redis.call('HINCRBY', b, 'c', amt)
      end
      if cur == 0 then redis.call('EXPIRE', b, ARGV[8 + 4*i]) end
    end
  end
end
if add then s = tostring(redis.call('HINCRBY', KEYS[2], 's', 1)) end
if id ~= '' then redis.call('SET', KEYS[3], add and 'c' or '1', 'PX', ` + strconv.FormatInt(tombstoneGrace.Milliseconds(), 10) + `) end
return {1, e, s}
`)

// balances: KEYS = marker, seq, then b, z per bucket; ARGV = known e, known
// s, known rollback, now ms, then "1" per bucket that is a per-minute
// window, "0" per other. Returns committed (a window: its live slots'
// total), reserved per bucket (decimal strings), after purging the expired
// reservations, then e, s.
var balancesScript = redis.NewScript(luaGuard + luaPurge + luaWindow + `
local e, s = guard()
if not e then return s end
local now = ARGV[4]
local nows = math.floor(tonumber(now) / 1000)
local out = {}
for i = 0, (#KEYS - 2) / 2 - 1 do
  local b, z = KEYS[3 + 2*i], KEYS[4 + 2*i]
  purge(b, z, now)
  if ARGV[5 + i] == '1' then
    local c, r = wread(b, nows)
    out[#out + 1] = c
    out[#out + 1] = r
  else
    local cr = redis.call('HMGET', b, 'c', 'r')
    out[#out + 1] = cr[1] or '0'
    out[#out + 1] = cr[2] or '0'
  end
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

// windowFree: KEYS = b, z of a per-minute window; ARGV = now ms, need, the
// lease TTL ms. Returns the time (ms) at which the window's live slots (a
// slot of second t frees at t+61 s) and unexpired reservations (the first
// 1024 to end; each at the latest of its deadline d and the end of its
// commit's slot, floor((d - ttl)/1000) + 61 s) freeing first hold need in
// total, or -1 (they hold less).
var windowFreeScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local cut = math.floor(now / 1000) - 60
local ev = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local sec = tonumber(all[i])
  if sec and sec >= cut then ev[#ev + 1] = {(sec + 61) * 1000, tonumber(all[i + 1])} end
end
local ms = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, 1024)
local ttl = tonumber(ARGV[3])
for i = 1, #ms, 2 do
  local d = tonumber(ms[i + 1])
  ev[#ev + 1] = {math.max(d, (math.floor((d - ttl) / 1000) + 61) * 1000), tonumber(string.match(ms[i], '/(%d+)$') or '0')}
end
table.sort(ev, function(x, y) return x[1] < y[1] end)
local need, freed = tonumber(ARGV[2]), 0
for i = 1, #ev do
  freed = freed + ev[i][2]
  if freed >= need then return ev[i][1] end
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
