package transcoder

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexway/flexway/server/faults"
)

func TestToFault(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		reason     faults.Reason
		httpStatus int
		message    string
	}{
		{"core fault kept", (&faults.Error{Reason: faults.InvalidRequest, Message: "bad n", Param: "n"}).GRPCStatus().Err(), faults.InvalidRequest, 400, "bad n"},
		{"core budget kept", faults.New(faults.BudgetExceeded, "cap reached").GRPCStatus().Err(), faults.BudgetExceeded, 429, "cap reached"},
		{"channel closed", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: closed"`), faults.Unavailable, 503, "the gateway cannot take this call now; retry"},
		{"message over the channel's limit", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (9 vs. 8)"), faults.Internal, 500, "internal error"},
		{"canceled", status.Error(codes.Canceled, "context canceled"), faults.Canceled, 499, "the request was canceled"},
		{"deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), faults.UpstreamTimeout, 504, "the request timed out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fe := toFault(tt.err)
			if fe.Reason != tt.reason || fe.HTTPStatus() != tt.httpStatus || fe.Message != tt.message {
				t.Fatalf("got %s %d %q, want %s %d %q", fe.Reason, fe.HTTPStatus(), fe.Message, tt.reason, tt.httpStatus, tt.message)
			}
			if strings.Contains(fe.Message, "grpc") || strings.Contains(fe.Message, "transport") {
				t.Fatalf("internal detail in the message: %q", fe.Message)
			}
		})
	}
	if fe := toFault(faults.New(faults.InvalidRequest, "x").GRPCStatus().Err()); fe.HTTPStatus() != http.StatusBadRequest {
		t.Fatalf("status %d", fe.HTTPStatus())
	}
}

// TestShouldRetryHeader: a budget refusal that no retry within a minute
// cures (no Retry-After: the call never fits; a Retry-After over 60 s: a
// day, month or euro cap) carries x-should-retry: false; one with a short
// Retry-After (a per-minute cap, a day cap in its last minute) and every
// other error carry none, so that the SDKs' own retry rules apply.
func TestShouldRetryHeader(t *testing.T) {
	tests := []struct {
		name string
		fe   *faults.Error
		want string
	}{
		{"never fits", &faults.Error{Reason: faults.BudgetExceeded, Message: "m"}, "false"},
		{"day cap", &faults.Error{Reason: faults.BudgetExceeded, Message: "m", RetryAfterSeconds: 17000}, "false"},
		{"61 s", &faults.Error{Reason: faults.BudgetExceeded, Message: "m", RetryAfterSeconds: 61}, "false"},
		{"60 s", &faults.Error{Reason: faults.BudgetExceeded, Message: "m", RetryAfterSeconds: 60}, ""},
		{"per minute", &faults.Error{Reason: faults.BudgetExceeded, Message: "m", RetryAfterSeconds: 12}, ""},
		{"ledger unavailable", &faults.Error{Reason: faults.Unavailable, Message: "m", RetryAfterSeconds: 5}, ""},
		{"rate limited", &faults.Error{Reason: faults.RateLimited, Message: "m", RetryAfterSeconds: 3}, ""},
		{"bigger than a per-minute cap", &faults.Error{Reason: faults.RateLimited, Message: "m"}, "false"},
		{"upstream 429", &faults.Error{Reason: faults.UpstreamStatus, UpstreamHTTPStatus: 429, UpstreamBody: []byte(`{}`)}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeOpenAIError(rec, tc.fe)
			if got := rec.Header().Get("X-Should-Retry"); got != tc.want {
				t.Errorf("x-should-retry %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRefusalHeaders: a refusal's own headers (a per-minute cap's
// x-ratelimit-*) are written with its Retry-After, and the core's
// x-ratelimit-* header metadata is copied like its flexway-* keys, no
// other.
func TestRefusalHeaders(t *testing.T) {
	rec := httptest.NewRecorder()
	writeOpenAIError(rec, &faults.Error{Reason: faults.RateLimited, Message: "m", RetryAfterSeconds: 7,
		Headers: map[string]string{"x-ratelimit-limit-tokens": "100", "x-ratelimit-remaining-tokens": "0"}})
	h := rec.Header()
	if rec.Code != http.StatusTooManyRequests || h.Get("Retry-After") != "7" || h.Get("X-Ratelimit-Limit-Tokens") != "100" || h.Get("X-Ratelimit-Remaining-Tokens") != "0" {
		t.Errorf("status %d, headers %v", rec.Code, h)
	}
	rec = httptest.NewRecorder()
	copyHeaders(rec, metadata.Pairs("x-ratelimit-remaining-requests", "4", "flexway-budget", "soft", "grpc-internal", "x"))
	if h := rec.Header(); h.Get("X-Ratelimit-Remaining-Requests") != "4" || h.Get("Flexway-Budget") != "soft" || len(h) != 2 {
		t.Errorf("copied %v", h)
	}
}
