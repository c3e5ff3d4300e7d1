package ledger

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

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
	nwin := 0
	for _, l := range lines {
		keys = bucketKeys(keys, l.bucket)
		args = append(args, l.limit, l.amount, ttlAt(l.expireAt, now), l.slot)
		if l.slot != 0 {
			nwin++
		}
	}
	res, err := reserveScript.Run(ctx, s.c, keys, args...).Slice()
	if err != nil {
		return 0, balance{}, s.fail(ctx, "reserve", err)
	}
	if len(res) == 3+nwin && s.observe(res[1], res[2]) == nil && s.windowUsed(lines, res[3:]) {
		if v, ok := res[0].(int64); ok && v == -1 {
			return -1, balance{}, nil
		}
	}
	if len(res) == 5+nwin && s.observe(res[3], res[4]) == nil && s.windowUsed(lines, res[5:]) {
		i, ok := res[0].(int64)
		com, err1 := replyInt(res[1])
		rsv, err2 := replyInt(res[2])
		if ok && i >= 0 && int(i) < len(lines) && err1 == nil && err2 == nil {
			return int(i), balance{committed: com, reserved: rsv}, nil
		}
	}
	return 0, balance{}, s.fail(ctx, "reserve", fmt.Errorf("unexpected reply %v", res))
}

// windowUsed sets the used field of the window lines from the reserve
// script's reply (one integer each, in order); false when one is not.
func (s *redisStore) windowUsed(lines []line, used []any) bool {
	j := 0
	for i := range lines {
		if lines[i].slot == 0 {
			continue
		}
		v, ok := used[j].(int64)
		if !ok {
			return false
		}
		lines[i].used = v
		j++
	}
	return true
}

// finish runs the finish script once.
func (s *redisStore) finish(ctx context.Context, op string, id string, lines []line, add bool, now time.Time) error {
	keys := make([]string, 3, 3+2*len(lines))
	keys[0], keys[1], keys[2] = markerKey, seqKey, keyPrefix+"d:"+id
	flag := "0"
	if add {
		flag = "1"
	}
	args := s.args(id, flag)
	for _, l := range lines {
		keys = bucketKeys(keys, l.bucket)
		args = append(args, l.held, l.amount, ttlAt(l.expireAt, now), l.slot)
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
	err := s.finish(ctx, "commit", id, lines, true, now)
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
		// the keys' lives as they were at the commit
		if err = s.finish(ctx, "replay", r.ID, r.lines(), true, time.UnixMilli(r.At)); err != nil {
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

func (s *redisStore) release(ctx context.Context, id string, lines []line, now time.Time) error {
	return s.finish(ctx, "release", id, lines, false, now)
}

// ttlAt is the seconds from now (the ledger's clock) to expireAt (unix
// seconds), at least 1: a period bucket's life left, which the scripts
// set with EXPIRE. Relative, so that a Redis whose clock is days off the
// gateway's (or a test's clock) never expires a live bucket at once, as
// an absolute EXPIREAT in its past would.
func ttlAt(expireAt int64, now time.Time) int64 {
	return max(expireAt-now.Unix(), 1)
}

func (s *redisStore) balances(ctx context.Context, buckets []string, now time.Time) ([]balance, error) {
	keys := make([]string, 2, 2+2*len(buckets))
	keys[0], keys[1] = markerKey, seqKey
	args := s.args(unixMs(now))
	for _, b := range buckets {
		keys = bucketKeys(keys, b)
		if isWindowBucket(b) {
			args = append(args, "1")
		} else {
			args = append(args, "0")
		}
	}
	res, err := balancesScript.Run(ctx, s.c, keys, args...).Slice()
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

// windowFree implements Store, in one script (a refusal's path only).
func (s *redisStore) windowFree(ctx context.Context, bucket string, need int64, now time.Time, ttl time.Duration) (time.Time, error) {
	v, err := windowFreeScript.Run(ctx, s.c, bucketKeys(nil, bucket), unixMs(now), need, ttl.Milliseconds()).Result()
	if err != nil {
		return time.Time{}, s.fail(ctx, "window", err)
	}
	ms, err := replyInt(v)
	if err != nil {
		return time.Time{}, s.fail(ctx, "window", fmt.Errorf("unexpected reply %v", v))
	}
	if ms < 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(ms), nil
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
