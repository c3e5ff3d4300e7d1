package governance_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/interceptors/governance"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/policy"
)

// BenchmarkGovernance is stages 3 and 4 of a unary chat call through the
// interceptor, with 1,000 policies loaded (tenant and tenant+agent
// allowlists, model-level and listener-level rules, a global one): the
// policies resolved into the state and the model checked.
func BenchmarkGovernance(b *testing.B) {
	var ps []config.Policy
	for i := range 1000 {
		p := config.Policy{Name: fmt.Sprint("p", i), Governance: &config.Governance{Models: []string{"fast", "m-small", "m3"}}}
		switch {
		case i < 500:
			p.Match = config.PolicyMatch{Tenant: fmt.Sprint("t", i)}
		case i < 900:
			p.Match = config.PolicyMatch{Tenant: fmt.Sprint("t", i%500), Agent: fmt.Sprint("a", i%3)}
		case i < 990:
			p.Match = config.PolicyMatch{Model: fmt.Sprint("model-", i)}
			p.Governance = &config.Governance{Backends: []string{"main"}}
		case i < 999:
			p.Match = config.PolicyMatch{Listener: config.ListenerHTTP, Operation: config.OperationChatCompletions}
			p.Governance.Mode = config.GovernanceShadow
		}
		ps = append(ps, p)
	}
	in := governance.UnaryServerInterceptor(governance.Config{Policies: policy.MustCompile(ps)})
	info := &grpc.UnaryServerInfo{FullMethod: flexwayv1.ChatService_CreateChatCompletion_FullMethodName}
	req := &flexwayv1.CreateChatCompletionRequest{Model: "m-small"}
	st := &call.State{Listener: "http", Operation: config.OperationChatCompletions, Tenant: "t42", Agent: "a1"}
	ctx := call.NewContext(context.Background(), st)
	handler := func(context.Context, any) (any, error) { return nil, nil }
	if _, err := in(ctx, req, info, handler); err != nil || len(st.Policies.Policies) < 3 {
		b.Fatalf("err %v, %d policies", err, len(st.Policies.Policies))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in(ctx, req, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}
