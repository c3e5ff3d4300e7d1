package ledger

import (
	"strings"
	"testing"
	"time"
)

// TestLeaseFreesDeadHolderOnly: a reservation is a lease of LeaseTTL. A
// ledger that dies (never renews) frees its hold once the lease ends; a live
// ledger renews it and keeps it for as long as the call runs.
func TestLeaseFreesDeadHolderOnly(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		clk := newClock(t0)
		l := newLedger(t, k, Policy{Default: Limits{TokensPerDay: i64(100)}}, Options{Now: clk.Now})
		live := mustReserve(t, l, acme, Amount{Tokens: 40})
		dead := mustReserve(t, l, acme, Amount{Tokens: 60})
		if got := dead.Deadline(); !got.Equal(t0.Add(LeaseTTL)) {
			t.Errorf("deadline %v, want now + LeaseTTL (%v)", got, LeaseTTL)
		}
		// The dead holder's reservation is no longer renewed by anyone.
		l.forget(dead)
		for i := 0; i < 3; i++ {
			clk.Add(LeaseRenewEvery)
			if err := l.renew(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// 3 × 10 s = the lease: the dead hold is gone, the live one stays.
		if u := usageOf(t, l, acme, TokensPerDay); u.Reserved != 40 || u.Remaining != 60 {
			t.Fatalf("after one lease: %+v; want only the renewed 40 held", u)
		}
		if got := live.Deadline(); !got.Equal(clk.Now().Add(LeaseTTL)) {
			t.Errorf("renewed deadline %v, want %v", got, clk.Now().Add(LeaseTTL))
		}
		// A call running ten leases long keeps its hold.
		for i := 0; i < 30; i++ {
			clk.Add(LeaseRenewEvery)
			if err := l.renew(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if u := usageOf(t, l, acme, TokensPerDay); u.Reserved != 40 {
			t.Fatalf("a live call's hold after 10 leases: %+v", u)
		}
		mustCommit(t, l, live, Amount{Tokens: 30})
		if u := usageOf(t, l, acme, TokensPerDay); u.Committed != 30 || u.Reserved != 0 {
			t.Fatalf("after commit: %+v", u)
		}
		if n := l.holding(); n != 0 {
			t.Errorf("%d reservations still renewed after commit", n)
		}
	})
}

// TestRetryAfterByReservations: a refusal caused by reservations (the cap
// would fit the call with nothing reserved) says when their leases end, not
// when the period resets; one caused by committed usage says the reset.
func TestRetryAfterByReservations(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		clk := newClock(t0)
		l := newLedger(t, k, Policy{Default: Limits{TokensPerDay: i64(100)}}, Options{Now: clk.Now})
		mustReserve(t, l, acme, Amount{Tokens: 30})
		clk.Add(5 * time.Second)
		mustReserve(t, l, acme, Amount{Tokens: 30})
		clk.Add(5 * time.Second)
		mustCommit(t, l, mustReserve(t, l, acme, Amount{Tokens: 30}), Amount{Tokens: 30})
		// committed 30, reserved 60 (leases end at t0+30s and t0+35s).

		// 40 fits once the first lease ends (30 freed: 30+30+40 = 100).
		_, err := l.Reserve(ctx, acme, Amount{Tokens: 40})
		e := refused(t, err)
		if !e.ByReservations || e.RetryAfter != 20*time.Second || e.Reserved != 60 {
			t.Errorf("40 tokens: %+v; want ByReservations, RetryAfter 20s, Reserved 60", e)
		}
		if msg := e.Error(); !strings.Contains(msg, "60 tokens of it are held by calls in flight") || !strings.Contains(msg, "within 20s") || strings.Contains(msg, "resets") {
			t.Errorf("message %q", msg)
		}
		// 70 needs both leases gone: the later one ends at t0+35s.
		_, err = l.Reserve(ctx, acme, Amount{Tokens: 70})
		if e := refused(t, err); !e.ByReservations || e.RetryAfter != 25*time.Second {
			t.Errorf("70 tokens: %+v; want RetryAfter 25s", e)
		}
		// 71 would not fit even with nothing reserved: the period's reset.
		_, err = l.Reserve(ctx, acme, Amount{Tokens: 71})
		if e := refused(t, err); e.ByReservations || e.RetryAfter != 3*time.Hour+12*time.Minute-10*time.Second {
			t.Errorf("71 tokens: %+v; want the day's rollover", e)
		}

		// Check, with the cap reached by reservations: the first lease's end.
		mustReserve(t, l, acme, Amount{Tokens: 10})
		_, err = l.Check(ctx, acme)
		if e := refused(t, err); !e.ByReservations || e.RetryAfter != 20*time.Second || e.Reserved != 70 {
			t.Errorf("Check: %+v; want ByReservations, RetryAfter 20s", e)
		}
		// Committed alone reaching the cap: the reset.
		l2 := newLedger(t, k, Policy{Default: Limits{TokensPerDay: i64(100)}}, Options{Now: clk.Now})
		mustCommit(t, l2, mustReserve(t, l2, acme, Amount{Tokens: 100}), Amount{Tokens: 100})
		_, err = l2.Check(ctx, acme)
		if e := refused(t, err); e.ByReservations || e.RetryAfter != 3*time.Hour+12*time.Minute-10*time.Second {
			t.Errorf("Check at the cap by commits: %+v", e)
		}
	})
}
