package ledger

import (
	"context"
	"time"
)

// LeaseTTL is how long a reservation holds budget in the store unless its
// ledger renews it ([Options.ReservationTTL] overrides it): a ledger renews
// every reservation it holds every LeaseRenewEvery, so a live call keeps its
// hold for as long as it runs, and the hold of a replica that died (kill -9,
// a lost host) frees within LeaseTTL of its last renewal.
const LeaseTTL = 30 * time.Second

// LeaseRenewEvery is how often a ledger renews its reservations' leases:
// a third of [LeaseTTL], so that two renewals in a row may fail (a Redis
// blip) before a live call's hold lapses. With another ReservationTTL it is
// a third of that.
const LeaseRenewEvery = LeaseTTL / 3

// leaseMaxAge bounds how long a reservation is renewed: a Reservation never
// committed nor released (a bug) stops holding budget after it.
const leaseMaxAge = 2 * time.Hour

// maintain renews the leases of the ledger's reservations every `every`
// until Close.
func (l *Ledger) maintain(every time.Duration) {
	defer close(l.stopped)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), every)
			_ = l.renew(ctx) // a failure shows on the calls; the next tick retries
			cancel()
		}
	}
}

// renew extends the lease of every reservation the ledger holds to now +
// ttl, and lets the store do its periodic work (the Redis store checks its
// commit sequence then, even when nothing is held). A reservation held
// longer than leaseMaxAge is no longer renewed.
func (l *Ledger) renew(ctx context.Context) error {
	now := l.now()
	dl := now.Add(l.ttl)
	l.liveMu.Lock()
	rs := make([]*Reservation, 0, len(l.live))
	for id, r := range l.live {
		if now.Sub(r.born) > leaseMaxAge {
			delete(l.live, id)
			continue
		}
		rs = append(rs, r)
	}
	l.liveMu.Unlock()
	ls := make([]lease, len(rs))
	for i, r := range rs {
		ls[i] = lease{id: r.id, lines: r.lines[:r.nres]}
	}
	if err := l.store.renew(ctx, ls, now, dl); err != nil {
		return err
	}
	for _, r := range rs {
		r.deadline.Store(dl.UnixNano())
	}
	return nil
}

// hold registers r for renewal; forget stops renewing it.
func (l *Ledger) hold(r *Reservation) {
	l.liveMu.Lock()
	l.live[r.id] = r
	l.liveMu.Unlock()
}

func (l *Ledger) forget(r *Reservation) {
	l.liveMu.Lock()
	delete(l.live, r.id)
	l.liveMu.Unlock()
}

// holding is the number of reservations the ledger renews.
func (l *Ledger) holding() int {
	l.liveMu.Lock()
	defer l.liveMu.Unlock()
	return len(l.live)
}
