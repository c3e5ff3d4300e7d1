package ledger

import (
	"context"
	"time"

	"github.com/flexway/flexway/server/money"
)

// Store keeps committed totals and reservations per bucket for a [Ledger].
// Get one from [OpenEmbedded] or [OpenRedis]; its methods other than Close
// are internal to this package (the ledger speaks to it in buckets, not in
// accounts and caps), so Store cannot be implemented elsewhere.
//
// A Store is used by one Ledger, which closes it in [Ledger.Close].
type Store interface {
	// Close releases the store: flushes and closes the embedded file, or
	// closes the Redis client. Reservations held in memory (embedded) are
	// dropped. Close is idempotent.
	Close() error

	// reserve holds the lines' amounts under reservation id until deadline,
	// all or nothing: it refuses when, on a line with limit >= 0,
	// committed+reserved+amount > limit. It returns the index of the first
	// refusing line and that bucket's balance (refused == -1: granted).
	// Expired reservations of the lines' buckets are purged first. A window
	// line (slot != 0) is a per-minute window, whose committed total is
	// the sum of its slots live at now (seconds >= now's second - 60); the
	// store sets its used field to that bucket's committed+reserved before
	// this reservation, granted or not.
	reserve(ctx context.Context, id string, lines []line, now, deadline time.Time) (refused int, bal balance, err error)
	// renew moves the deadline of each reservation still held (not
	// finished, not expired at now) to deadline; the others are left
	// alone. It is called every [LeaseRenewEvery], with no lease too, for
	// the store's periodic checks.
	renew(ctx context.Context, leases []lease, now, deadline time.Time) error
	// leaseEnd returns when the unexpired reservations of bucket holding
	// at least need in total will all have ended by their deadlines (the
	// earliest deadline at which need is freed), or the zero time when they
	// hold less than need.
	leaseEnd(ctx context.Context, bucket string, need int64, now time.Time) (time.Time, error)
	// windowFree returns when window bucket will have freed need: the
	// earliest time at which its slots aged out (a slot of second s at s +
	// 61 s) and its unexpired reservations left it hold at least need in
	// total; the zero time when they hold less or the store cannot tell.
	// A reservation leaves the window at the latest of its deadline and
	// the end of the slot its commit would count in: the second of its
	// birth, taken as deadline - ttl (a renewed lease only makes that
	// later: never too early), + 61 s. Only on a per-minute refusal's path.
	windowFree(ctx context.Context, bucket string, need int64, now time.Time, ttl time.Duration) (time.Time, error)
	// commit removes reservation id from every bucket that still holds it
	// (it may have expired; line.held is what was reserved there, -1 for a
	// bucket that was not reserved) and adds each line's amount to that
	// bucket's committed total, durably; a window line's amount goes to
	// its slot (when that second is still in the window), not durably. The reserved lines come first, in
	// the order they were reserved. id "" means nothing was reserved.
	commit(ctx context.Context, id string, lines []line, now time.Time) error
	// release removes reservation id from the lines' buckets (the reserved
	// lines, with held set; amounts are ignored).
	release(ctx context.Context, id string, lines []line, now time.Time) error
	// balances returns committed and unexpired reserved totals per bucket
	// (a window bucket, see isWindowBucket: its live slots' sum at now).
	balances(ctx context.Context, buckets []string, now time.Time) ([]balance, error)
	// ping reports whether the store can meter calls now: nil, or an
	// error wrapping ErrUnavailable (and ErrNoMarker for a Redis without
	// its marker).
	ping(ctx context.Context) error
	// writable is ping without I/O, for every call's path: an error
	// wrapping ErrUnavailable while the store knows it cannot record
	// usage (the embedded journal cannot be written), else nil.
	writable() error
}

// line is one bucket touched by an operation.
type line struct {
	bucket   string // opaque bucket id, see bucketID
	limit    int64  // cap in the bucket's unit; -1 = no cap
	amount   int64  // tokens or nano-euros, >= 0: to reserve, or to commit
	held     int64  // commit and release: the amount reserved in this bucket; -1 = none
	expireAt int64  // unix seconds after which the bucket may be forgotten (Redis TTL)
	slot     int64  // a per-minute window's line: the unix second of the reservation; 0: a period's bucket
	used     int64  // reserve's output for a window line: committed+reserved before it
}

// lease is one reservation to renew: its id and its reserved lines.
type lease struct {
	id    string
	lines []line
}

// balance is one bucket's state.
type balance struct {
	committed, reserved int64
}

func (b balance) used() int64 { return money.AddSat(b.committed, b.reserved) }
