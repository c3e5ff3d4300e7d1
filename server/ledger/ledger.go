package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The caps in the order they are checked: month caps first, so that when
// several caps refuse, the one reported is the one that stays refused the
// longest (its RetryAfter is the one worth waiting for); the per-minute
// windows last.
var capOrder = [numCaps]Cap{EURPerMonth, TokensPerMonth, TokensPerDay, TokensPerMinute, RequestsPerMinute}

const (
	ciEUR = iota
	ciTokMonth
	ciTokDay
	ciTokMin
	ciReqMin
	numCaps
)

const noLimit = -1

// windowFallback is the RetryAfter of a per-minute refusal when the store
// cannot tell when the window admits the call: a whole window.
const windowFallback = 61 * time.Second

// capSet is one scope's caps, indexed like capOrder.
type capSet struct {
	limit  [numCaps]int64 // noLimit or >= 0
	softAt [numCaps]int64 // soft when used >= softAt
	any    bool           // at least one cap
}

type tenantCaps struct {
	caps   capSet
	agents map[string]*capSet
}

// policyCaps are one policy's caps ([Policy.Policies]).
type policyCaps struct {
	name string
	per  Per
	caps capSet
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
	policies map[string]*policyCaps
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
// to its maps do not affect the ledger. A policy's Per other than the three
// values counts per tenant (the configuration loader refuses it first).
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
		for _, f := range [numCaps]struct{ to, from **int64 }{
			{&merged.TokensPerMinute, &tp.Limits.TokensPerMinute},
			{&merged.RequestsPerMinute, &tp.Limits.RequestsPerMinute},
			{&merged.TokensPerDay, &tp.Limits.TokensPerDay},
			{&merged.TokensPerMonth, &tp.Limits.TokensPerMonth},
			{&merged.NanoEURPerMonth, &tp.Limits.NanoEURPerMonth},
		} {
			if *f.from != nil {
				*f.to = *f.from
			}
		}
		tc := &tenantCaps{caps: makeCapSet(merged, ppm), agents: make(map[string]*capSet, len(tp.Agents))}
		for agent, al := range tp.Agents {
			cs := makeCapSet(al, ppm)
			tc.agents[agent] = &cs
		}
		l.tenants[name] = tc
	}
	l.policies = make(map[string]*policyCaps, len(p.Policies))
	for name, pl := range p.Policies {
		per := pl.Per
		if per != PerAgent && per != PerPolicy {
			per = PerTenant
		}
		l.policies[name] = &policyCaps{name: name, per: per, caps: makeCapSet(pl.Limits, ppm)}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:]) // never fails (crypto/rand panics instead)
	l.idPrefix = hex.EncodeToString(rnd[:]) + "."
	go l.maintain(l.ttl / 3)
	return l
}

func makeCapSet(lim Limits, ppm int64) capSet {
	var cs capSet
	for ci, v := range [numCaps]*int64{lim.NanoEURPerMonth, lim.TokensPerMonth, lim.TokensPerDay, lim.TokensPerMinute, lim.RequestsPerMinute} {
		cs.limit[ci] = noLimit
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

// The scopes of an account's caps.
const (
	scopeTenant uint8 = iota
	scopeAgent
	scopePolicy
)

// scopeRef is one scope of an account: its kind, its caps (nil: none) and,
// for a policy, the policy.
type scopeRef struct {
	kind uint8
	caps *capSet
	pol  *policyCaps
}

// scopes appends to buf the account's scopes: its tenant, its agent (for
// an agent's call), then each policy of a.Policies the ledger knows with a
// cap, once.
func (l *Ledger) scopes(a Account, buf []scopeRef) []scopeRef {
	tc, ac := l.caps(a)
	buf = append(buf, scopeRef{kind: scopeTenant, caps: tc})
	if a.Agent != "" {
		buf = append(buf, scopeRef{kind: scopeAgent, caps: ac})
	}
	for i, name := range a.Policies {
		pc := l.policies[name]
		if pc == nil || !pc.caps.any || slices.Contains(a.Policies[:i], name) {
			continue
		}
		buf = append(buf, scopeRef{kind: scopePolicy, caps: &pc.caps, pol: pc})
	}
	return buf
}

// anyCap reports whether a scope has a cap.
func anyCap(scopes []scopeRef) bool {
	for _, sc := range scopes {
		if sc.caps != nil && sc.caps.any {
			return true
		}
	}
	return false
}

// lineKind says which scope and cap a line belongs to.
type lineKind struct {
	scope uint8
	pol   *policyCaps // scopePolicy
	ci    int
}

// bucket is the line's bucket id in the periods p.
func (k lineKind) bucket(a Account, p *periods) string {
	c, period := capOrder[k.ci], p.period(k.ci)
	if k.scope == scopePolicy {
		return policyBucketID(k.pol.name, k.pol.per, a, c, period)
	}
	return bucketID(a, k.scope == scopeAgent, c, period)
}

// State is an account's budget state before a call: Soft when any day or
// month cap in force (tenant's, agent's or a policy's) is at or past Soft
// × its limit; Exceeded when one cap, per-minute ones included, is at or
// past its limit (then Soft is true as well, unless the cap is a
// per-minute one); Rate the per-minute caps' state.
type State struct {
	Soft     bool
	Exceeded *ExceededError
	// Rate is the state of the account's per-minute caps (nothing
	// reserved): [NoRate] when it has none.
	Rate RateState
}

// observe takes a per-minute line's state into r: the cap of its kind with
// the least remaining wins.
func (r *RateState) observe(ci int, limit, used int64) {
	rem := max(limit-used, 0)
	switch ci {
	case ciTokMin:
		if r.TokensLimit < 0 || rem < r.TokensRemaining {
			r.TokensLimit, r.TokensRemaining = limit, rem
		}
	case ciReqMin:
		if r.RequestsLimit < 0 || rem < r.RequestsRemaining {
			r.RequestsLimit, r.RequestsRemaining = limit, rem
		}
	}
}

// Check returns the account's state from committed+reserved usage of the
// current periods and windows, without reserving anything: the caps of
// its tenant, its agent and its policies ([Account.Policies]). When a cap
// is reached, the returned error is the same *ExceededError as
// State.Exceeded (the month cap when several are reached; a per-minute cap
// only when no longer one is). Other errors wrap [ErrUnavailable]. An
// account with no cap in force costs no store I/O.
func (l *Ledger) Check(ctx context.Context, a Account) (State, error) {
	var sbuf [4]scopeRef
	scopes := l.scopes(a, sbuf[:0])
	if !anyCap(scopes) {
		return State{Rate: NoRate}, nil
	}
	now := l.now()
	p := l.periodsAt(now)
	kinds := make([]lineKind, 0, 2*numCaps)
	ids := make([]string, 0, 2*numCaps)
	limits := make([]int64, 0, 2*numCaps)
	softs := make([]int64, 0, 2*numCaps)
	for ci := range capOrder {
		for _, sc := range scopes {
			if sc.caps == nil || sc.caps.limit[ci] == noLimit {
				continue
			}
			k := lineKind{scope: sc.kind, pol: sc.pol, ci: ci}
			kinds = append(kinds, k)
			ids = append(ids, k.bucket(a, p))
			limits = append(limits, sc.caps.limit[ci])
			softs = append(softs, sc.caps.softAt[ci])
		}
	}
	bals, err := l.store.balances(ctx, ids, now)
	if err != nil {
		return State{}, err
	}
	st := State{Rate: NoRate}
	for i, k := range kinds {
		used, limit := bals[i].used(), limits[i]
		win := isWindow(k.ci)
		if win {
			st.Rate.observe(k.ci, limit, used)
		} else if used >= softs[i] {
			st.Soft = true
		}
		if st.Exceeded != nil || used < limit {
			continue
		}
		st.Exceeded = l.exceeded(a, k, limit, used, p, now)
		switch {
		case win:
			l.windowWait(ctx, st.Exceeded, ids[i], used-limit+1, now)
			if bals[i].reserved > 0 && bals[i].committed < limit {
				st.Exceeded.ByReservations, st.Exceeded.Reserved = true, bals[i].reserved
			}
		case bals[i].committed < limit:
			// Reached by calls in flight: free once enough of them end.
			l.byReservations(ctx, st.Exceeded, ids[i], bals[i], used-limit+1, now)
		}
	}
	if st.Exceeded != nil {
		st.Exceeded.Rate = st.Rate
		return st, st.Exceeded
	}
	return st, nil
}

func (l *Ledger) exceeded(a Account, k lineKind, limit, used int64, p *periods, now time.Time) *ExceededError {
	e := &ExceededError{
		Account: a,
		Scope:   "tenant",
		Cap:     capOrder[k.ci],
		Period:  p.period(k.ci),
		Limit:   limit,
		Used:    used,
		Rate:    NoRate,
	}
	switch k.scope {
	case scopeAgent:
		e.Scope = "agent"
	case scopePolicy:
		e.Scope, e.Policy, e.Per = "policy", k.pol.name, k.pol.per
	}
	if isWindow(k.ci) {
		e.RetryAfter = windowFallback
	} else {
		e.RetryAfter = p.end(k.ci).Sub(now)
	}
	return e
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

// windowWait sets the RetryAfter of e, a per-minute refusal of window
// bucket, to the time until need of its usage has aged out of the window
// or been freed by reservations' leases ending, rounded up to whole
// seconds, at least 1s; the whole window when the store cannot tell.
func (l *Ledger) windowWait(ctx context.Context, e *ExceededError, bucket string, need int64, now time.Time) {
	at, err := l.store.windowFree(ctx, bucket, need, now, l.ttl)
	if err != nil || at.IsZero() {
		return
	}
	d := at.Sub(now)
	d = (d + time.Second - 1) / time.Second * time.Second
	e.RetryAfter = max(d, time.Second)
}

// CapUsage is one cap's state in its current period, for the admin API.
type CapUsage struct {
	// Cap is the cap's name.
	Cap Cap
	// Period is "2026-11-30" (day cap) or "2026-11" (month caps), in
	// [Policy.Location]; "" for the per-minute caps, whose window is the
	// last 60 seconds (61 one-second slots, the current one included).
	Period string
	// Unit is the unit of Limit, Committed, Reserved and Remaining:
	// [UnitTokens], [UnitRequests] or [UnitNanoEUR].
	Unit Unit
	// Limit is the cap.
	Limit int64
	// Committed is the usage committed in the period (in the window).
	Committed int64
	// Reserved is the usage held by unexpired reservations.
	Reserved int64
	// Remaining is Limit-Committed-Reserved, never below 0.
	Remaining int64
	// Soft is true at or past Soft × Limit (committed+reserved).
	Soft bool
}

// Usage returns one entry per cap in force for the account itself — the
// tenant's caps when a.Agent is "", the agent's own caps otherwise; not its
// policies' — in the order tokens_per_minute, requests_per_minute,
// tokens_per_day, tokens_per_month, eur_per_month, for the current periods
// and windows. No cap in force: an empty slice and no store I/O. Errors
// wrap [ErrUnavailable].
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
	for _, ci := range [numCaps]int{ciTokMin, ciReqMin, ciTokDay, ciTokMonth, ciEUR} {
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
