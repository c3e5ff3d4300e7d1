// Package adminkey is the interceptor that guards Flexway's admin API
// (flexway.v1.AdminService): a call to it needs "authorization: Bearer
// <key>" ([bearer.Token]) with server.admin_key, compared by SHA-256 in
// constant time; every other method passes untouched. With no admin key
// configured, every admin call is refused.
//
// Errors: UNAUTHENTICATED with ErrorInfo reason invalid_api_key when the
// admin API is off, or the key is missing or wrong.
package adminkey

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/server/admin"
	"github.com/flexway/flexway/server/bearer"
	"github.com/flexway/flexway/server/faults"
)

// UnaryServerInterceptor checks the admin key of unary admin calls; see
// the package doc. keySum is the SHA-256 of server.admin_key, nil when
// none is configured.
func UnaryServerInterceptor(keySum *[sha256.Size]byte) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := check(ctx, info.FullMethod, keySum); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor checks the admin key of streaming admin calls,
// as [UnaryServerInterceptor] does.
func StreamServerInterceptor(keySum *[sha256.Size]byte) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := check(ss.Context(), info.FullMethod, keySum); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// check returns the refusal of a call to method, nil when it may go on.
func check(ctx context.Context, method string, keySum *[sha256.Size]byte) error {
	if !strings.HasPrefix(method, admin.ServicePrefix) {
		return nil
	}
	if keySum == nil {
		return faults.New(faults.InvalidAPIKey, "the admin API is off: set server.admin_key to use it")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var v string
	if vs := md.Get("authorization"); len(vs) > 0 {
		v = vs[0]
	}
	token, ok := bearer.Token(v)
	if !ok {
		return faults.New(faults.InvalidAPIKey, "missing admin key: send Authorization: Bearer <server.admin_key>")
	}
	sum := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(sum[:], keySum[:]) != 1 {
		return faults.New(faults.InvalidAPIKey, "invalid admin key")
	}
	return nil
}
