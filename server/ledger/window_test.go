package ledger

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWindowAdmitsExactlyTheCap: tokens_per_minute admits exactly its cap
// in a window, refuses the next token, says when it admits it (whole
// seconds, rounded up) and admits again once the slots aged out.
func TestWindowAdmitsExactlyTheCap(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		clk := newClock(t0)
		l := newLedger(t, k, Policy{Default: Limits{TokensPerMinute: i64(100)}}, Options{Now: clk.Now})

		r := mustReserve(t, l, acme, Amount{Tokens: 40})
		if got, want := r.Rate(), (RateState{TokensLimit: 100, TokensRemaining: 60, RequestsLimit: -1}); got != want {
			t.Errorf("Rate after the first reservation %+v, want %+v", got, want)
		}
		mustCommit(t, l, r, Amount{Tokens: 40})
		clk.Add(10 * time.Second)
		r = mustReserve(t, l, acme, Amount{Tokens: 60}) // exactly the cap
		if got := r.Rate(); got.TokensRemaining != 0 || got.TokensLimit != 100 {
			t.Errorf("Rate at the cap %+v", got)
		}
		mustCommit(t, l, r, Amount{Tokens: 60})

		clk.Add(10*time.Second + 300*time.Millisecond) // t0+20.3s
		_, err := l.Reserve(ctx, acme, Amount{Tokens: 1})
		e := refused(t, err)
		// The 40 tokens of t0's second leave the window at t0+61s.
		wantExceeded(t, e, ExceededError{Account: acme, Scope: "tenant", Cap: TokensPerMinute, Limit: 100, Used: 100,
			Requested: 1, RetryAfter: 41 * time.Second, Rate: RateState{TokensLimit: 100, TokensRemaining: 0, RequestsLimit: -1}})
		if !e.PerMinute() {
			t.Error("PerMinute() false for tokens_per_minute")
		}
		if got, want := e.Error(), `tenant "acme" reached its tokens_per_minute cap (100 tokens) in the last 60 seconds; retry in 41s`; got != want {
			t.Errorf("message\n got %s\nwant %s", got, want)
		}
		// 41 tokens need the second slot gone too: t0+71s.
		_, err = l.Reserve(ctx, acme, Amount{Tokens: 41})
		if e := refused(t, err); e.RetryAfter != 51*time.Second || e.ByReservations {
			t.Errorf("41 tokens: %+v, want RetryAfter 51s", e)
		}
		// Check refuses before any reservation, with the same wait.
		st, err := l.Check(ctx, acme)
		if e := refused(t, err); e.Cap != TokensPerMinute || e.RetryAfter != 41*time.Second || e != st.Exceeded {
			t.Errorf("Check: %+v", e)
		}
		if st.Soft {
			t.Error("a per-minute cap reached made the state soft")
		}
		if st.Rate != (RateState{TokensLimit: 100, TokensRemaining: 0, RequestsLimit: -1}) {
			t.Errorf("Check's Rate %+v", st.Rate)
		}

		clk.Set(t0.Add(60*time.Second + 999*time.Millisecond)) // still in t0+60's second: t0's slot counts
		if _, err := l.Reserve(ctx, acme, Amount{Tokens: 1}); refused(t, err).RetryAfter != time.Second {
			t.Errorf("at t0+60.999s: %v, want a refusal for 1s", err)
		}
		clk.Set(t0.Add(61 * time.Second))
		mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 40}), Amount{Tokens: 40})
		if _, err := l.Reserve(ctx, acme, Amount{Tokens: 1}); refused(t, err).RetryAfter != 10*time.Second {
			t.Errorf("at t0+61s after 40 more: %v, want a refusal for 10s", err)
		}
		clk.Set(t0.Add(71 * time.Second))
		mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 60}), Amount{Tokens: 60})
		if u := usageOf(t, l, acme, TokensPerMinute); u != (CapUsage{Cap: TokensPerMinute, Unit: UnitTokens, Limit: 100, Committed: 100, Soft: true}) {
			t.Errorf("usage %+v", u)
		}
	})
}

// TestWindowCommitReconcilesAndReleaseFrees: the window holds the
// reservation until the commit, which counts the actual usage (less used,
// more room); a release frees the hold and counts nothing; requests are
// counted on commit only.
func TestWindowCommitReconcilesAndReleaseFrees(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		clk := newClock(t0)
		p := Policy{Default: Limits{TokensPerMinute: i64(100), RequestsPerMinute: i64(2)}}
		l := newLedger(t, k, p, Options{Now: clk.Now})

		r1 := mustReserve(t, l, acme, Amount{Tokens: 80})
		if got, want := r1.Rate(), (RateState{TokensLimit: 100, TokensRemaining: 20, RequestsLimit: 2, RequestsRemaining: 1}); got != want {
			t.Errorf("Rate %+v, want %+v", got, want)
		}
		_, err := l.Reserve(ctx, acme, Amount{Tokens: 80})
		e := refused(t, err)
		// The hold leaves the window at the latest when its commit's slot
		// (the second it was born in) ages out, 61 s on: a caller that
		// waits Retry-After is not refused again.
		if e.Cap != TokensPerMinute || !e.ByReservations || e.Reserved != 80 || e.RetryAfter != 61*time.Second {
			t.Errorf("held by a reservation: %+v", e)
		}
		if msg := e.Error(); !strings.Contains(msg, "80 tokens of it are held by calls in flight; retry in 61s") {
			t.Errorf("message %q", msg)
		}
		mustCommit(t, l, r1, Amount{Tokens: 20}) // it used less
		r2 := mustReserve(t, l, acme, Amount{Tokens: 80})
		// Two requests in the window (one committed, one held): the third waits.
		_, err = l.Reserve(ctx, acme, Amount{Tokens: 0})
		e = refused(t, err)
		wantExceeded(t, e, ExceededError{Account: acme, Scope: "tenant", Cap: RequestsPerMinute, Limit: 2, Used: 2,
			Requested: 1, RetryAfter: 61 * time.Second, ByReservations: true, Reserved: 1,
			Rate: RateState{TokensLimit: 100, TokensRemaining: 0, RequestsLimit: 2, RequestsRemaining: 0}})
		if u := usageOf(t, l, acme, RequestsPerMinute); u != (CapUsage{Cap: RequestsPerMinute, Unit: UnitRequests, Limit: 2, Committed: 1, Reserved: 1, Soft: true}) {
			t.Errorf("requests usage %+v", u)
		}
		if err := l.Release(ctx, r2); err != nil {
			t.Fatal(err)
		}
		if u := usageOf(t, l, acme, RequestsPerMinute); u.Committed != 1 || u.Reserved != 0 {
			t.Errorf("a released call counted: %+v", u)
		}
		if u := usageOf(t, l, acme, TokensPerMinute); u.Committed != 20 || u.Reserved != 0 || u.Remaining != 80 {
			t.Errorf("tokens after the release %+v", u)
		}
		mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 80}), Amount{Tokens: 0})
		_, err = l.Reserve(ctx, acme, Amount{})
		if e := refused(t, err); e.Cap != RequestsPerMinute || e.ByReservations || e.Used != 2 || e.RetryAfter != 61*time.Second {
			t.Errorf("two requests committed: %+v", e)
		}
	})
}

// TestWindowCallBiggerThanCap: a call whose own amount passes the cap is
// refused at once, saying so, with no wait.
func TestWindowCallBiggerThanCap(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		p := Policy{Tenants: map[string]TenantPolicy{"acme": {Agents: map[string]Limits{"bot": {TokensPerMinute: i64(100), RequestsPerMinute: i64(0)}}}}}
		l := newLedger(t, k, p, Options{Now: newClock(t0).Now})
		_, err := l.Reserve(ctx, acBot, Amount{Tokens: 101})
		e := refused(t, err)
		if e.Scope != "agent" || e.Cap != TokensPerMinute || e.Requested != 101 || e.RetryAfter != 0 {
			t.Errorf("%+v", e)
		}
		if got, want := e.Error(), `this call may use 101 tokens (its input and output allowance), more than agent "bot" of tenant "acme"'s whole tokens_per_minute cap (100 tokens): lower max_tokens or send less`; got != want {
			t.Errorf("message\n got %s\nwant %s", got, want)
		}
		_, err = l.Reserve(ctx, acBot, Amount{Tokens: 100})
		if e := refused(t, err); e.Cap != RequestsPerMinute || e.RetryAfter != 0 || !strings.Contains(e.Error(), "requests_per_minute cap is 0 requests: it admits no call") {
			t.Errorf("%+v: %v", e, e)
		}
	})
}

// TestPolicyScopes: a policy's caps are counted per tenant, per agent or
// per policy, besides the tenant's own; a name the ledger does not know is
// ignored; the refusal names the policy.
func TestPolicyScopes(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		p := Policy{
			Default: Limits{TokensPerDay: i64(1000)},
			Policies: map[string]PolicyLimits{
				"pt": {Limits: Limits{TokensPerMinute: i64(100)}},
				"pa": {Limits: Limits{RequestsPerMinute: i64(1)}, Per: PerAgent},
				"pp": {Limits: Limits{TokensPerDay: i64(50)}, Per: PerPolicy},
			},
		}
		st := k.open(t)
		l := New(p, st, Options{Now: newClock(t0).Now})
		t.Cleanup(func() { l.Close() })
		with := func(a Account, pols ...string) Account { a.Policies = pols; return a }
		bot2 := Account{Tenant: "acme", Agent: "bot2"}
		zeta := Account{Tenant: "zeta", Agent: "bot"}

		// Per tenant: two agents of acme share the bucket, zeta has its own.
		mustCommit(t, l, mustReserve(t, l, with(acBot, "pt", "nope"), Amount{Tokens: 60}), Amount{Tokens: 60})
		_, err := l.Reserve(ctx, with(bot2, "pt"), Amount{Tokens: 41})
		e := refused(t, err)
		wantExceeded(t, e, ExceededError{Account: with(bot2, "pt"), Scope: "policy", Policy: "pt", Per: PerTenant, Cap: TokensPerMinute,
			Limit: 100, Used: 60, Requested: 41, RetryAfter: 61 * time.Second, Rate: RateState{TokensLimit: 100, TokensRemaining: 40, RequestsLimit: -1}})
		if got, want := e.Error(), `policy "pt" for tenant "acme" has 40 tokens left of its tokens_per_minute cap (100 tokens) in the last 60 seconds, less than this call may use (41 tokens: its input and output allowance, max_tokens or the configured default); retry in 61s`; got != want {
			t.Errorf("message\n got %s\nwant %s", got, want)
		}
		mustCommit(t, l, mustReserve(t, l, with(zeta, "pt"), Amount{Tokens: 100}), Amount{Tokens: 100})
		// Without the policy, acme's agent is not held to it.
		mustCommit(t, l, mustReserve(t, l, bot2, Amount{Tokens: 41}), Amount{Tokens: 41})
		if b := committedIn(t, st, acme, false, TokensPerDay, "2026-11-30"); b != 101 {
			t.Errorf("tenant's own day bucket %d, want 101", b)
		}

		// Per agent: one call a minute for each agent; the tenant's own
		// calls share the tenant's bucket.
		mustCommit(t, l, mustReserve(t, l, with(acBot, "pa"), Amount{}), Amount{})
		_, err = l.Reserve(ctx, with(acBot, "pa"), Amount{})
		if e := refused(t, err); e.Scope != "policy" || e.Policy != "pa" || e.Per != PerAgent || e.Cap != RequestsPerMinute ||
			!strings.HasPrefix(e.Error(), `policy "pa" for agent "bot" of tenant "acme" reached its requests_per_minute cap (1 request)`) {
			t.Errorf("%+v: %v", e, e)
		}
		mustCommit(t, l, mustReserve(t, l, with(bot2, "pa"), Amount{}), Amount{})
		mustCommit(t, l, mustReserve(t, l, with(acme, "pa"), Amount{}), Amount{})
		_, err = l.Reserve(ctx, with(acme, "pa"), Amount{})
		if e := refused(t, err); e.Policy != "pa" || !strings.HasPrefix(e.Error(), `policy "pa" for tenant "acme" reached`) {
			t.Errorf("%+v: %v", e, e)
		}

		// Per policy: every tenant's calls in one bucket, a durable day cap.
		mustCommit(t, l, mustReserve(t, l, with(acBot, "pp"), Amount{Tokens: 30}), Amount{Tokens: 30})
		_, err = l.Reserve(ctx, with(zeta, "pp", "pp"), Amount{Tokens: 21})
		if e := refused(t, err); e.Policy != "pp" || e.Per != PerPolicy || e.Cap != TokensPerDay || e.Used != 30 || e.Period != "2026-11-30" ||
			!strings.HasPrefix(e.Error(), `policy "pp" has 20 tokens left of its tokens_per_day cap (50 tokens) for 2026-11-30`) {
			t.Errorf("%+v: %v", e, e)
		}
		// Listed twice, held once.
		mustCommit(t, l, mustReserve(t, l, with(zeta, "pp", "pp"), Amount{Tokens: 20}), Amount{Tokens: 20})
		b, err := st.balances(ctx, []string{policyBucketID("pp", PerPolicy, zeta, TokensPerDay, "2026-11-30")}, t0)
		if err != nil || b[0].committed != 50 || b[0].reserved != 0 {
			t.Errorf("policy bucket %+v %v, want 50 committed", b, err)
		}
		// Check covers the policies too.
		if _, err := l.Check(ctx, with(acme, "pp")); refused(t, err).Policy != "pp" {
			t.Errorf("Check: %v", err)
		}
		if s, err := l.Check(ctx, with(acme, "nope")); err != nil || s.Exceeded != nil {
			t.Errorf("Check with an unknown policy: %+v %v", s, err)
		}
	})
}

func TestPolicyBucketIDs(t *testing.T) {
	a := Account{Tenant: "ac:me", Agent: "b%t"}
	for _, tt := range []struct {
		per    Per
		a      Account
		period string
		want   string
	}{
		{PerTenant, a, "2026-11-30", "p:te%3Aam:t:ac%3Ame:tokens_per_day:2026-11-30"},
		{PerAgent, a, "", "p:te%3Aam:a:ac%3Ame:b%25t:tokens_per_day"},
		{PerAgent, Account{Tenant: "acme"}, "", "p:te%3Aam:t:acme:tokens_per_day"},
		{PerPolicy, a, "2026-11", "p:te%3Aam:tokens_per_day:2026-11"},
	} {
		if got := policyBucketID("te:am", tt.per, tt.a, TokensPerDay, tt.period); got != tt.want {
			t.Errorf("%s %v %q: %s, want %s", tt.per, tt.a, tt.period, got, tt.want)
		}
	}
	if got := bucketID(acBot, true, TokensPerMinute, ""); got != "a:acme:bot:tokens_per_minute" || !isWindowBucket(got) {
		t.Errorf("window bucket %q", got)
	}
	if isWindowBucket(bucketID(acme, false, TokensPerDay, "2026-11-30")) {
		t.Error("a day bucket taken for a window")
	}
}

// TestWindowRateAcrossScopes: the Rate is the cap of each kind with the
// least remaining, whichever scope it is in.
func TestWindowRateAcrossScopes(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		p := Policy{
			Default: Limits{TokensPerMinute: i64(1000), RequestsPerMinute: i64(3)},
			Tenants: map[string]TenantPolicy{"acme": {Agents: map[string]Limits{"bot": {TokensPerMinute: i64(500), RequestsPerMinute: i64(10)}}}},
		}
		l := newLedger(t, k, p, Options{Now: newClock(t0).Now})
		mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 600}), Amount{Tokens: 600})
		r := mustReserve(t, l, acBot, Amount{Tokens: 100})
		// tenant: 1000-700 = 300 left, 3-2 = 1; agent: 500-100 = 400, 10-1 = 9.
		if got, want := r.Rate(), (RateState{TokensLimit: 1000, TokensRemaining: 300, RequestsLimit: 3, RequestsRemaining: 1}); got != want {
			t.Errorf("Rate %+v, want %+v", got, want)
		}
		st, err := l.Check(ctx, acBot)
		if err != nil || st.Rate != (RateState{TokensLimit: 1000, TokensRemaining: 300, RequestsLimit: 3, RequestsRemaining: 1}) {
			t.Errorf("Check %+v %v", st, err)
		}
		if st, err := l.Check(ctx, Account{Tenant: "free", Policies: []string{"x"}}); err != nil || st.Rate != (RateState{TokensLimit: 1000, TokensRemaining: 1000, RequestsLimit: 3, RequestsRemaining: 3}) {
			t.Errorf("fresh tenant %+v %v", st, err)
		}
		l2 := newLedger(t, k, Policy{}, Options{Now: newClock(t0).Now})
		if st, err := l2.Check(ctx, acme); err != nil || st.Rate != NoRate {
			t.Errorf("no cap: %+v %v", st, err)
		}
		if r := mustReserve(t, l2, acme, Amount{Tokens: 5}); r.Rate() != NoRate {
			t.Errorf("no cap: Rate %+v", r.Rate())
		}
	})
}

// TestUsageListsPerMinuteCaps: the admin view lists the per-minute caps
// first, with no period and their units.
func TestUsageListsPerMinuteCaps(t *testing.T) {
	p := Policy{Default: Limits{TokensPerMinute: i64(100), RequestsPerMinute: i64(5), TokensPerDay: i64(1000), NanoEURPerMonth: i64(10)},
		Tenants: map[string]TenantPolicy{"acme": {Limits: Limits{RequestsPerMinute: i64(7)}}}}
	l := newLedger(t, embeddedKind(), p, Options{Now: newClock(t0).Now})
	mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 10, NanoEUR: 1}), Amount{Tokens: 8, NanoEUR: 1})
	us, err := l.Usage(ctx, acme)
	if err != nil {
		t.Fatal(err)
	}
	want := []CapUsage{
		{Cap: TokensPerMinute, Unit: UnitTokens, Limit: 100, Committed: 8, Remaining: 92},
		{Cap: RequestsPerMinute, Unit: UnitRequests, Limit: 7, Committed: 1, Remaining: 6},
		{Cap: TokensPerDay, Period: "2026-11-30", Unit: UnitTokens, Limit: 1000, Committed: 8, Remaining: 992},
		{Cap: EURPerMonth, Period: "2026-11", Unit: UnitNanoEUR, Limit: 10, Committed: 1, Remaining: 9},
	}
	if len(us) != len(want) {
		t.Fatalf("usage %+v, want %+v", us, want)
	}
	for i := range want {
		if us[i] != want[i] {
			t.Errorf("usage[%d] %+v, want %+v", i, us[i], want[i])
		}
	}
}

// TestEmbeddedRestartForgetsWindows: the embedded store keeps windows in
// memory only: a restart forgets the last minute but not the day's usage.
func TestEmbeddedRestartForgetsWindows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	p := Policy{Default: Limits{TokensPerMinute: i64(100), TokensPerDay: i64(150)}}
	clk := newClock(t0)
	s, err := OpenEmbedded(path)
	if err != nil {
		t.Fatal(err)
	}
	l := New(p, s, Options{Now: clk.Now})
	mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 100}), Amount{Tokens: 100})
	if _, err := l.Reserve(ctx, acme, Amount{Tokens: 50}); refused(t, err).Cap != TokensPerMinute {
		t.Fatalf("before the restart: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenEmbedded(path)
	if err != nil {
		t.Fatal(err)
	}
	l = New(p, s, Options{Now: clk.Now})
	defer l.Close()
	mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 50}), Amount{Tokens: 50})
	if _, err := l.Reserve(ctx, acme, Amount{Tokens: 1}); refused(t, err).Cap != TokensPerDay {
		t.Errorf("after the restart: %v, want the day cap", err)
	}
}

// TestEmbeddedWindowsNotJournaledAndEvicted: window commits write no
// journal delta and idle windows are evicted.
func TestEmbeddedWindowsNotJournaledAndEvicted(t *testing.T) {
	s := openManual(t, filepath.Join(t.TempDir(), "ledger.db"), true)
	l := New(Policy{Default: Limits{TokensPerMinute: i64(100)}}, s, Options{Now: newClock(t0).Now})
	defer l.Close()
	mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 10}), Amount{Tokens: 10})
	s.mu.Lock()
	_, pending := s.pending[bucketID(acme, false, TokensPerMinute, "")]
	_, cached := s.buckets[bucketID(acme, false, TokensPerMinute, "")]
	nwin := len(s.windows)
	s.mu.Unlock()
	if pending || cached || nwin != 1 {
		t.Errorf("window journaled %v, cached as a durable bucket %v, windows %d", pending, cached, nwin)
	}
	r := mustReserve(t, l, acme, Amount{Tokens: 10})
	s.evict(t0.Add(time.Hour).Unix())
	if s.mu.Lock(); len(s.windows) != 1 {
		t.Error("a window holding a reservation was evicted")
	}
	s.mu.Unlock()
	mustCommit(t, l, r, Amount{Tokens: 10})
	s.evict(t0.Add(windowLife).Unix())
	if s.mu.Lock(); len(s.windows) != 1 {
		t.Error("a window evicted before windowLife")
	}
	s.mu.Unlock()
	s.evict(t0.Add(windowLife + time.Second).Unix())
	if s.mu.Lock(); len(s.windows) != 0 {
		t.Error("an idle window was not evicted")
	}
	s.mu.Unlock()
}

// TestRedisWindowKeys: a window's hash holds its slots, pruned as they age
// out, and its keys expire two minutes after their last use.
func TestRedisWindowKeys(t *testing.T) {
	srv := startRedis(t)
	if _, err := InitRedis(ctx, srv.url); err != nil {
		t.Fatal(err)
	}
	clk := newClock(t0)
	l := New(Policy{Default: Limits{TokensPerMinute: i64(100)}}, srv.open(t), Options{Now: clk.Now})
	defer l.Close()
	mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 10}), Amount{Tokens: 9})
	clk.Add(30 * time.Second)
	mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 10}), Amount{Tokens: 7})
	c := rawClient(t, srv)
	key := keyPrefix + "b:t:acme:tokens_per_minute"
	s0, s30 := itoa(t0.Unix()), itoa(t0.Unix()+30)
	got, err := c.HGetAll(ctx, key).Result()
	if err != nil || len(got) != 5 || got["r"] != "0" || got["s"] != "16" || got[s0] != "9" || got[s30] != "7" || got["lo"] != itoa(t0.Unix()-30) {
		t.Errorf("window hash %v %v", got, err)
	}
	if ms, err := c.PTTL(ctx, key).Result(); err != nil || ms <= 0 || ms > windowLife {
		t.Errorf("TTL %v %v, want (0, %v]", ms, err, windowLife)
	}
	// The keys expire together: a commit moves the deadline set's TTL
	// with the hash's, or the hold of a call still in flight would stay
	// in "r" once the set is gone.
	held := mustReserve(t, l, acme, Amount{Tokens: 1})
	r := mustReserve(t, l, acme, Amount{Tokens: 1})
	time.Sleep(200 * time.Millisecond)
	mustCommit(t, l, r, Amount{Tokens: 1})
	bt, err1 := c.PTTL(ctx, key).Result()
	zt, err2 := c.PTTL(ctx, keyPrefix+"z:t:acme:tokens_per_minute").Result()
	if err1 != nil || err2 != nil || bt-zt > 100*time.Millisecond || zt <= 0 {
		t.Errorf("TTLs: hash %v, deadline set %v (%v %v)", bt, zt, err1, err2)
	}
	if err := l.Release(ctx, held); err != nil {
		t.Fatal(err)
	}

	clk.Add(31 * time.Second) // t0's slot ages out
	if u := usageOf(t, l, acme, TokensPerMinute); u.Committed != 8 || u.Reserved != 0 {
		t.Errorf("usage %+v, want 8 committed (7+1 in t0+30's slot)", u)
	}
	got, err = c.HGetAll(ctx, key).Result()
	if err != nil || len(got) != 4 || got["s"] != "8" || got[s30] != "8" || got[s0] != "" || got["lo"] != itoa(t0.Unix()+1) {
		t.Errorf("window hash after pruning %v %v", got, err)
	}
	clk.Add(10 * time.Minute) // a long idle time: every slot pruned at once
	if u := usageOf(t, l, acme, TokensPerMinute); u.Committed != 0 {
		t.Errorf("usage %+v, want 0", u)
	}
	if got, err := c.HGetAll(ctx, key).Result(); err != nil || len(got) != 3 || got["s"] != "0" {
		t.Errorf("window hash after a long idle time %v %v", got, err)
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestRedisTwoReplicasHoldAWindow: two ledgers on one Redis, 64
// goroutines, a fake clock moving on: no 60-second span of the admitted
// calls' reserve times ever holds more than the caps, and the windows do
// admit again as they move.
func TestRedisTwoReplicasHoldAWindow(t *testing.T) {
	t.Run("tokens", func(t *testing.T) { twoReplicasHoldAWindow(t, 1000, 1_000_000) })
	t.Run("requests", func(t *testing.T) { twoReplicasHoldAWindow(t, 1_000_000, 60) })
}

func twoReplicasHoldAWindow(t *testing.T, tpm, rpm int64) {
	srv := startRedis(t)
	if _, err := InitRedis(ctx, srv.url); err != nil {
		t.Fatal(err)
	}
	p := Policy{Default: Limits{TokensPerMinute: i64(tpm), RequestsPerMinute: i64(rpm)}}
	clk := newClock(t0)
	ls := []*Ledger{
		New(p, srv.open(t), Options{Now: clk.Now}),
		New(p, srv.open(t), Options{Now: clk.Now}),
	}
	for _, l := range ls {
		defer l.Close()
	}
	type admitted struct {
		at     time.Time
		tokens int64
	}
	var mu sync.Mutex
	var got []admitted
	var refusals int
	errs := make(chan error, 64)
	// In rounds: the clock moves between them (0.2 to 1.5 s), never
	// during one, so that reserve times are in the order Redis runs them,
	// as for replicas whose clocks agree; in each, 64 goroutines reserve
	// and commit at once.
	rnd := rand.New(rand.NewPCG(1, 7))
	for round := 0; round < 150 && len(errs) == 0; round++ {
		clk.Add(time.Duration(200+rnd.IntN(1300)) * time.Millisecond)
		var wg sync.WaitGroup
		for g := 0; g < 64; g++ {
			want := int64(1 + rnd.IntN(60))
			used := 1 + rnd.Int64N(want) // the upstream honours max_tokens
			wg.Add(1)
			go func(l *Ledger) {
				defer wg.Done()
				r, err := l.Reserve(ctx, acme, Amount{Tokens: want})
				var e *ExceededError
				if errors.As(err, &e) {
					if !e.PerMinute() || e.RetryAfter < time.Second || e.RetryAfter%time.Second != 0 {
						errs <- fmt.Errorf("refusal %+v", e)
					}
					mu.Lock()
					refusals++
					mu.Unlock()
					return
				}
				if err != nil {
					errs <- err
					return
				}
				if err := l.Commit(ctx, r, Amount{Tokens: used}); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				got = append(got, admitted{r.born, used})
				mu.Unlock()
			}(ls[g%2])
		}
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].at.Before(got[j].at) })
	span := got[len(got)-1].at.Sub(got[0].at)
	if span < 2*time.Minute || refusals == 0 {
		t.Fatalf("admitted %d calls over %v, %d refused: the test did not exercise the window", len(got), span, refusals)
	}
	// Every 60-second span starting at an admitted call.
	maxTok, maxReq := int64(0), int64(0)
	for i := range got {
		var tok, n int64
		for j := i; j < len(got) && got[j].at.Sub(got[i].at) < time.Minute; j++ {
			tok += got[j].tokens
			n++
		}
		maxTok, maxReq = max(maxTok, tok), max(maxReq, n)
	}
	if maxTok > tpm || maxReq > rpm {
		t.Errorf("a 60 s span held %d tokens and %d requests, caps %d and %d", maxTok, maxReq, tpm, rpm)
	}
	t.Logf("%d calls admitted over %v, %d refused; the fullest 60 s spans: %d tokens (cap %d), %d requests (cap %d)",
		len(got), span, refusals, maxTok, tpm, maxReq, rpm)
}
