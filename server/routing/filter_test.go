package routing_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/routing"
)

// allowed is a backend filter allowing the backends it lists.
type allowed []string

func (a allowed) AllowBackend(b string) bool { return slices.Contains(a, b) }

// TestPlanAllow: the governance filter applies last, to the whole plan:
// fallbacks, alias targets (their models and arms kept parallel), the
// soft backend, the capability override and the sensitivity pin alike.
func TestPlanAllow(t *testing.T) {
	route := &routing.AliasRoute{Name: "fast", Targets: []routing.AliasTarget{
		{Backend: "cheap", Model: "mini-1", Arm: "0"}, {Backend: "onprem", Model: "local-1", Arm: "1"}, {Backend: "main", Model: "small-1", Arm: "2"}}}
	for _, tc := range []struct {
		name  string
		req   routing.Request
		allow allowed
		want  routing.Plan
		none  []string // the unfiltered plan of a NoBackendAllowedError
	}{
		{name: "fallback dropped", req: routing.Request{Tenant: "globex", Capability: call.Chat}, allow: allowed{"main", "onprem"},
			want: routing.Plan{Backends: []string{"main", "onprem"}}},
		{name: "first backend dropped, fallbacks kept", req: routing.Request{Tenant: "globex", Capability: call.Chat}, allow: allowed{"cheap", "onprem"},
			want: routing.Plan{Backends: []string{"cheap", "onprem"}}},
		{name: "alias targets keep their models and arms", req: routing.Request{Tenant: "globex", Capability: call.Chat, Alias: route}, allow: allowed{"cheap", "main"},
			want: routing.Plan{Backends: []string{"cheap", "main"}, Models: []string{"mini-1", "small-1"}, Arms: []string{"0", "2"}}},
		{name: "alias first target dropped", req: routing.Request{Tenant: "globex", Capability: call.Chat, Alias: route}, allow: allowed{"onprem"},
			want: routing.Plan{Backends: []string{"onprem"}, Models: []string{"local-1"}, Arms: []string{"1"}}},
		{name: "soft backend dropped", req: routing.Request{Tenant: "acme", Capability: call.Chat, Soft: true}, allow: allowed{"main"},
			none: []string{"cheap"}},
		{name: "capability override dropped", req: routing.Request{Tenant: "globex", Capability: call.Embeddings}, allow: allowed{"main", "onprem"},
			none: []string{"embedder"}},
		{name: "sensitivity pin dropped", req: routing.Request{Tenant: "globex", Capability: call.Chat, Sensitive: true}, allow: allowed{"main", "cheap"},
			none: []string{"onprem"}},
		{name: "nothing left", req: routing.Request{Tenant: "globex", Capability: call.Chat}, allow: allowed{"embedder"},
			none: []string{"main", "cheap", "onprem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl := table()
			before, err := tbl.Plan(routing.Request{Tenant: tc.req.Tenant, Agent: tc.req.Agent, Capability: tc.req.Capability,
				Sensitive: tc.req.Sensitive, Soft: tc.req.Soft, Alias: tc.req.Alias})
			if err != nil {
				t.Fatal(err)
			}
			snapshot := slices.Clone(before.Backends)
			tc.req.Allow = tc.allow
			p, err := tbl.Plan(tc.req)
			if tc.none != nil {
				var ne *routing.NoBackendAllowedError
				if !errors.As(err, &ne) || !slices.Equal(ne.Plan, tc.none) {
					t.Fatalf("err %v (%#v), want NoBackendAllowedError over %v", err, ne, tc.none)
				}
			} else if err != nil {
				t.Fatal(err)
			} else if d := cmp.Diff(tc.want, p); d != "" {
				t.Error(d)
			}
			// Plans are shared: the filter never modifies one.
			again, _ := tbl.Plan(routing.Request{Tenant: tc.req.Tenant, Agent: tc.req.Agent, Capability: tc.req.Capability,
				Sensitive: tc.req.Sensitive, Soft: tc.req.Soft, Alias: tc.req.Alias})
			if !slices.Equal(again.Backends, snapshot) {
				t.Errorf("the shared plan changed: %v, was %v", again.Backends, snapshot)
			}
		})
	}
}

// TestPlanAllowNoAllocation: a filter that drops nothing costs no
// allocation, and the plan is the shared one.
func TestPlanAllowNoAllocation(t *testing.T) {
	tbl := table()
	r := routing.Request{Tenant: "globex", Capability: call.Chat, Allow: allowed{"main", "cheap", "onprem"}}
	p, err := tbl.Plan(r)
	if err != nil || !slices.Equal(p.Backends, []string{"main", "cheap", "onprem"}) {
		t.Fatalf("plan %v, err %v", p.Backends, err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = tbl.Plan(r) }); n != 0 {
		t.Errorf("%v allocations per plan, want 0", n)
	}
}

// BenchmarkPlanAllow is stage 7's filter over a three-backend plan: one
// backend dropped (a new plan), and none dropped (the shared plan).
func BenchmarkPlanAllow(b *testing.B) {
	tbl := table()
	for _, bc := range []struct {
		name  string
		allow allowed
	}{{"drops one", allowed{"main", "onprem"}}, {"drops none", allowed{"main", "cheap", "onprem"}}} {
		b.Run(bc.name, func(b *testing.B) {
			r := routing.Request{Tenant: "globex", Capability: call.Chat, Allow: bc.allow}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tbl.Plan(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
