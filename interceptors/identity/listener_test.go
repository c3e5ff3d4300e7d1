package identity_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/interceptors/identity"
	"github.com/flexway/flexway/server/call"
)

// TestListener: a call is of listener http only when the in-process
// context says so; metadata a client sends never makes it one.
func TestListener(t *testing.T) {
	in := identity.UnaryServerInterceptor(keys{"k": {Name: "n", Tenant: "t"}})
	md := metadata.MD{"authorization": {"Bearer k"}}
	for _, tt := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"grpc listener", metadata.NewIncomingContext(context.Background(), md), "grpc"},
		{"http front", call.WithListener(metadata.NewIncomingContext(context.Background(), md), "http"), "http"},
		{"metadata claiming http", metadata.NewIncomingContext(context.Background(),
			metadata.Join(md, metadata.Pairs("listener", "http", "flexway-listener", "http"))), "grpc"},
	} {
		var got string
		_, err := in(tt.ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/flexway.v1.ChatService/CreateChatCompletion"}, func(ctx context.Context, _ any) (any, error) {
			got = call.FromContext(ctx).Listener
			return nil, nil
		})
		if err != nil || got != tt.want {
			t.Errorf("%s: listener %q, err %v; want %q", tt.name, got, err, tt.want)
		}
	}
}
