package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// The caps in the order they are checked: month caps first, so that when
// several caps refuse, the one reported is the one that stays refused the
// longest (its RetryAfter is the one worth waiting for).
var capOrder = [3]Cap{EURPerMonth, TokensPerMonth, TokensPerDay}

const (
	ciEUR = iota
	ciTokMonth
	ciTokDay
)

const noLimit = -1

// capSet is one scope's caps, indexed like capOrder.
type capSet struct {
	limit  [3]int64 // noLimit or >= 0
	softAt [3]int64 // soft when used >= softAt
	any    bool     // at least one cap
}

type tenantCaps struct {
	caps   capSet
	agents map[string]*capSet
}

// Ledger enforces a [Policy] over a [Store]. It is safe for concurrent use;
// every method may be called on the path of every model call.
type Ledger struct {
	store    Store
	now      func() time.Time
	ttl      time.Duration
	loc      *time.Location
	def      capSet
	tenants  map[string]*tenantCaps
	idPrefix string
	seq      atomic.Uint64
	per      atomic.Pointer[periods]

	// live are the reservations this ledger holds and renews (see
	// [LeaseTTL]), by id.
	liveMu    sync.Mutex
	live      map[string]*Reservation
	stop      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
}

// New returns a ledger enforcing p over s, which it owns from then on
// ([Ledger.Close] closes it). s must not be nil. p is copied: later changes
// to its maps do not affect the ledger.
func New(p Policy, s Store, o Options) *Ledger {
	if s == nil {
		panic("budget: New with a nil Store")
	}
	l := &Ledger{store: s, now: o.Now, ttl: o.ReservationTTL, loc: p.Location,
		live: make(map[string]*Reservation), stop: make(chan struct{}), stopped: make(chan struct{})}
	if l.now == nil {
		l.now = time.Now
	}
	if l.ttl <= 0 {
		l.ttl = LeaseTTL
	}
	if l.loc == nil {
		l.loc = time.UTC
	}
	ppm := int64(perMillion)
	if p.Soft > 0 && p.Soft < 1 { // NaN fails both
		ppm = max(int64(math.Round(p.Soft*perMillion)), 1)
	}
	l.def = makeCapSet(p.Default, ppm)
	l.tenants = make(map[string]*tenantCaps, len(p.Tenants))
	for name, tp := range p.Tenants {
		merged := p.Default
		if tp.Limits.TokensPerDay != nil {
			merged.TokensPerDay = tp.Limits.TokensPerDay
		}
		if tp.Limits.TokensPerMonth != nil {
			merged.TokensPerMonth = tp.Limits.TokensPerMonth
		}
		if tp.Limits.NanoEURPerMonth != nil {
			merged.NanoEURPerMonth = tp.Limits.NanoEURPerMonth
		}
		tc := &tenantCaps{caps: makeCapSet(merged, ppm), agents: make(map[string]*capSet, len(tp.Agents))}
		for agent, al := range tp.Agents {
			cs := makeCapSet(al, ppm)
			tc.agents[agent] = &cs
		}
		l.tenants[name] = tc
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:]) // never fails (crypto/rand panics instead)
	l.idPrefix = hex.EncodeToString(rnd[:]) + "."
	go l.maintain(l.ttl / 3)
	return l
}

func makeCapSet(lim Limits, ppm int64) capSet {
	cs := capSet{limit: [3]int64{noLimit, noLimit, noLimit}}
	for ci, v := range [3]*int64{lim.NanoEURPerMonth, lim.TokensPerMonth, lim.TokensPerDay} {
		if v == nil {
			continue
		}
		limit := max(*v, 0)
		cs.limit[ci] = limit
		cs.softAt[ci] = softThreshold(limit, ppm)
		cs.any = true
	}
	return cs
}

// softThreshold is ceil(limit*ppm/1e6), in 128-bit integers.
func softThreshold(limit, ppm int64) int64 {
	hi, lo := bits.Mul64(uint64(limit), uint64(ppm))
	lo, c := bits.Add64(lo, perMillion-1, 0)
	hi += c
	q, _ := bits.Div64(hi, lo, perMillion) // ppm <= 1e6: q <= limit, hi < 1e6
	return int64(q)
}

// caps returns the tenant's caps and, for an agent, the agent's own caps
// (nil when the account is a tenant or the agent has no caps).
func (l *Ledger) caps(a Account) (tenant, agent *capSet) {
	tc, ok := l.tenants[a.Tenant]
	if !ok {
		return &l.def, nil
	}
	if a.Agent != "" {
		agent = tc.agents[a.Agent]
	}
	return &tc.caps, agent
}

// lineKind says which scope and cap a line belongs to.
type lineKind struct {
	agent bool
	ci    int
}

// State is an account's budget state before a call: Soft when any cap in
// force (tenant's or agent's) is at or past Soft × its limit; Exceeded when
// one is at or past its limit (then Soft is true as well).
type State struct {
	Soft     bool
	Exceeded *ExceededError
}

// Check returns the account's state from committed+reserved usage of the
// current periods, without reserving anything. When a cap is reached, the
// returned error is the same *ExceededError as State.Exceeded (the month cap
// when several are reached). Other errors wrap [ErrUnavailable]. An account
// with no cap in force (neither its tenant nor its agent) costs no store I/O.
func (l *Ledger) Check(ctx context.Context, a Account) (State, error) {
	tc, ac := l.caps(a)
	if !tc.any && (ac == nil || !ac.any) {
		return State{}, nil
	}
	now := l.now()
	p := l.periodsAt(now)
	var kinds [6]lineKind
	var ids [6]string
	var sets [6]*capSet
	n := 0
	for ci := range capOrder {
		for _, k := range [2]struct {
			cs    *capSet
			agent bool
		}{{tc, false}, {ac, true}} {
			if k.cs == nil || k.cs.limit[ci] == noLimit {
				continue
			}
			kinds[n] = lineKind{agent: k.agent, ci: ci}
			ids[n] = bucketID(a, k.agent, capOrder[ci], p.period(ci))
			sets[n] = k.cs
			n++
		}
	}
	bals, err := l.store.balances(ctx, ids[:n], now)
	if err != nil {
		return State{}, err
	}
	var st State
	for i := 0; i < n; i++ {
		k, used := kinds[i], bals[i].used()
		if used >= sets[i].softAt[k.ci] {
			st.Soft = true
		}
		if limit := sets[i].limit[k.ci]; st.Exceeded == nil && used >= limit {
			st.Exceeded = l.exceeded(a, k, limit, used, p, now)
			if bals[i].committed < limit {
				// Reached by calls in flight: free once enough of them end.
				l.byReservations(ctx, st.Exceeded, ids[i], bals[i], used-limit+1, now)
			}
		}
	}
	if st.Exceeded != nil {
		return st, st.Exceeded
	}
	return st, nil
}

func (l *Ledger) exceeded(a Account, k lineKind, limit, used int64, p *periods, now time.Time) *ExceededError {
	scope := "tenant"
	if k.agent {
		scope = "agent"
	}
	return &ExceededError{
		Account:    a,
		Scope:      scope,
		Cap:        capOrder[k.ci],
		Period:     p.period(k.ci),
		Limit:      limit,
		Used:       used,
		RetryAfter: p.end(k.ci).Sub(now),
	}
}

// byReservations marks e as caused by the reservations of bucket (bal):
// need of them must end for the call to fit. RetryAfter becomes the time
// until enough leases end, when the store can tell and it is before the
// period's reset.
func (l *Ledger) byReservations(ctx context.Context, e *ExceededError, bucket string, bal balance, need int64, now time.Time) {
	at, err := l.store.leaseEnd(ctx, bucket, need, now)
	if err != nil || at.IsZero() || !at.After(now) || at.Sub(now) >= e.RetryAfter {
		return
	}
	e.ByReservations = true
	e.Reserved = bal.reserved
	e.RetryAfter = at.Sub(now)
}

// CapUsage is one cap's state in its current period, for the admin API.
type CapUsage struct {
	// Cap is the cap's name.
	Cap Cap
	// Period is "2026-11-30" (day cap) or "2026-11" (month caps), in
	// [Policy.Location].
	Period string
	// Unit is the unit of Limit, Committed, Reserved and Remaining:
	// [UnitTokens] or [UnitNanoEUR].
	Unit Unit
	// Limit is the cap.
	Limit int64
	// Committed is the usage committed in the period.
	Committed int64
	// Reserved is the usage held by unexpired reservations.
	Reserved int64
	// Remaining is Limit-Committed-Reserved, never below 0.
	Remaining int64
	// Soft is true at or past Soft × Limit (committed+reserved).
	Soft bool
}

// Usage returns one entry per cap in force for the account itself — the
// tenant's caps when a.Agent is "", the agent's own caps otherwise — in the
// order tokens_per_day, tokens_per_month, eur_per_month, for the current
// periods. No cap in force: an empty slice and no store I/O. Errors wrap
// [ErrUnavailable].
func (l *Ledger) Usage(ctx context.Context, a Account) ([]CapUsage, error) {
	tc, ac := l.caps(a)
	cs := tc
	if a.Agent != "" {
		cs = ac
	}
	if cs == nil || !cs.any {
		return []CapUsage{}, nil
	}
	now := l.now()
	p := l.periodsAt(now)
	var cis []int
	var ids []string
	for _, ci := range [3]int{ciTokDay, ciTokMonth, ciEUR} {
		if cs.limit[ci] != noLimit {
			cis = append(cis, ci)
			ids = append(ids, bucketID(a, a.Agent != "", capOrder[ci], p.period(ci)))
		}
	}
	bals, err := l.store.balances(ctx, ids, now)
	if err != nil {
		return nil, err
	}
	out := make([]CapUsage, len(cis))
	for i, ci := range cis {
		b, limit := bals[i], cs.limit[ci]
		out[i] = CapUsage{
			Cap:       capOrder[ci],
			Period:    p.period(ci),
			Unit:      capOrder[ci].Unit(),
			Limit:     limit,
			Committed: b.committed,
			Reserved:  b.reserved,
			Remaining: max(limit-b.used(), 0),
			Soft:      b.used() >= cs.softAt[ci],
		}
	}
	return out, nil
}

// Ping reports whether the ledger can meter calls now: nil, or an error
// wrapping [ErrUnavailable] (Redis unreachable, or without its marker:
// [ErrNoMarker]; an embedded ledger after Close). It is what readiness
// checks ask.
func (l *Ledger) Ping(ctx context.Context) error { return l.store.ping(ctx) }

// Close closes the store; the ledger must not be used afterwards (calls
// then fail with errors wrapping [ErrUnavailable], except those that need no
// store I/O). Close is idempotent.
func (l *Ledger) Close() error {
	l.closeOnce.Do(func() {
		close(l.stop)
		<-l.stopped
	})
	return l.store.Close()
}
