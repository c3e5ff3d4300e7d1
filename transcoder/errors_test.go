package transcoder

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
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
