package metering

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/ledger"
)

// TestRefusalPerMinute: a per-minute cap's refusal is rate_limited with a
// Retry-After of whole seconds, never 0, and the x-ratelimit-* headers of
// its rate state; a call bigger than the whole per-minute cap has no
// Retry-After (it never fits) and keeps the ledger's message; a day cap
// stays budget_exceeded, with the headers only while a per-minute cap is
// in force.
func TestRefusalPerMinute(t *testing.T) {
	acct := ledger.Account{Tenant: "acme"}
	rate := ledger.RateState{TokensLimit: 100, TokensRemaining: 10, RequestsLimit: 5, RequestsRemaining: 2}
	for _, tc := range []struct {
		name   string
		ex     *ledger.ExceededError
		reason faults.Reason
		retry  int64
		header map[string]string
	}{
		{"tokens, 200ms", &ledger.ExceededError{Account: acct, Scope: "tenant", Cap: ledger.TokensPerMinute, Limit: 100, Used: 90, Requested: 20, RetryAfter: 200 * time.Millisecond, Rate: rate},
			faults.RateLimited, 1, map[string]string{HeaderLimitTokens: "100", HeaderRemainingTokens: "10", HeaderLimitRequests: "5", HeaderRemainingRequests: "2"}},
		{"requests, 12.1s", &ledger.ExceededError{Account: acct, Scope: "tenant", Cap: ledger.RequestsPerMinute, Limit: 5, Used: 5, Requested: 1, RetryAfter: 12100 * time.Millisecond, Rate: ledger.RateState{TokensLimit: -1, RequestsLimit: 5, RequestsRemaining: -3}},
			faults.RateLimited, 13, map[string]string{HeaderLimitRequests: "5", HeaderRemainingRequests: "0"}},
		{"bigger than the cap", &ledger.ExceededError{Account: acct, Scope: "tenant", Cap: ledger.TokensPerMinute, Limit: 100, Requested: 150, RetryAfter: 30 * time.Second, Rate: ledger.RateState{TokensLimit: 100, TokensRemaining: 100, RequestsLimit: -1}},
			faults.RateLimited, 0, map[string]string{HeaderLimitTokens: "100", HeaderRemainingTokens: "100"}},
		{"day cap", &ledger.ExceededError{Account: acct, Scope: "tenant", Cap: ledger.TokensPerDay, Limit: 100, Used: 100, RetryAfter: 3 * time.Hour, Rate: rate},
			faults.BudgetExceeded, 3 * 3600, map[string]string{HeaderLimitTokens: "100", HeaderRemainingTokens: "10", HeaderLimitRequests: "5", HeaderRemainingRequests: "2"}},
		{"day cap, no per-minute cap", &ledger.ExceededError{Account: acct, Scope: "tenant", Cap: ledger.TokensPerDay, Limit: 100, Used: 100, RetryAfter: 3 * time.Hour, Rate: ledger.NoRate},
			faults.BudgetExceeded, 3 * 3600, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fe *faults.Error
			if !errors.As(refusal(ledger.State{}, tc.ex), &fe) {
				t.Fatal("no fault")
			}
			if fe.Reason != tc.reason || fe.RetryAfterSeconds != tc.retry || fe.Message != tc.ex.Error() {
				t.Errorf("%s, Retry-After %d, %q; want %s, %d, the ledger's message %q", fe.Reason, fe.RetryAfterSeconds, fe.Message, tc.reason, tc.retry, tc.ex.Error())
			}
			if !maps.Equal(fe.Headers, tc.header) {
				t.Errorf("headers %v, want %v", fe.Headers, tc.header)
			}
			// Check's state refuses the same way as Reserve's error.
			if s := refusal(ledger.State{Exceeded: tc.ex}, nil); faults.As(s).Reason != tc.reason {
				t.Errorf("from Check's state: %v", s)
			}
		})
	}
	if RateHeaders(ledger.NoRate) != nil {
		t.Error("NoRate has headers")
	}
}
