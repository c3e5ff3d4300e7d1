package interceptors

import (
	"context"
	"testing"

	"google.golang.org/grpc"
)

// BenchmarkCompose measures what composing eight interceptors that do
// nothing but call on costs one call: the chain's own overhead.
func BenchmarkCompose(b *testing.B) {
	pass := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	ints := make([]grpc.UnaryServerInterceptor, 8)
	for i := range ints {
		ints[i] = pass
	}
	unary := composeUnary(ints...)
	info := &grpc.UnaryServerInfo{FullMethod: "/flexway.v1.ChatService/CreateChatCompletion"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = unary(ctx, nil, info, handler)
	}
}
