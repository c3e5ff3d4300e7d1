package ledger

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	ctx = context.Background()
	// 2026-11-30 20:48 UTC: 3h12m before the day and the month roll over.
	t0    = time.Date(2026, 11, 30, 20, 48, 0, 0, time.UTC)
	acme  = Account{Tenant: "acme"}
	acBot = Account{Tenant: "acme", Agent: "bot"}
)

func mustReserve(t *testing.T, l *Ledger, a Account, amt Amount) *Reservation {
	t.Helper()
	r, err := l.Reserve(ctx, a, amt)
	if err != nil {
		t.Fatalf("Reserve(%v, %+v): %v", a, amt, err)
	}
	return r
}

func mustCommit(t *testing.T, l *Ledger, r *Reservation, amt Amount) {
	t.Helper()
	if err := l.Commit(ctx, r, amt); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// refused asserts that err is an *ExceededError and returns it.
func refused(t *testing.T, err error) *ExceededError {
	t.Helper()
	var e *ExceededError
	if !errors.As(err, &e) {
		t.Fatalf("want *ExceededError, got %v", err)
	}
	return e
}

func wantExceeded(t *testing.T, got *ExceededError, want ExceededError) {
	t.Helper()
	if got == nil {
		t.Fatalf("no ExceededError, want %+v", want)
	}
	if want.Rate == (RateState{}) {
		want.Rate = NoRate // an account without per-minute caps
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("ExceededError\n got %+v\nwant %+v", *got, want)
	}
}

func TestReserveAllOrNothingTenantAndAgent(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		p := Policy{Tenants: map[string]TenantPolicy{"acme": {
			Limits: Limits{TokensPerDay: i64(100)},
			Agents: map[string]Limits{"bot": {NanoEURPerMonth: i64(1000)}},
		}}}
		l := newLedger(t, k, p, Options{Now: newClock(t0).Now})

		mustReserve(t, l, acBot, Amount{Tokens: 60, NanoEUR: 600})

		// The agent's euro cap refuses: the tenant's tokens are not held.
		// Only reservations are in the way: the wait is their lease.
		_, err := l.Reserve(ctx, acBot, Amount{Tokens: 30, NanoEUR: 500})
		wantExceeded(t, refused(t, err), ExceededError{
			Account: acBot, Scope: "agent", Cap: EURPerMonth, Period: "2026-11", Requested: 500,
			Limit: 1000, Used: 600, RetryAfter: LeaseTTL, ByReservations: true, Reserved: 600,
		})
		if u := usageOf(t, l, acme, TokensPerDay); u.Reserved != 60 {
			t.Errorf("tenant reserved after agent refusal = %d, want 60", u.Reserved)
		}

		// The tenant's token cap refuses: the agent's euros are not held.
		_, err = l.Reserve(ctx, acBot, Amount{Tokens: 50, NanoEUR: 100})
		wantExceeded(t, refused(t, err), ExceededError{
			Account: acBot, Scope: "tenant", Cap: TokensPerDay, Period: "2026-11-30", Requested: 50,
			Limit: 100, Used: 60, RetryAfter: LeaseTTL, ByReservations: true, Reserved: 60,
		})
		if u := usageOf(t, l, acBot, EURPerMonth); u.Reserved != 600 {
			t.Errorf("agent reserved after tenant refusal = %d, want 600", u.Reserved)
		}

		// Exactly what is left on both: granted.
		mustReserve(t, l, acBot, Amount{Tokens: 40, NanoEUR: 400})
		if u := usageOf(t, l, acme, TokensPerDay); u != (CapUsage{Cap: TokensPerDay, Period: "2026-11-30", Unit: UnitTokens, Limit: 100, Reserved: 100, Remaining: 0, Soft: true}) {
			t.Errorf("tenant usage %+v", u)
		}
		if u := usageOf(t, l, acBot, EURPerMonth); u != (CapUsage{Cap: EURPerMonth, Period: "2026-11", Unit: UnitNanoEUR, Limit: 1000, Reserved: 1000, Soft: true}) {
			t.Errorf("agent usage %+v", u)
		}
		// The tenant's own calls are held to the tenant cap the agent used up.
		_, err = l.Reserve(ctx, acme, Amount{Tokens: 1})
		if e := refused(t, err); e.Scope != "tenant" || e.Cap != TokensPerDay || e.Used != 100 {
			t.Errorf("tenant call: %+v", e)
		}
	})
}

func TestCheckSoftAndExceeded(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		p := Policy{Soft: 0.8, Default: Limits{TokensPerDay: i64(100), TokensPerMonth: i64(1000)}}
		l := newLedger(t, k, p, Options{Now: newClock(t0).Now})

		st, err := l.Check(ctx, acme)
		if err != nil || st.Soft || st.Exceeded != nil {
			t.Fatalf("fresh: %+v, %v", st, err)
		}
		mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 79}), Amount{Tokens: 79})
		if st, err := l.Check(ctx, acme); err != nil || st.Soft {
			t.Fatalf("at 79/100: %+v, %v", st, err)
		}
		r := mustReserve(t, l, acme, Amount{Tokens: 1}) // reserved counts
		if st, err := l.Check(ctx, acme); err != nil || !st.Soft || st.Exceeded != nil {
			t.Fatalf("at 80/100 (79 committed + 1 reserved): %+v, %v", st, err)
		}
		if u := usageOf(t, l, acme, TokensPerDay); !u.Soft || u.Remaining != 20 {
			t.Errorf("usage at 80: %+v", u)
		}
		if u := usageOf(t, l, acme, TokensPerMonth); u.Soft || u.Committed != 79 || u.Reserved != 1 || u.Remaining != 920 {
			t.Errorf("month usage at 80: %+v", u)
		}
		mustCommit(t, l, r, Amount{Tokens: 21})
		st, err = l.Check(ctx, acme)
		want := ExceededError{Account: acme, Scope: "tenant", Cap: TokensPerDay, Period: "2026-11-30",
			Limit: 100, Used: 100, RetryAfter: 3*time.Hour + 12*time.Minute}
		wantExceeded(t, st.Exceeded, want)
		if !st.Soft || err != error(st.Exceeded) {
			t.Errorf("at cap: soft %v, err %v", st.Soft, err)
		}
		if got := err.Error(); got != `tenant "acme" reached its tokens_per_day cap (100 tokens) for 2026-11-30; it resets in 3h12m` {
			t.Errorf("message %q", got)
		}
		_, err = l.Reserve(ctx, acme, Amount{Tokens: 1})
		want.Requested = 1
		wantExceeded(t, refused(t, err), want)
		// A zero-token call still passes a cap reached exactly (nothing to add).
		mustReserve(t, l, acme, Amount{})
	})
}

func TestMonthCapReportedBeforeDayCap(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		now := time.Date(2026, 11, 10, 20, 48, 0, 0, time.UTC)
		p := Policy{Default: Limits{TokensPerDay: i64(100), TokensPerMonth: i64(100)}}
		l := newLedger(t, k, p, Options{Now: newClock(now).Now})
		mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 100}), Amount{Tokens: 100})
		st, err := l.Check(ctx, acme)
		if ee := (*ExceededError)(nil); !errors.As(err, &ee) {
			t.Fatalf("Check at the cap: %v, want the ExceededError", err)
		}
		want := ExceededError{Account: acme, Scope: "tenant", Cap: TokensPerMonth, Period: "2026-11",
			Limit: 100, Used: 100, RetryAfter: 20*24*time.Hour + 3*time.Hour + 12*time.Minute}
		wantExceeded(t, st.Exceeded, want)
		_, err = l.Reserve(ctx, acme, Amount{Tokens: 1})
		want.Requested = 1
		wantExceeded(t, refused(t, err), want)
	})
}

func TestCommitReleaseIdempotent(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		p := Policy{Default: Limits{TokensPerDay: i64(100)}}
		st := k.open(t)
		l := New(p, st, Options{Now: newClock(t0).Now})
		defer l.Close()

		// Commit at actual, more than reserved.
		r := mustReserve(t, l, acme, Amount{Tokens: 50, NanoEUR: 5000})
		mustCommit(t, l, r, Amount{Tokens: 70, NanoEUR: 7000})
		if u := usageOf(t, l, acme, TokensPerDay); u.Committed != 70 || u.Reserved != 0 || u.Remaining != 30 {
			t.Errorf("after commit: %+v", u)
		}
		// Uncapped buckets are tracked too.
		if got := committedIn(t, st, acme, false, TokensPerMonth, "2026-11"); got != 70 {
			t.Errorf("tokens_per_month committed %d, want 70", got)
		}
		if got := committedIn(t, st, acme, false, EURPerMonth, "2026-11"); got != 7000 {
			t.Errorf("eur_per_month committed %d, want 7000", got)
		}
		// Second commit and a release of the same reservation: no-ops.
		mustCommit(t, l, r, Amount{Tokens: 5})
		if err := l.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
		if u := usageOf(t, l, acme, TokensPerDay); u.Committed != 70 || u.Reserved != 0 {
			t.Errorf("after second commit and release: %+v", u)
		}

		// Release restores the whole reservation; later calls are no-ops.
		r = mustReserve(t, l, acme, Amount{Tokens: 30})
		if u := usageOf(t, l, acme, TokensPerDay); u.Reserved != 30 || u.Remaining != 0 {
			t.Errorf("reserved: %+v", u)
		}
		if err := l.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
		mustCommit(t, l, r, Amount{Tokens: 30})
		if u := usageOf(t, l, acme, TokensPerDay); u.Committed != 70 || u.Reserved != 0 || u.Remaining != 30 {
			t.Errorf("after release: %+v", u)
		}

		// The provider billed more than the cap allows: committed anyway.
		r = mustReserve(t, l, acme, Amount{Tokens: 30})
		mustCommit(t, l, r, Amount{Tokens: 50})
		if u := usageOf(t, l, acme, TokensPerDay); u.Committed != 120 || u.Remaining != 0 {
			t.Errorf("over the cap: %+v", u)
		}
		_, err := l.Check(ctx, acme)
		if e := refused(t, err); e.Used != 120 {
			t.Errorf("used %d, want 120", e.Used)
		}
		if err := l.Commit(ctx, nil, Amount{Tokens: 1}); err != nil {
			t.Errorf("Commit(nil) = %v", err)
		}
	})
}

func TestReservationExpiry(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		clk := newClock(t0)
		l := newLedger(t, k, Policy{Default: Limits{TokensPerDay: i64(100)}}, Options{Now: clk.Now, ReservationTTL: time.Minute})
		r1 := mustReserve(t, l, acme, Amount{Tokens: 100})
		if got := r1.Deadline(); !got.Equal(t0.Add(time.Minute)) {
			t.Errorf("deadline %v", got)
		}
		if _, err := l.Reserve(ctx, acme, Amount{Tokens: 1}); refused(t, err).Used != 100 {
			t.Errorf("used %d", refused(t, err).Used)
		}
		clk.Add(59 * time.Second)
		if _, err := l.Reserve(ctx, acme, Amount{Tokens: 1}); err == nil {
			t.Fatal("granted before the reservation expired")
		}
		clk.Add(2 * time.Second)
		if st, err := l.Check(ctx, acme); err != nil || st.Soft {
			t.Fatalf("after expiry: %+v %v", st, err)
		}
		mustReserve(t, l, acme, Amount{Tokens: 60})
		// Committing the expired reservation adds only the actual usage.
		mustCommit(t, l, r1, Amount{Tokens: 10})
		if u := usageOf(t, l, acme, TokensPerDay); u.Committed != 10 || u.Reserved != 60 || u.Remaining != 30 {
			t.Errorf("after committing the expired reservation: %+v", u)
		}
		mustReserve(t, l, acme, Amount{Tokens: 30})
		if _, err := l.Reserve(ctx, acme, Amount{Tokens: 1}); refused(t, err).Used != 100 {
			t.Errorf("used %d", refused(t, err).Used)
		}
	})
}

func TestRolloverUTC(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		clk := newClock(time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC))
		st := k.open(t)
		p := Policy{Default: Limits{TokensPerDay: i64(100), NanoEURPerMonth: i64(1000)}}
		// A lease longer than the minute left: the rollover comes first.
		l := New(p, st, Options{Now: clk.Now, ReservationTTL: 2 * time.Minute})
		defer l.Close()

		r1 := mustReserve(t, l, acme, Amount{Tokens: 100, NanoEUR: 500})
		_, err := l.Reserve(ctx, acme, Amount{Tokens: 1})
		wantExceeded(t, refused(t, err), ExceededError{Account: acme, Scope: "tenant", Cap: TokensPerDay,
			Period: "2026-11-30", Limit: 100, Used: 100, Requested: 1, RetryAfter: time.Minute})
		_, err = l.Reserve(ctx, acme, Amount{NanoEUR: 501})
		wantExceeded(t, refused(t, err), ExceededError{Account: acme, Scope: "tenant", Cap: EURPerMonth,
			Period: "2026-11", Limit: 1000, Used: 500, Requested: 501, RetryAfter: time.Minute})
		if msg := err.Error(); msg != `tenant "acme" has 0.0000005 EUR left of its eur_per_month cap (0.000001 EUR) for 2026-11, less than this call may use (0.000000501 EUR: its input and output allowance, max_tokens or the configured default); it resets in 1m` {
			t.Errorf("message %q", msg)
		}

		clk.Set(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
		mustReserve(t, l, acme, Amount{Tokens: 100, NanoEUR: 1000})
		// r1 commits into the periods it was reserved in.
		mustCommit(t, l, r1, Amount{Tokens: 80, NanoEUR: 400})
		us, err := l.Usage(ctx, acme)
		if err != nil {
			t.Fatal(err)
		}
		want := []CapUsage{
			{Cap: TokensPerDay, Period: "2026-12-01", Unit: UnitTokens, Limit: 100, Reserved: 100, Soft: true},
			{Cap: EURPerMonth, Period: "2026-12", Unit: UnitNanoEUR, Limit: 1000, Reserved: 1000, Soft: true},
		}
		if len(us) != 2 || us[0] != want[0] || us[1] != want[1] {
			t.Errorf("usage in December:\n got %+v\nwant %+v", us, want)
		}
		for _, c := range []struct {
			cap    Cap
			period string
			want   int64
		}{
			{TokensPerDay, "2026-11-30", 80}, {TokensPerMonth, "2026-11", 80}, {EURPerMonth, "2026-11", 400},
			{TokensPerDay, "2026-12-01", 0}, {EURPerMonth, "2026-12", 0},
		} {
			if got := committedIn(t, st, acme, false, c.cap, c.period); got != c.want {
				t.Errorf("%s %s committed %d, want %d", c.cap, c.period, got, c.want)
			}
		}
	})
}

func TestRolloverParis(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no tzdata:", err)
	}
	forEachStore(t, func(t *testing.T, k storeKind) {
		clk := newClock(time.Date(2026, 11, 30, 22, 59, 30, 0, time.UTC)) // 23:59:30 in Paris
		l := newLedger(t, k, Policy{Default: Limits{TokensPerDay: i64(10)}, Location: paris}, Options{Now: clk.Now})
		mustReserve(t, l, acme, Amount{Tokens: 10})
		_, err := l.Reserve(ctx, acme, Amount{Tokens: 1})
		wantExceeded(t, refused(t, err), ExceededError{Account: acme, Scope: "tenant", Cap: TokensPerDay,
			Period: "2026-11-30", Limit: 10, Used: 10, Requested: 1, RetryAfter: 30 * time.Second})
		clk.Set(time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)) // midnight in Paris, still the 30th in UTC
		mustReserve(t, l, acme, Amount{Tokens: 10})
		if u := usageOf(t, l, acme, TokensPerDay); u.Period != "2026-12-01" || u.Reserved != 10 {
			t.Errorf("after Paris midnight: %+v", u)
		}
	})
}

func TestRetryAfterAcrossDST(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no tzdata:", err)
	}
	l := New(Policy{Default: Limits{TokensPerDay: i64(0), TokensPerMonth: i64(1_000_000)}, Location: paris},
		embeddedKind().open(t), Options{})
	defer l.Close()
	for _, tt := range []struct {
		name   string
		now    time.Time
		cap    Cap
		period string
		want   time.Duration
	}{
		{"autumn day has 25h", time.Date(2026, 10, 25, 0, 0, 0, 0, paris), TokensPerDay, "2026-10-25", 25 * time.Hour},
		{"spring day has 23h", time.Date(2026, 3, 29, 0, 0, 0, 0, paris), TokensPerDay, "2026-03-29", 23 * time.Hour},
		{"after the autumn switch", time.Date(2026, 10, 25, 12, 0, 0, 0, paris), TokensPerDay, "2026-10-25", 12 * time.Hour},
		{"month end in winter time", time.Date(2026, 10, 31, 12, 0, 0, 0, paris), TokensPerMonth, "2026-10", 12 * time.Hour},
		{"October from before the switch", time.Date(2026, 10, 1, 0, 0, 0, 0, paris), TokensPerMonth, "2026-10", 31*24*time.Hour + time.Hour},
	} {
		now := tt.now
		l.now = func() time.Time { return now }
		amt := Amount{Tokens: 1}
		if tt.cap == TokensPerMonth {
			amt.Tokens = 2_000_000
			l.def.limit[ciTokDay] = noLimit
		} else {
			l.def.limit[ciTokDay] = 0
		}
		_, err := l.Reserve(ctx, acme, amt)
		e := refused(t, err)
		if e.Cap != tt.cap || e.Period != tt.period || e.RetryAfter != tt.want {
			t.Errorf("%s: %s %s RetryAfter %v, want %s %s %v", tt.name, e.Cap, e.Period, e.RetryAfter, tt.cap, tt.period, tt.want)
		}
	}
}

func TestNoCapCostsNoIO(t *testing.T) {
	cs := &countingStore{Store: embeddedKind().open(t)}
	p := Policy{Tenants: map[string]TenantPolicy{"capped": {Limits: Limits{TokensPerDay: i64(100)}}}}
	l := New(p, cs, Options{Now: newClock(t0).Now})
	defer l.Close()
	free := Account{Tenant: "free", Agent: "bot"}

	if st, err := l.Check(ctx, free); err != nil || st.Soft || st.Exceeded != nil {
		t.Fatalf("Check: %+v %v", st, err)
	}
	r := mustReserve(t, l, free, Amount{Tokens: 1_000_000, NanoEUR: 5})
	if us, err := l.Usage(ctx, free); err != nil || len(us) != 0 {
		t.Fatalf("Usage: %+v %v", us, err)
	}
	if n := cs.calls.Load(); n != 0 {
		t.Fatalf("%d store calls for an account with no cap, want 0", n)
	}
	mustCommit(t, l, r, Amount{Tokens: 1_000_000, NanoEUR: 5})
	if n := cs.calls.Load(); n != 1 {
		t.Fatalf("%d store calls after the commit, want 1", n)
	}
	// The usage is tracked for the tenant and the agent anyway.
	for _, agent := range []bool{false, true} {
		if got := committedIn(t, cs.Store, free, agent, TokensPerDay, "2026-11-30"); got != 1_000_000 {
			t.Errorf("agent=%v tokens committed %d", agent, got)
		}
		if got := committedIn(t, cs.Store, free, agent, EURPerMonth, "2026-11"); got != 5 {
			t.Errorf("agent=%v nano-euros committed %d", agent, got)
		}
	}
	r = mustReserve(t, l, free, Amount{Tokens: 1})
	if err := l.Release(ctx, r); err != nil {
		t.Fatal(err)
	}
	if n := cs.calls.Load(); n != 1 { // committedIn reads the inner store
		t.Errorf("%d store calls, want 1", n)
	}
	// A capped tenant's Check reads the store once.
	if _, err := l.Check(ctx, Account{Tenant: "capped"}); err != nil {
		t.Fatal(err)
	}
	if n := cs.calls.Load(); n != 2 {
		t.Errorf("%d store calls, want 2", n)
	}
}

func TestPolicyOverrides(t *testing.T) {
	p := Policy{
		Default: Limits{TokensPerDay: i64(100), TokensPerMonth: i64(1000)},
		Tenants: map[string]TenantPolicy{"acme": {
			Limits: Limits{TokensPerMonth: i64(500), NanoEURPerMonth: i64(-5)},
			Agents: map[string]Limits{"bot": {TokensPerDay: i64(10)}},
		}},
	}
	l := newLedger(t, embeddedKind(), p, Options{Now: newClock(t0).Now})
	limits := func(a Account) map[Cap]int64 {
		us, err := l.Usage(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		m := map[Cap]int64{}
		for _, u := range us {
			m[u.Cap] = u.Limit
		}
		return m
	}
	check := func(a Account, want map[Cap]int64) {
		t.Helper()
		got := limits(a)
		if len(got) != len(want) {
			t.Errorf("%v caps %v, want %v", a, got, want)
			return
		}
		for c, v := range want {
			if got[c] != v {
				t.Errorf("%v caps %v, want %v", a, got, want)
			}
		}
	}
	// nil fields inherit Default; a negative cap counts as 0.
	check(acme, map[Cap]int64{TokensPerDay: 100, TokensPerMonth: 500, EURPerMonth: 0})
	check(acBot, map[Cap]int64{TokensPerDay: 10}) // agents do not inherit Default
	check(Account{Tenant: "acme", Agent: "other"}, map[Cap]int64{})
	check(Account{Tenant: "zeta"}, map[Cap]int64{TokensPerDay: 100, TokensPerMonth: 1000})

	// An agent without caps of its own is held to its tenant's.
	other := Account{Tenant: "acme", Agent: "other"}
	_, err := l.Reserve(ctx, other, Amount{Tokens: 1, NanoEUR: 1})
	if e := refused(t, err); e.Scope != "tenant" || e.Cap != EURPerMonth || e.Limit != 0 {
		t.Errorf("%+v", e)
	}
	// Mutating the policy after New changes nothing.
	p.Tenants["acme"].Agents["bot"] = Limits{}
	check(acBot, map[Cap]int64{TokensPerDay: 10})
}

// TestConcurrentExactlyN: 64 goroutines race for a cap that fits exactly N
// reservations; exactly N are granted, all others refused with
// *ExceededError, and committed equals the cap after the commits.
func TestConcurrentExactlyN(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		const n, each = 100, 10
		p := Policy{Default: Limits{TokensPerDay: i64(n * each)}}
		l1 := newLedger(t, k, p, Options{Now: newClock(t0).Now})
		concurrentExactlyN(t, []*Ledger{l1}, n, each)
	})
}

func concurrentExactlyN(t *testing.T, ls []*Ledger, n, each int64) {
	t.Helper()
	const goroutines, attempts = 64, 5
	var granted, denied atomic.Int64
	var mu sync.Mutex
	var rs []*Reservation
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*attempts)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(l *Ledger) {
			defer wg.Done()
			for i := 0; i < attempts; i++ {
				r, err := l.Reserve(ctx, acme, Amount{Tokens: each})
				var e *ExceededError
				switch {
				case err == nil:
					granted.Add(1)
					mu.Lock()
					rs = append(rs, r)
					mu.Unlock()
				case errors.As(err, &e):
					denied.Add(1)
				default:
					errs <- err
				}
			}
		}(ls[g%len(ls)])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if granted.Load() != n || denied.Load() != goroutines*attempts-n {
		t.Fatalf("granted %d, denied %d; want exactly %d granted", granted.Load(), denied.Load(), n)
	}
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ls[i%len(ls)].Commit(ctx, r, Amount{Tokens: each}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, l := range ls {
		u := usageOf(t, l, acme, TokensPerDay)
		if u.Committed != n*each || u.Reserved != 0 || u.Committed > u.Limit {
			t.Errorf("after commits: %+v, want committed %d = cap", u, n*each)
		}
	}
}

// TestCommitIgnoresCancellation: a client that disconnected (its context
// cancelled) is still charged.
func TestCommitIgnoresCancellation(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		l := newLedger(t, k, Policy{Default: Limits{TokensPerDay: i64(100)}}, Options{Now: newClock(t0).Now})
		r1 := mustReserve(t, l, acme, Amount{Tokens: 40})
		r2 := mustReserve(t, l, acme, Amount{Tokens: 40})
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := l.Commit(cctx, r1, Amount{Tokens: 25}); err != nil {
			t.Fatalf("Commit with a cancelled context: %v", err)
		}
		if err := l.Release(cctx, r2); err != nil {
			t.Fatalf("Release with a cancelled context: %v", err)
		}
		if u := usageOf(t, l, acme, TokensPerDay); u.Committed != 25 || u.Reserved != 0 {
			t.Errorf("%+v, want committed 25, reserved 0", u)
		}
	})
}
