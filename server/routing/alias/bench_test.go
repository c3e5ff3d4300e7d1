package alias_test

import (
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/flexway/flexway/server/routing/alias"
)

// BenchmarkResolve measures Resolve per strategy; the budget is
// 1 µs per call, and the path allocates nothing.
func BenchmarkResolve(b *testing.B) {
	tab := compileTable(b, testConfig(b))
	h := http.Header{"X-Experiment": {"exp-7"}}
	headerAB := testConfig(b)
	ab := headerAB.AI.Aliases["reviewer"]
	ab.Sticky = "header:X-Experiment"
	headerAB.AI.Aliases["reviewer"] = ab
	headerTab := compileTable(b, headerAB)
	for _, bb := range []struct {
		name, alias string
		tab         *alias.Table
		s           alias.Subject
	}{
		{"direct", "one", tab, alias.Subject{Tenant: "acme"}},
		{"failover", "fast", tab, alias.Subject{Tenant: "acme"}},
		{"canary/global-rand", "smart", tab, alias.Subject{Tenant: "acme"}},
		{"canary/seeded-rand", "smart", tab, alias.Subject{Tenant: "acme", Rand: rand.New(rand.NewPCG(1, 2))}},
		{"ab/agent", "reviewer", tab, alias.Subject{Tenant: "acme", Agent: "support-bot"}},
		{"ab/header", "reviewer", headerTab, alias.Subject{Tenant: "acme", Header: h.Get}},
		{"cost", "thrifty", tab, alias.Subject{Tenant: "acme"}},
		{"latency", "quick", tab, alias.Subject{Tenant: "acme"}},
		{"cost_latency", "balanced", tab, alias.Subject{Tenant: "acme"}},
		{"classifier", "triage", tab, alias.Subject{Tenant: "acme"}},
		{"not-an-alias", "large-1", tab, alias.Subject{Tenant: "acme"}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := bb.tab.Resolve(bb.alias, bb.s); !ok && bb.alias != "large-1" {
					b.Fatal("not resolved")
				}
			}
		})
	}
}

// TestResolveAllocatesNothing pins the zero allocations the benchmarks
// show, for every strategy.
func TestResolveAllocatesNothing(t *testing.T) {
	tab := compileTable(t, testConfig(t))
	s := alias.Subject{Tenant: "acme", Agent: "support-bot"}
	for _, name := range tab.Names() {
		if n := testing.AllocsPerRun(100, func() { tab.Resolve(name, s) }); n != 0 {
			t.Errorf("Resolve(%q) allocates %v times per call, want 0", name, n)
		}
	}
}
