package sensitivity_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/interceptors/sensitivity"
	"github.com/flexway/flexway/server/call"
)

// policy is a hand-written fake: sensitive tenants and tenant/agent pairs.
type policy map[string]bool

var _ sensitivity.Policy = policy(nil)

func (p policy) Sensitive(tenant, agent string) bool { return p[tenant] || p[tenant+"/"+agent] }

func TestFlag(t *testing.T) {
	p := policy{"globex": true, "acme/secret-bot": true}
	tests := []struct {
		name          string
		tenant, agent string
		header        []string
		already       bool
		want          bool
	}{
		{name: "plain call", tenant: "acme", agent: "support", want: false},
		{name: "header true", tenant: "acme", header: []string{"true"}, want: true},
		{name: "header 1", tenant: "acme", header: []string{"1"}, want: true},
		{name: "header TRUE any case", tenant: "acme", header: []string{"TRUE"}, want: true},
		{name: "header false does not unflag tenant", tenant: "globex", header: []string{"false"}, want: true},
		{name: "header 0 does not unflag identity's flag", tenant: "acme", header: []string{"0"}, already: true, want: true},
		{name: "header other value", tenant: "acme", header: []string{"yes"}, want: false},
		{name: "sensitive tenant", tenant: "globex", want: true},
		{name: "sensitive agent", tenant: "acme", agent: "secret-bot", want: true},
	}
	in := sensitivity.UnaryServerInterceptor(p, "Flexway-Sensitive")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &call.State{Tenant: tt.tenant, Agent: tt.agent, Sensitive: tt.already}
			ctx := call.NewContext(context.Background(), st)
			if tt.header != nil {
				ctx = metadata.NewIncomingContext(ctx, metadata.MD{"flexway-sensitive": tt.header})
			}
			var seen bool
			_, err := in(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
				seen = call.FromContext(ctx).Sensitive
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if seen != tt.want {
				t.Fatalf("sensitive = %v, want %v", seen, tt.want)
			}
		})
	}
}
