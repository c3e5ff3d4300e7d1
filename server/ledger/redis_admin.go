package ledger

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

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
