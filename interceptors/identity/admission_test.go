package identity_test

import (
	"context"
	"crypto/sha256"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/interceptors/identity"
	"github.com/flexway/flexway/server/call"
)

// countingKeys counts the lookups of the keyring it wraps.
type countingKeys struct {
	identity.Keyring
	n int
}

func (c *countingKeys) Lookup(sum [sha256.Size]byte) (identity.Key, bool) {
	c.n++
	return c.Keyring.Lookup(sum)
}

// A call carrying the HTTP front's admission takes the caller the front
// identified, relay identity included, without looking the key up again;
// one carrying none, or an admission that names no caller, is looked up
// once.
func TestAdmissionCarriesTheCaller(t *testing.T) {
	edge := &identity.RelayHeaders{Tenant: "flexway-tenant", Agent: "flexway-agent", Sensitive: "flexway-sensitive"}
	relayed := metadata.MD{"authorization": {"Bearer sk-edge"}, "flexway-tenant": {"globex"}, "flexway-agent": {"batch"}, "flexway-sensitive": {"1"}}
	ring := keys{"sk-acme": {Name: "acme-bot", Tenant: "acme", Agent: "bot"}, "sk-edge": {Name: "edge-eu", Relay: edge}}
	front, err := identity.Identify(ring, relayed) // what the front resolves
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		md      metadata.MD
		admit   *call.Admission
		want    call.Identity
		lookups int
	}{
		{name: "grpc call", md: metadata.MD{"authorization": {"Bearer sk-acme"}},
			want: call.Identity{KeyName: "acme-bot", Tenant: "acme", Agent: "bot"}, lookups: 1},
		{name: "admitted relay call", md: relayed, admit: &call.Admission{Caller: front, Tenant: "globex"},
			want: call.Identity{KeyName: "edge-eu", Relay: "edge-eu", Tenant: "globex", Agent: "batch", Sensitive: true}, lookups: 0},
		{name: "admission naming no caller", md: metadata.MD{"authorization": {"Bearer sk-acme"}}, admit: &call.Admission{Tenant: "acme"},
			want: call.Identity{KeyName: "acme-bot", Tenant: "acme", Agent: "bot"}, lookups: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ring := &countingKeys{Keyring: ring}
			in := identity.UnaryServerInterceptor(ring)
			ctx := metadata.NewIncomingContext(context.Background(), tt.md)
			if tt.admit != nil {
				ctx = call.WithAdmission(ctx, *tt.admit)
			}
			var st *call.State
			if _, err := in(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
				st = call.FromContext(ctx)
				return nil, nil
			}); err != nil {
				t.Fatal(err)
			}
			got := call.Identity{KeyName: st.KeyName, Relay: st.Relay, Tenant: st.Tenant, Agent: st.Agent, Sensitive: st.Sensitive}
			if got != tt.want {
				t.Errorf("identity %+v, want %+v", got, tt.want)
			}
			if ring.n != tt.lookups {
				t.Errorf("%d key lookups, want %d", ring.n, tt.lookups)
			}
			if (st.Admitted != nil) != (tt.admit != nil) {
				t.Errorf("admitted %+v, want %+v", st.Admitted, tt.admit)
			}
		})
	}
}
