package faults_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexway/flexway/server/faults"
)

// TestEveryReasonMaps walks the closed list: each reason has a code, an
// HTTP status and survives a trip through a gRPC status.
func TestEveryReasonMaps(t *testing.T) {
	want := map[faults.Reason]struct {
		code codes.Code
		http int
	}{
		faults.InvalidAPIKey:                {codes.Unauthenticated, 401},
		faults.InvalidRequest:               {codes.InvalidArgument, 400},
		faults.RequestTooLarge:              {codes.InvalidArgument, 413},
		faults.NotFound:                     {codes.NotFound, 404},
		faults.CapabilityUnavailable:        {codes.FailedPrecondition, 400},
		faults.BudgetExceeded:               {codes.ResourceExhausted, 429},
		faults.SensitiveNoInternalBackend:   {codes.PermissionDenied, 403},
		faults.UnknownTenant:                {codes.PermissionDenied, 403},
		faults.ModelNotAllowed:              {codes.PermissionDenied, 403},
		faults.BackendNotAllowed:            {codes.PermissionDenied, 403},
		faults.GuardrailViolation:           {codes.PermissionDenied, 403},
		faults.RateLimited:                  {codes.ResourceExhausted, 429},
		faults.UpstreamError:                {codes.Unavailable, 502},
		faults.UpstreamCredentialsExhausted: {codes.Unavailable, 502},
		faults.NoBackendAvailable:           {codes.Unavailable, 503},
		faults.UpstreamTimeout:              {codes.DeadlineExceeded, 504},
		faults.Unavailable:                  {codes.Unavailable, 503},
		faults.Canceled:                     {codes.Canceled, 499},
		faults.Internal:                     {codes.Internal, 500},
	}
	for _, r := range faults.Reasons {
		t.Run(string(r), func(t *testing.T) {
			e := faults.New(r, "something about %s", r)
			if r == faults.UpstreamStatus {
				e.UpstreamHTTPStatus = 429
				e.UpstreamBody = []byte(`{"error":{"message":"slow down"}}`)
				e.UpstreamContentType = "application/json"
				if e.HTTPStatus() != 429 || e.Code() != codes.ResourceExhausted {
					t.Fatalf("upstream 429: http %d code %v", e.HTTPStatus(), e.Code())
				}
			} else {
				w, ok := want[r]
				if !ok {
					t.Fatalf("reason %q has no expected mapping in this test", r)
				}
				if e.Code() != w.code || e.HTTPStatus() != w.http {
					t.Fatalf("got code %v http %d, want %v %d", e.Code(), e.HTTPStatus(), w.code, w.http)
				}
			}
			e.Param = "messages[0].content"
			e.RetryAfterSeconds = 42
			back := faults.FromStatus(status.Convert(e))
			if back.Reason != r || back.Param != e.Param || back.RetryAfterSeconds != 42 || back.Message != e.Message {
				t.Fatalf("round trip: got %+v", back)
			}
			if string(back.UpstreamBody) != string(e.UpstreamBody) || back.UpstreamHTTPStatus != e.UpstreamHTTPStatus {
				t.Fatalf("upstream body lost: %+v", back)
			}
		})
	}
}

func TestAs(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want faults.Reason
	}{
		{"wrapped fault", fmt.Errorf("x: %w", faults.New(faults.BudgetExceeded, "cap")), faults.BudgetExceeded},
		{"canceled", context.Canceled, faults.Canceled},
		{"deadline", fmt.Errorf("dial: %w", context.DeadlineExceeded), faults.UpstreamTimeout},
		{"foreign status", status.Error(codes.PermissionDenied, "no"), faults.SensitiveNoInternalBackend},
		{"plain error", errors.New("boom"), faults.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := faults.As(tt.err).Reason; got != tt.want {
				t.Fatalf("As(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
	if faults.As(nil) != nil {
		t.Fatal("As(nil) is not nil")
	}
}

func TestInternalMessageHidesCause(t *testing.T) {
	e := faults.As(errors.New("dial tcp 10.0.0.5: secret-token-xyz"))
	if e.Message != "internal error" || e.HTTPStatus() != http.StatusInternalServerError {
		t.Fatalf("got %q %d", e.Message, e.HTTPStatus())
	}
}
