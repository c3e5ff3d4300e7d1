package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"math/bits"
	"strconv"
	"strings"
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

// periods are the current day and month in the ledger's Location.
type periods struct {
	dayStart, dayEnd, monthEnd time.Time
	day, month                 string
	dayExp, monthExp           int64 // unix seconds: when the buckets may be forgotten
}

const (
	dayBucketLife   = 3 * 24 * time.Hour  // from the start of the day
	monthBucketLife = 70 * 24 * time.Hour // from the start of the month
)

func (l *Ledger) periodsAt(now time.Time) *periods {
	if p := l.per.Load(); p != nil && !now.Before(p.dayStart) && now.Before(p.dayEnd) {
		return p
	}
	t := now.In(l.loc)
	y, m, d := t.Date()
	monthStart := time.Date(y, m, 1, 0, 0, 0, 0, l.loc)
	p := &periods{
		dayStart: time.Date(y, m, d, 0, 0, 0, 0, l.loc),
		dayEnd:   time.Date(y, m, d+1, 0, 0, 0, 0, l.loc),
		monthEnd: time.Date(y, m+1, 1, 0, 0, 0, 0, l.loc),
		day:      t.Format("2006-01-02"),
		month:    t.Format("2006-01"),
	}
	p.dayExp = p.dayStart.Add(dayBucketLife).Unix()
	p.monthExp = monthStart.Add(monthBucketLife).Unix()
	l.per.Store(p)
	return p
}

func (p *periods) period(ci int) string {
	if ci == ciTokDay {
		return p.day
	}
	return p.month
}

func (p *periods) end(ci int) time.Time {
	if ci == ciTokDay {
		return p.dayEnd
	}
	return p.monthEnd
}

func (p *periods) exp(ci int) int64 {
	if ci == ciTokDay {
		return p.dayExp
	}
	return p.monthExp
}

// bucketID names one bucket: "t:<tenant>:<cap>:<period>" or
// "a:<tenant>:<agent>:<cap>:<period>", with '%' and ':' in names escaped
// as %25 and %3A so that distinct accounts never share a bucket.
func bucketID(a Account, agent bool, c Cap, period string) string {
	var b strings.Builder
	b.Grow(len(a.Tenant) + len(a.Agent) + len(c) + len(period) + 6)
	if agent {
		b.WriteString("a:")
		escapeTo(&b, a.Tenant)
		b.WriteByte(':')
		escapeTo(&b, a.Agent)
	} else {
		b.WriteString("t:")
		escapeTo(&b, a.Tenant)
	}
	b.WriteByte(':')
	b.WriteString(string(c))
	b.WriteByte(':')
	b.WriteString(period)
	return b.String()
}

func escapeTo(b *strings.Builder, s string) {
	if !strings.ContainsAny(s, "%:") {
		b.WriteString(s)
		return
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '%':
			b.WriteString("%25")
		case ':':
			b.WriteString("%3A")
		default:
			b.WriteByte(s[i])
		}
	}
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

	mu   sync.Mutex
	done bool
}

// Account returns the account the reservation is charged to.
func (r *Reservation) Account() Account { return r.account }

// Amount returns the amount reserved (tokens and nano-euros), as asked.
func (r *Reservation) Amount() Amount { return r.amount }

// Deadline returns when the reservation's current lease ends: it expires
// then unless committed, released or renewed (its ledger renews it every
// [LeaseRenewEvery] while it is held).
func (r *Reservation) Deadline() time.Time { return time.Unix(0, r.deadline.Load()) }

// Reserve holds amt against every cap in force for the account — the
// tenant's and, for an agent, the agent's own — all or nothing, under a
// lease of [Options.ReservationTTL] ([LeaseTTL] by default) that the ledger
// renews until the reservation is committed or released. It is refused
// when committed + reserved + amt would exceed a cap's limit: the error is
// then an *ExceededError naming the cap that refused (a month cap before a
// day cap when both would); when the call would fit with nothing reserved,
// its ByReservations is set and RetryAfter is the time until enough of the
// reservations' leases end. Other errors wrap [ErrUnavailable].
//
// An account with no cap in force gets a reservation without store I/O;
// committing it still records the usage.
func (l *Ledger) Reserve(ctx context.Context, a Account, amt Amount) (*Reservation, error) {
	amt.Tokens, amt.NanoEUR = max(amt.Tokens, 0), max(amt.NanoEUR, 0)
	now := l.now()
	p := l.periodsAt(now)
	tc, ac := l.caps(a)
	r := &Reservation{account: a, amount: amt, born: now}
	r.deadline.Store(now.Add(l.ttl).UnixNano())
	r.lines = make([]line, 0, 6)
	r.kinds = make([]lineKind, 0, 6)
	// Two passes: the capped buckets first (reserved), then the others.
	scopes, nscopes := [2]*capSet{tc, ac}, 1
	if a.Agent != "" {
		nscopes = 2
	}
	for pass := 0; pass < 2; pass++ {
		for ci := range capOrder {
			for s := 0; s < nscopes; s++ {
				limit := int64(noLimit)
				if scopes[s] != nil {
					limit = scopes[s].limit[ci]
				}
				if (limit != noLimit) != (pass == 0) {
					continue
				}
				amount := amt.Tokens
				if ci == ciEUR {
					amount = amt.NanoEUR
				}
				agent := s == 1
				r.lines = append(r.lines, line{
					bucket:   bucketID(a, agent, capOrder[ci], p.period(ci)),
					limit:    limit,
					amount:   amount,
					held:     -1,
					expireAt: p.exp(ci),
				})
				r.kinds = append(r.kinds, lineKind{agent: agent, ci: ci})
			}
		}
		if pass == 0 {
			r.nres = len(r.lines)
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
	if refused >= 0 {
		ln := r.lines[refused]
		e := l.exceeded(a, r.kinds[refused], ln.limit, bal.used(), p, now)
		e.Requested = ln.amount
		if bal.reserved > 0 && satAdd(bal.committed, ln.amount) <= ln.limit {
			l.byReservations(ctx, e, ln.bucket, bal, satAdd(bal.used(), ln.amount)-ln.limit, now)
		}
		return nil, e
	}
	l.hold(r)
	return r, nil
}

// Commit replaces the reservation by the actual usage, in the periods fixed
// at reserve time: the reserved amounts are returned and actual is added to
// the committed totals of every bucket of the account (tenant's and agent's,
// capped or not). actual may exceed what was reserved — the provider billed
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
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil
	}
	tokens, nano := max(actual.Tokens, 0), max(actual.NanoEUR, 0)
	lines := make([]line, len(r.lines))
	copy(lines, r.lines)
	for i := range lines {
		if i < r.nres {
			lines[i].held = lines[i].amount
		}
		if r.kinds[i].ci == ciEUR {
			lines[i].amount = nano
		} else {
			lines[i].amount = tokens
		}
	}
	// The caller's cancellation (a client that went away) must not lose the
	// charge: commit with its values but without its cancellation; the
	// store's own timeouts bound the wait.
	// Renewed no more, whatever the outcome: a failed commit's hold
	// expires with its lease (the Redis store renews the holds of the
	// commits it journaled itself, until they are replayed).
	defer l.forget(r)
	if err := l.store.commit(context.WithoutCancel(ctx), r.id, lines, l.now()); err != nil {
		if errors.Is(err, ErrNotDurable) {
			r.done = true // counted: a retry must not count it again
		}
		return err
	}
	r.done = true
	return nil
}

// Release returns the whole reservation: the call failed or was refused
// before any upstream byte, so nothing is charged. Like Commit it is
// idempotent per reservation, ignores ctx's cancellation, and its errors
// wrap [ErrUnavailable] (the reservation is then renewed no more: it
// expires with its lease).
func (l *Ledger) Release(ctx context.Context, r *Reservation) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil
	}
	if r.nres > 0 {
		lines := make([]line, r.nres)
		copy(lines, r.lines)
		for i := range lines {
			lines[i].held = lines[i].amount
		}
		// Renewed no more, whatever the outcome: a release that failed
		// frees the budget when the lease ends.
		defer l.forget(r)
		if err := l.store.release(context.WithoutCancel(ctx), r.id, lines, l.now()); err != nil {
			return err
		}
	}
	r.done = true
	return nil
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
