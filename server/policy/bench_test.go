package policy

import (
	"fmt"
	"testing"

	"github.com/flexway/flexway/server/config"
)

// benchPolicies is 1,000 policies of mixed shapes: mostly tenant and
// tenant+agent matches, some model, operation, listener and global ones.
func benchPolicies() []config.Policy {
	ps := make([]config.Policy, 0, 1000)
	add := func(m config.PolicyMatch, g *config.Governance, b *config.PolicyBudget) {
		ps = append(ps, config.Policy{Name: fmt.Sprintf("p%d", len(ps)), Match: m, Governance: g, Budget: b})
	}
	capped := &config.PolicyBudget{Caps: config.Caps{TokensPerMinute: i64(1000)}}
	for i := 0; i < 400; i++ {
		add(config.PolicyMatch{Tenant: fmt.Sprintf("t%d", i)},
			gov([]string{"gpt-4o", "mistral-small", "fast", "m3", "m4"}, []string{"openai", "mistral"}, false), capped)
	}
	for i := 0; i < 450; i++ {
		add(config.PolicyMatch{Tenant: fmt.Sprintf("t%d", i%400), Agent: fmt.Sprintf("a%d", i%3)},
			gov([]string{"gpt-4o", "fast"}, nil, i%2 == 0), nil)
	}
	for i := 0; i < 60; i++ {
		add(config.PolicyMatch{Model: fmt.Sprintf("model-%d", i)}, gov(nil, []string{"openai"}, false), nil)
	}
	add(config.PolicyMatch{Model: "gpt-4o"}, gov(nil, []string{"openai", "azure"}, true), nil)
	for i := 0; i < 30; i++ {
		add(config.PolicyMatch{Operation: fmt.Sprintf("acme.svc%d.v1.Service", i)}, gov(nil, []string{"ocr"}, false), nil)
	}
	add(config.PolicyMatch{Operation: config.OperationChatCompletions}, gov([]string{"*"}, nil, false), nil)
	add(config.PolicyMatch{Operation: config.OperationChatCompletions, Tenant: "t7"}, gov([]string{"*"}, nil, false), capped)
	add(config.PolicyMatch{Listener: config.ListenerHTTP}, nil, capped)
	add(config.PolicyMatch{Listener: config.ListenerGRPC}, gov(nil, []string{"ocr"}, true), nil)
	for len(ps) < 1000 {
		add(config.PolicyMatch{Tenant: fmt.Sprintf("x%d", len(ps)), Model: "fast"}, gov([]string{"fast"}, nil, false), nil)
	}
	add(config.PolicyMatch{}, gov([]string{"*"}, nil, true), nil)
	return ps[:1000]
}

// BenchmarkResolveGovernance is stage 3 and 4 of a call: resolve, check
// the model, filter a three-backend plan.
func BenchmarkResolveGovernance(b *testing.B) {
	tab := MustCompile(benchPolicies())
	keys := []Key{
		{Listener: "http", Operation: config.OperationChatCompletions, Model: "gpt-4o", Tenant: "t7", Agent: "a1"},
		{Listener: "http", Operation: config.OperationChatCompletions, Model: "fast", Tenant: "t123", Agent: ""},
		{Listener: "grpc", Operation: config.OperationEmbeddings, Model: "model-3", Tenant: "t50", Agent: "a2"},
		{Listener: "http", Operation: config.OperationChatCompletions, Model: "m3", Tenant: "nobody"},
	}
	plan := []string{"openai", "azure", "mistral"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[i%len(keys)]
		s := tab.Resolve(k)
		deny, shadow := s.CheckModel(k.Model)
		_, _ = deny, shadow
		for _, be := range plan {
			_ = s.AllowBackend(be)
		}
	}
}
