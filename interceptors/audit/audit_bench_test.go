package audit

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/auditlog"
	"github.com/flexway/flexway/server/call"
)

// BenchmarkUnaryInterceptor is the audit's own cost per unary chat call:
// the interceptor around a handler that records an outcome and returns,
// writing real lines to a file (the batched writer flushes them off the
// call's path).
func BenchmarkUnaryInterceptor(b *testing.B) {
	w, err := auditlog.Open(filepath.Join(b.TempDir(), "audit.jsonl"), []byte("bench-key"), auditlog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Close() })
	icpt := UnaryServerInterceptor(Config{Writer: w, MeteredBy: func(string) string { return "local" }})
	info := &grpc.UnaryServerInfo{FullMethod: flexwayv1.ChatService_CreateChatCompletion_FullMethodName}
	req := &flexwayv1.CreateChatCompletionRequest{Model: "m"}
	handler := func(ctx context.Context, _ any) (any, error) {
		call.FromContext(ctx).SetOutcome(call.Outcome{Backend: "main", ModelRequested: "m", ModelServed: "m", InputTokens: 12, OutputTokens: 30, CostNanoEUR: 72_000})
		return nil, nil
	}
	b.ReportAllocs()
	for b.Loop() {
		st := &call.State{RequestID: "req_0123456789abcdef01234567", Operation: "ai.chatCompletions", Start: time.Now(), Tenant: "acme", Agent: "bot", KeyName: "acme-bot"}
		if _, err := icpt(call.NewContext(context.Background(), st), req, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}
