package routing_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/routing"
)

var allCaps = []call.Capability{call.Chat, call.Vision, call.Embeddings}

// randomTable builds a table of 2–7 backends with random externality,
// capabilities and fallback lists (cycles, self-references and unknown
// names included), random tenant, agent, capability, soft and sensitive
// overrides; any name may be one the table does not declare.
func randomTable(rng *rand.Rand) *routing.Table {
	n := 2 + rng.IntN(6)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("b%d", i)
	}
	pick := func() string {
		if rng.IntN(10) == 0 {
			return "missing"
		}
		return names[rng.IntN(n)]
	}
	t := &routing.Table{
		Default:      pick(),
		Tenants:      map[string]routing.Tenant{},
		Capabilities: map[call.Capability]string{},
		Backends:     map[string]routing.Backend{},
	}
	if rng.IntN(4) > 0 {
		t.SensitiveBackend = pick()
	}
	if rng.IntN(2) == 0 {
		t.SoftBackend = pick()
	}
	for _, c := range allCaps {
		if rng.IntN(2) == 0 {
			t.Capabilities[c] = pick()
		}
	}
	for _, name := range names {
		b := routing.Backend{External: rng.IntN(2) == 0}
		for _, c := range allCaps {
			if rng.IntN(2) == 0 {
				b.Capabilities = append(b.Capabilities, c)
			}
		}
		for range rng.IntN(5) {
			b.Fallback = append(b.Fallback, pick())
		}
		t.Backends[name] = b
	}
	for _, tenant := range []string{"acme", "globex"} {
		tc := routing.Tenant{Agents: map[string]string{}}
		if rng.IntN(2) == 0 {
			tc.Backend = pick()
		}
		if rng.IntN(2) == 0 {
			tc.Agents["bot"] = pick()
		}
		t.Tenants[tenant] = tc
	}
	return t
}

// TestSensitiveNeverExternal: over generated configurations and calls, a
// sensitive call's plan never holds an external (or undeclared) backend,
// whatever path chose it: default, tenant and agent override, soft switch,
// capability override, sensitivity pin, fallback. Every plan holds only
// backends with the call's capability, each once.
func TestSensitiveNeverExternal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	plans, sensitivePlans := 0, 0
	for range 3000 {
		table := randomTable(rng)
		for range 20 {
			r := routing.Request{
				Tenant:     []string{"acme", "globex", "other"}[rng.IntN(3)],
				Agent:      []string{"", "bot", "x"}[rng.IntN(3)],
				Capability: allCaps[rng.IntN(3)],
				Sensitive:  rng.IntN(2) == 0,
				Soft:       rng.IntN(2) == 0,
			}
			p, err := table.Plan(r)
			if err != nil {
				continue
			}
			plans++
			if len(p.Backends) == 0 {
				t.Fatalf("empty plan for %+v", r)
			}
			for i, name := range p.Backends {
				b, ok := table.Backends[name]
				if !ok || !b.Has(r.Capability) {
					t.Fatalf("plan %v for %+v holds %q, which cannot serve %s:\n%+v", p.Backends, r, name, r.Capability, table)
				}
				if r.Sensitive && b.External {
					t.Fatalf("sensitive call %+v planned on external %q (plan %v):\n%+v", r, name, p.Backends, table)
				}
				if slices.Contains(p.Backends[:i], name) {
					t.Fatalf("plan %v names %q twice", p.Backends, name)
				}
			}
			if r.Sensitive {
				sensitivePlans++
			}
			// The same call planned again gets the same plan.
			if q, _ := table.Plan(r); !slices.Equal(p.Backends, q.Backends) {
				t.Fatalf("plan changed between calls: %v then %v", p.Backends, q.Backends)
			}
		}
	}
	if plans < 5000 || sensitivePlans < 1000 {
		t.Fatalf("only %d plans (%d sensitive) succeeded: the generator tests too little", plans, sensitivePlans)
	}
}

// BenchmarkPlan is route planning for a tenant and agent with overrides,
// the common case: a precomputed plan, no allocation.
func BenchmarkPlan(b *testing.B) {
	t := table()
	r := routing.Request{Tenant: "acme", Agent: "support-bot", Capability: call.Chat}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := t.Plan(r); err != nil {
			b.Fatal(err)
		}
	}
}
