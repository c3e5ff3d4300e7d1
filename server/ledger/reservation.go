package ledger

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexway/flexway/server/money"
)

// Reservation is budget held for one call by [Ledger.Reserve], to be
// finished by exactly one [Ledger.Commit] or [Ledger.Release] (a second one
// is a no-op). Its periods are fixed at reserve time: a call reserved at
// 23:59 and committed after midnight is charged to the day it started.
type Reservation struct {
	account  Account
	amount   Amount
	born     time.Time
	deadline atomic.Int64 // unix nanoseconds: the current lease's end
	id       string       // "" when nothing was reserved (no cap in force)
	lines    []line       // reserved lines first (limit >= 0), then the other tracked buckets
	kinds    []lineKind   // parallel to lines
	nres     int          // number of reserved lines
	rate     RateState    // the per-minute caps after this reservation

	mu   sync.Mutex
	done bool
}

// Account returns the account the reservation is charged to.
func (r *Reservation) Account() Account { return r.account }

// Amount returns the amount reserved (tokens and nano-euros), as asked.
func (r *Reservation) Amount() Amount { return r.amount }

// Rate returns the state of the account's per-minute caps (its tenant's,
// its agent's and its policies') just after this reservation was granted,
// its own hold counted: for the x-ratelimit-* headers. [NoRate] when the
// account has no per-minute cap.
func (r *Reservation) Rate() RateState { return r.rate }

// Deadline returns when the reservation's current lease ends: it expires
// then unless committed, released or renewed (its ledger renews it every
// [LeaseRenewEvery] while it is held).
func (r *Reservation) Deadline() time.Time { return time.Unix(0, r.deadline.Load()) }

// Reserve holds amt against every cap in force for the account — the
// tenant's, for an agent the agent's own, and those of the policies in
// [Account.Policies] — all or nothing, in one store operation, under a
// lease of [Options.ReservationTTL] ([LeaseTTL] by default) that the ledger
// renews until the reservation is committed or released. The token caps,
// per-minute ones included, hold amt.Tokens, the euro cap amt.NanoEUR and
// requests_per_minute one call. It is refused when committed + reserved +
// amt would exceed a cap's limit: the error is then an *ExceededError
// naming the cap that refused (a month cap before a day cap before a
// per-minute one when several would); when the call would fit with nothing
// reserved, its ByReservations is set and RetryAfter is the time until
// enough of the reservations' leases end (for a per-minute cap, until
// enough of the window ages out too). Other errors wrap [ErrUnavailable].
//
// An account with no cap in force gets a reservation without store I/O;
// committing it still records the usage.
func (l *Ledger) Reserve(ctx context.Context, a Account, amt Amount) (*Reservation, error) {
	amt.Tokens, amt.NanoEUR = max(amt.Tokens, 0), max(amt.NanoEUR, 0)
	now := l.now()
	p := l.periodsAt(now)
	var sbuf [4]scopeRef
	scopes := l.scopes(a, sbuf[:0])
	r := &Reservation{account: a, amount: amt, born: now, rate: NoRate}
	r.deadline.Store(now.Add(l.ttl).UnixNano())
	n := 6 + numCaps*(len(scopes)-min(len(scopes), 2)) + 4
	r.lines = make([]line, 0, n)
	r.kinds = make([]lineKind, 0, n)
	nowSec := now.Unix()
	add := func(k lineKind, limit int64) {
		ln := line{bucket: k.bucket(a, p), limit: limit, amount: amountOf(k.ci, amt), held: -1}
		if isWindow(k.ci) {
			ln.slot, ln.expireAt = nowSec, nowSec+int64(windowLife/time.Second)
		} else {
			ln.expireAt = p.exp(k.ci)
		}
		r.lines = append(r.lines, ln)
		r.kinds = append(r.kinds, k)
	}
	// The capped buckets first (reserved), cap by cap.
	for ci := range capOrder {
		for _, sc := range scopes {
			if ci == ciReqMin && amt.Continued {
				break // the call is counted by its first reservation
			}
			if sc.caps != nil && sc.caps.limit[ci] != noLimit {
				add(lineKind{scope: sc.kind, pol: sc.pol, ci: ci}, sc.caps.limit[ci])
			}
		}
	}
	r.nres = len(r.lines)
	// Then the tenant's and the agent's uncapped day and month buckets,
	// tracked all the same (windows and policies only where capped).
	for ci := 0; ci < ciTokMin; ci++ {
		for _, sc := range scopes {
			if sc.kind == scopePolicy {
				break
			}
			if sc.caps == nil || sc.caps.limit[ci] == noLimit {
				add(lineKind{scope: sc.kind, ci: ci}, noLimit)
			}
		}
	}
	if r.nres == 0 {
		// Nothing to hold, but the usage must be recordable: a call is not
		// served while the store knows it cannot record it.
		if err := l.store.writable(); err != nil {
			return nil, err
		}
		return r, nil
	}
	r.id = l.idPrefix + strconv.FormatUint(l.seq.Add(1), 36)
	refused, bal, err := l.store.reserve(ctx, r.id, r.lines[:r.nres], now, r.Deadline())
	if err != nil {
		return nil, err
	}
	rate := NoRate
	for i := 0; i < r.nres; i++ {
		if ln := r.lines[i]; ln.slot != 0 {
			used := ln.used
			if refused < 0 {
				used = money.AddSat(used, ln.amount)
			}
			rate.observe(r.kinds[i].ci, ln.limit, used)
		}
	}
	if refused >= 0 {
		ln, k := r.lines[refused], r.kinds[refused]
		e := l.exceeded(a, k, ln.limit, bal.used(), p, now)
		e.Requested = ln.amount
		e.Rate = rate
		switch {
		case isWindow(k.ci) && ln.amount > ln.limit:
			e.RetryAfter = 0 // it never fits
		case isWindow(k.ci):
			l.windowWait(ctx, e, ln.bucket, money.AddSat(bal.used(), ln.amount)-ln.limit, now)
			if bal.reserved > 0 && money.AddSat(bal.committed, ln.amount) <= ln.limit {
				e.ByReservations, e.Reserved = true, bal.reserved
			}
		case bal.reserved > 0 && money.AddSat(bal.committed, ln.amount) <= ln.limit:
			l.byReservations(ctx, e, ln.bucket, bal, money.AddSat(bal.used(), ln.amount)-ln.limit, now)
		}
		return nil, e
	}
	r.rate = rate
	l.hold(r)
	return r, nil
}

// amountOf is what a call of amt holds or adds on cap ci: its nano-euros
// on the euro cap, one call on requests_per_minute, its tokens elsewhere.
func amountOf(ci int, amt Amount) int64 {
	switch ci {
	case ciEUR:
		return amt.NanoEUR
	case ciReqMin:
		return 1
	}
	return amt.Tokens
}

// Commit replaces the reservation by the actual usage, in the periods fixed
// at reserve time: the reserved amounts are returned and actual is added to
// the committed totals of every bucket of the account (tenant's and agent's,
// capped or not; its policies' capped ones) — to a per-minute window, in
// the slot of the second of the reservation (one call for
// requests_per_minute), where it counts until that second + 61 s. actual may exceed what was reserved — the provider billed
// it — and is committed anyway. A reservation that already expired only adds
// actual. Commit is idempotent per reservation: once a Commit or Release of r
// succeeded, later ones return nil and change nothing. Errors wrap
// [ErrUnavailable]; the commit may then be retried (with Redis, a retry
// after a lost reply is recognised for a minute and not applied twice).
// When Commit returns nil the usage is stored: appended to the embedded
// ledger's journal (it survives kill -9) or applied by Redis. An error
// wrapping [ErrNotDurable] means it was counted in memory only, for now;
// the reservation is then settled. ctx's
// cancellation is ignored (a client that disconnected is still charged);
// its values are kept.
func (l *Ledger) Commit(ctx context.Context, r *Reservation, actual Amount) error {
	return l.settle(ctx, r, func(ctx context.Context) error {
		actual.Tokens, actual.NanoEUR = max(actual.Tokens, 0), max(actual.NanoEUR, 0)
		now := l.now()
		lines := make([]line, len(r.lines))
		copy(lines, r.lines)
		for i := range lines {
			if i < r.nres {
				lines[i].held = lines[i].amount
			}
			lines[i].amount = amountOf(r.kinds[i].ci, actual)
			if lines[i].slot != 0 {
				lines[i].expireAt = max(lines[i].expireAt, now.Unix()+int64(windowLife/time.Second))
			}
		}
		// A failed commit's hold expires with its lease (the Redis store
		// renews the holds of the commits it journaled itself, until they
		// are replayed).
		return l.store.commit(ctx, r.id, lines, now)
	})
}

// Release returns the whole reservation: the call failed or was refused
// before any upstream byte, so nothing is charged. Like Commit it is
// idempotent per reservation, ignores ctx's cancellation, and its errors
// wrap [ErrUnavailable] (the reservation is then renewed no more: it
// expires with its lease).
func (l *Ledger) Release(ctx context.Context, r *Reservation) error {
	return l.settle(ctx, r, func(ctx context.Context) error {
		if r.nres == 0 {
			return nil
		}
		lines := make([]line, r.nres)
		copy(lines, r.lines)
		for i := range lines {
			lines[i].held = lines[i].amount
		}
		// A release that failed frees the budget when the lease ends.
		return l.store.release(ctx, r.id, lines, l.now())
	})
}

// settle finishes r once, for Commit and Release: it does nothing when r is
// nil or already finished, and otherwise runs finish under r's lock. finish
// gets ctx's values without its cancellation: a caller that went away (a
// client that disconnected) must not lose the charge, and the store's own
// timeouts bound the wait. r is renewed no more, whatever the outcome. It is
// finished when finish returns nil or an error wrapping [ErrNotDurable]
// (the usage is counted: a retry must not count it again).
func (l *Ledger) settle(ctx context.Context, r *Reservation, finish func(ctx context.Context) error) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil
	}
	defer l.forget(r)
	err := finish(context.WithoutCancel(ctx))
	if err == nil || errors.Is(err, ErrNotDurable) {
		r.done = true
	}
	return err
}
