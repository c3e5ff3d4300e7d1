package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
)

// TestCanFallBack pins DESIGN.md's fallback rule: connection errors, 5xx,
// timeouts and open circuits are fallen back from; a 4xx never is, an
// upstream 401 or 403 (reported as an upstream error) included.
func TestCanFallBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "upstream_error", err: faults.New(faults.UpstreamError, "upstream main answered 502"), want: true},
		{name: "upstream_timeout", err: faults.New(faults.UpstreamTimeout, "timed out"), want: true},
		{name: "open_circuit", err: faults.New(faults.NoBackendAvailable, "circuit open"), want: true},
		{name: "wrapped_upstream_error", err: fmt.Errorf("attempt: %w", faults.New(faults.UpstreamError, "x")), want: true},
		{name: "upstream_4xx", err: &faults.Error{Reason: faults.UpstreamStatus, UpstreamHTTPStatus: 429}},
		{
			name: "upstream_auth_refused",
			err:  faults.Wrap(faults.UpstreamError, fmt.Errorf("upstream main status 401: %w", backends.ErrUpstreamAuth), "refused"),
		},
		{name: "canceled", err: faults.New(faults.Canceled, "the request was canceled")},
		{name: "invalid_request", err: faults.New(faults.InvalidRequest, "bad")},
		{name: "not_a_fault", err: errors.New("plain")},
		{name: "context_canceled", err: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := canFallBack(tt.err); got != tt.want {
				t.Errorf("canFallBack(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
