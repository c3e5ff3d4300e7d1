package identity_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/interceptors/identity"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
)

// keys is a hand-written fake keyring keyed by the key itself.
type keys map[string]identity.Key

var _ identity.Keyring = keys(nil)

func (k keys) Lookup(sum [sha256.Size]byte) (identity.Key, bool) {
	for key, v := range k {
		if sha256.Sum256([]byte(key)) == sum {
			return v, true
		}
	}
	return identity.Key{}, false
}

func TestUnaryServerInterceptor(t *testing.T) {
	ring := keys{
		"sk-acme": {Name: "acme-bot", Tenant: "acme", Agent: "bot"},
		"sk-edge": {Name: "edge-eu", Relay: &identity.RelayHeaders{Tenant: "flexway-tenant", Agent: "flexway-agent", Sensitive: "flexway-sensitive"}},
	}
	tests := []struct {
		name      string
		md        metadata.MD
		reason    faults.Reason
		tenant    string
		agent     string
		relay     string
		sensitive bool
	}{
		{name: "no key", md: metadata.MD{}, reason: faults.InvalidAPIKey},
		{name: "not bearer", md: metadata.MD{"authorization": {"Basic sk-acme"}}, reason: faults.InvalidAPIKey},
		{name: "unknown key", md: metadata.MD{"authorization": {"Bearer sk-nope"}}, reason: faults.InvalidAPIKey},
		{name: "api key", md: metadata.MD{"authorization": {"Bearer sk-acme"}}, tenant: "acme", agent: "bot"},
		{name: "scheme any case", md: metadata.MD{"authorization": {"bearer sk-acme"}}, tenant: "acme", agent: "bot"},
		{name: "identity headers from a non-relay are ignored", md: metadata.MD{"authorization": {"Bearer sk-acme"}, "flexway-tenant": {"globex"}}, tenant: "acme", agent: "bot"},
		{name: "relay passes identity", md: metadata.MD{"authorization": {"Bearer sk-edge"}, "flexway-tenant": {"globex"}, "flexway-agent": {"batch"}, "flexway-sensitive": {"1"}}, tenant: "globex", agent: "batch", relay: "edge-eu", sensitive: true},
		{name: "relay sensitive in any case", md: metadata.MD{"authorization": {"Bearer sk-edge"}, "flexway-tenant": {"globex"}, "flexway-sensitive": {"TRUE"}}, tenant: "globex", relay: "edge-eu", sensitive: true},
		{name: "relay sensitive in a merged line", md: metadata.MD{"authorization": {"Bearer sk-edge"}, "flexway-tenant": {"globex"}, "flexway-sensitive": {"false, true"}}, tenant: "globex", relay: "edge-eu", sensitive: true},
		{name: "relay without tenant", md: metadata.MD{"authorization": {"Bearer sk-edge"}}, reason: faults.InvalidAPIKey},
	}
	in := identity.UnaryServerInterceptor(ring, identity.WithOperationNamer(func(string) string { return "ai.chatCompletions" }))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := metadata.NewIncomingContext(context.Background(), tt.md)
			var st *call.State
			_, err := in(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/flexway.v1.ChatService/CreateChatCompletion"}, func(ctx context.Context, _ any) (any, error) {
				st = call.FromContext(ctx)
				return nil, nil
			})
			if tt.reason != "" {
				var fe *faults.Error
				if !errors.As(err, &fe) || fe.Reason != tt.reason {
					t.Fatalf("err = %v, want %s", err, tt.reason)
				}
				if st != nil {
					t.Fatal("the handler ran for a refused call")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.Tenant != tt.tenant || st.Agent != tt.agent || st.Relay != tt.relay || st.Sensitive != tt.sensitive {
				t.Fatalf("state %+v", st)
			}
			if st.Operation != "ai.chatCompletions" || !strings.HasPrefix(st.RequestID, "req_") {
				t.Fatalf("operation %q request id %q", st.Operation, st.RequestID)
			}
		})
	}
}

func TestRequestIDFromCaller(t *testing.T) {
	in := identity.UnaryServerInterceptor(keys{"k": {Name: "n", Tenant: "t"}})
	for id, kept := range map[string]bool{"trace-42": true, "has space": false, strings.Repeat("x", 129): false} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{"authorization": {"Bearer k"}, "x-request-id": {id}})
		var got string
		_, _ = in(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
			got = call.FromContext(ctx).RequestID
			return nil, nil
		})
		if (got == id) != kept {
			t.Errorf("x-request-id %q: got %q, kept=%v", id, got, kept)
		}
	}
}
