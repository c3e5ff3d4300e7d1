package ledger

import (
	"testing"
	"time"
)

// TestAttack16RetryAfterHeldRequest: a per-minute refusal's RetryAfter is
// the time until the window admits the call (issue 16: "whole seconds
// until the window admits the call"). A call in flight holds its request
// on requests_per_minute; when it is served, its commit puts that request
// in the slot of its reservation's second, where it counts for 61 s. The
// wait computed for a refusal counts the hold as freed at its lease's end
// (30 s) instead: a caller that waits RetryAfter and retries is refused
// again, for the next 30 s.
func TestAttack16RetryAfterHeldRequest(t *testing.T) {
	forEachStore(t, func(t *testing.T, k storeKind) {
		clk := newClock(t0)
		l := newLedger(t, k, Policy{Default: Limits{RequestsPerMinute: i64(1)}}, Options{Now: clk.Now})
		r1 := mustReserve(t, l, acme, Amount{Tokens: 10}) // in flight from t0
		clk.Add(time.Second)
		_, err := l.Reserve(ctx, acme, Amount{Tokens: 10})
		e := refused(t, err)
		if e.RetryAfter <= 0 {
			t.Fatalf("RetryAfter %v", e.RetryAfter)
		}
		clk.Add(time.Second)
		mustCommit(t, l, r1, Amount{Tokens: 10}) // served: its request counts in t0's slot until t0+61s
		clk.Set(t0.Add(time.Second + e.RetryAfter))
		if _, err := l.Reserve(ctx, acme, Amount{Tokens: 10}); err != nil {
			t.Fatalf("refused again after waiting the RetryAfter (%v) of the first refusal: %v", e.RetryAfter, err)
		}
	})
}
