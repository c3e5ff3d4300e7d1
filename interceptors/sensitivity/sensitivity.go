package sensitivity

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/server/call"
)

// Policy says which tenants and agents are sensitive by configuration
// (ai.tenants.T.sensitive, ai.tenants.T.agents.A.sensitive).
type Policy interface {
	// Sensitive reports whether every call of tenant (and agent, when not
	// empty) is sensitive.
	Sensitive(tenant, agent string) bool
}

// UnaryServerInterceptor flags unary calls; header is the sensitivity
// header's name (case-insensitive).
func UnaryServerInterceptor(p Policy, header string) grpc.UnaryServerInterceptor {
	header = strings.ToLower(header)
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		flag(ctx, p, header)
		return handler(ctx, req)
	}
}

// StreamServerInterceptor flags streaming calls; header is the sensitivity
// header's name (case-insensitive).
func StreamServerInterceptor(p Policy, header string) grpc.StreamServerInterceptor {
	header = strings.ToLower(header)
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		flag(ss.Context(), p, header)
		return handler(srv, ss)
	}
}

// flag sets the call's Sensitive when the header or the policy says so;
// it never clears it.
func flag(ctx context.Context, p Policy, header string) {
	st := call.FromContext(ctx)
	if st == nil || st.Sensitive {
		return
	}
	if header != "" {
		md, _ := metadata.FromIncomingContext(ctx)
		if call.SensitiveValue(md.Get(header)) {
			st.Sensitive = true
			return
		}
	}
	if p != nil && p.Sensitive(st.Tenant, st.Agent) {
		st.Sensitive = true
	}
}
