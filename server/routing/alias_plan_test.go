package routing_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/routing"
)

// TestPlanAlias: an alias's route is the call's default: its targets are
// the plan, with their models and arms, filtered by capability and
// sensitivity; a tenant's or agent's override replaces it; the soft
// backend and the sensitivity pin apply after it and leave the alias.
func TestPlanAlias(t *testing.T) {
	route := &routing.AliasRoute{Name: "fast", Targets: []routing.AliasTarget{
		{Backend: "cheap", Model: "mini-1", Arm: "0"}, {Backend: "embedder", Model: "e-1", Arm: "1"}, {Backend: "main", Model: "small-1", Arm: "2"}}}
	for _, tc := range []struct {
		name         string
		req          routing.Request
		backends     []string
		models, arms []string
		reason       faults.Reason
	}{
		{name: "targets in order, the one without the capability left out", req: routing.Request{Tenant: "globex", Capability: call.Chat, Alias: route},
			backends: []string{"cheap", "main"}, models: []string{"mini-1", "small-1"}, arms: []string{"0", "2"}},
		{name: "a tenant's backend replaces the alias", req: routing.Request{Tenant: "acme", Capability: call.Chat, Alias: route},
			backends: []string{"main", "cheap", "onprem"}},
		{name: "an agent's backend replaces the alias", req: routing.Request{Tenant: "acme", Agent: "support-bot", Capability: call.Chat, Alias: route},
			backends: []string{"cheap"}},
		{name: "the sensitivity pin leaves the alias", req: routing.Request{Tenant: "globex", Capability: call.Chat, Sensitive: true, Alias: route},
			backends: []string{"onprem"}},
		{name: "no alias", req: routing.Request{Tenant: "globex", Capability: call.Chat},
			backends: []string{"main", "cheap", "onprem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := table().Plan(tc.req)
			if tc.reason != "" {
				if faults.As(err).Reason != tc.reason {
					t.Fatalf("err %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(routing.Plan{Backends: tc.backends, Models: tc.models, Arms: tc.arms}, p); d != "" {
				t.Error(d)
			}
		})
	}
}
