package adminkey_test

import (
	"context"
	"crypto/sha256"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/interceptors/adminkey"
	"github.com/flexway/flexway/server/admin"
	"github.com/flexway/flexway/server/faults"
)

// fakeStream is a server stream that has only a context.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context { return s.ctx }

func TestInterceptors(t *testing.T) {
	sum := sha256.Sum256([]byte("admin-secret"))
	adminMethod := admin.ServicePrefix + "ListUsage"
	for _, tc := range []struct {
		name    string
		keySum  *[sha256.Size]byte
		method  string
		auth    []string
		wantErr bool
	}{
		{name: "right key", keySum: &sum, method: adminMethod, auth: []string{"Bearer admin-secret"}},
		{name: "scheme in any case", keySum: &sum, method: adminMethod, auth: []string{"bearer admin-secret"}},
		{name: "wrong key", keySum: &sum, method: adminMethod, auth: []string{"Bearer nope"}, wantErr: true},
		{name: "no key", keySum: &sum, method: adminMethod, wantErr: true},
		{name: "other scheme", keySum: &sum, method: adminMethod, auth: []string{"Basic admin-secret"}, wantErr: true},
		{name: "empty token", keySum: &sum, method: adminMethod, auth: []string{"Bearer "}, wantErr: true},
		{name: "admin API off", method: adminMethod, auth: []string{"Bearer admin-secret"}, wantErr: true},
		{name: "other methods pass", keySum: &sum, method: "/flexway.v1.ChatService/CreateChatCompletion"},
		{name: "other methods pass with the admin API off", method: "/flexway.v1.ChatService/CreateChatCompletion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := metadata.MD{}
			if tc.auth != nil {
				md["authorization"] = tc.auth
			}
			ctx := metadata.NewIncomingContext(context.Background(), md)
			called := false
			_, uerr := adminkey.UnaryServerInterceptor(tc.keySum)(ctx, nil, &grpc.UnaryServerInfo{FullMethod: tc.method},
				func(context.Context, any) (any, error) { called = true; return nil, nil })
			serr := adminkey.StreamServerInterceptor(tc.keySum)(nil, fakeStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: tc.method},
				func(any, grpc.ServerStream) error { called = true; return nil })
			for _, err := range []error{uerr, serr} {
				if (err != nil) != tc.wantErr {
					t.Fatalf("err = %v, want an error: %v", err, tc.wantErr)
				}
				if err != nil && faults.As(err).Reason != faults.InvalidAPIKey {
					t.Errorf("reason %q, want %q", faults.As(err).Reason, faults.InvalidAPIKey)
				}
			}
			if called == tc.wantErr {
				t.Errorf("handler called: %v, want %v", called, !tc.wantErr)
			}
		})
	}
}
