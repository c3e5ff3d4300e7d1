package alias_test

import (
	"hash/fnv"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/routing/alias"
)

func ptr[T any](v T) *T { return &v }

// testConfig is a valid configuration with one alias of each strategy, in
// the reference's shape.
func testConfig(t testing.TB) *config.Config {
	t.Helper()
	ms := func(d int) config.Duration { return config.Duration(time.Duration(d) * time.Millisecond) }
	c := &config.Config{AI: config.AI{
		Backend: "main",
		Backends: map[string]config.Backend{
			"main":   {URL: "https://llm.example.com/v1", Price: config.Price{Input: 2.5, Output: 10}, ExpectedLatency: ms(800)},
			"cheap":  {URL: "https://cheap.example.com/v1", Price: config.Price{Input: 0.15, Output: 0.6}},
			"gem":    {Kind: config.KindGemini, URL: "https://gemini.example.com/v1beta", Price: config.Price{Input: 0.3, Output: 2.5}, ExpectedLatency: ms(300)},
			"claude": {Kind: config.KindAnthropic, URL: "https://anthropic.example.com", Price: config.Price{Input: 3, Output: 15}, ExpectedLatency: ms(300)},
			"twin":   {URL: "https://twin.example.com/v1", Price: config.Price{Input: 0.6, Output: 0.15}, ExpectedLatency: ms(100)},
		},
		Aliases: map[string]config.Alias{
			"one":  {Strategy: config.StrategyDirect, Targets: []config.AliasTarget{{Backend: "main", Model: "large-1", Arm: "solo"}}},
			"fast": {Strategy: config.StrategyFailover, Targets: []config.AliasTarget{{Backend: "cheap", Model: "mini-1"}, {Backend: "main", Model: "small-1"}}},
			"smart": {Strategy: config.StrategyCanary, Targets: []config.AliasTarget{
				{Backend: "main", Model: "large-1", Weight: 90},
				{Backend: "gem", Model: "off-1", Weight: 0, Arm: "off"},
				{Backend: "claude", Model: "claude-sonnet-4-5", Weight: 10, Arm: "canary"},
			}},
			"reviewer": {Strategy: config.StrategyAB, Sticky: "agent", Targets: []config.AliasTarget{
				{Backend: "main", Model: "large-1", Weight: 50, Arm: "control"},
				{Backend: "gem", Model: "gemini-2.5-flash", Weight: 50, Arm: "candidate"},
			}},
			"thrifty": {Strategy: config.StrategyCost, Targets: []config.AliasTarget{
				{Backend: "main", Model: "small-1"}, {Backend: "twin", Model: "t"}, {Backend: "gem", Model: "g"}, {Backend: "cheap", Model: "mini-1"},
			}},
			"quick": {Strategy: config.StrategyLatency, Targets: []config.AliasTarget{
				{Backend: "cheap", Model: "mini-1"}, {Backend: "main", Model: "small-1"}, {Backend: "claude", Model: "c"}, {Backend: "gem", Model: "g"}, {Backend: "twin", Model: "t"},
			}},
			"balanced": {Strategy: config.StrategyCostLatency, Targets: []config.AliasTarget{
				{Backend: "main", Model: "small-1"}, {Backend: "cheap", Model: "mini-1"}, {Backend: "twin", Model: "t"}, {Backend: "gem", Model: "g"},
			}},
			"triage": {Strategy: config.StrategyClassifier,
				Classifier: &config.Classifier{URL: "http://10.0.0.9:8080/score", External: ptr(false), Threshold: 0.25},
				Below:      config.ClassifierTarget{Backend: "cheap", Model: "mini-1"},
				Above:      config.ClassifierTarget{Backend: "main", Model: "large-1"},
			},
		},
	}}
	c.ApplyDefaults()
	if _, err := c.Validate(); err != nil {
		t.Fatalf("testConfig does not validate: %v", err)
	}
	return c
}

func compileTable(t testing.TB, c *config.Config) *alias.Table {
	t.Helper()
	tab, err := alias.Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// fixed is a Rand that always draws n (modulo the bound).
type fixed uint64

func (f fixed) Uint64N(n uint64) uint64 { return uint64(f) % n }

var _ alias.Rand = fixed(0)
var _ alias.Rand = (*rand.Rand)(nil)

func TestResolveOrderedStrategies(t *testing.T) {
	tab := compileTable(t, testConfig(t))
	tests := []struct {
		name     string
		alias    string
		wantArm  string
		wantTgts []alias.Target
	}{
		{"direct", "one", "solo", []alias.Target{{"main", "large-1", "solo"}}},
		{"failover in declared order", "fast", "0", []alias.Target{{"cheap", "mini-1", "0"}, {"main", "small-1", "1"}}},
		// cheap 0.75 €, gem 2.80 €, twin 0.75 € (a tie with cheap: declared order), main 12.50 €.
		{"cost by input+output", "thrifty", "1", []alias.Target{{"twin", "t", "1"}, {"cheap", "mini-1", "3"}, {"gem", "g", "2"}, {"main", "small-1", "0"}}},
		// twin 100ms, claude and gem 300ms (declared order), main 800ms, cheap unset: last.
		{"latency, unset last", "quick", "4", []alias.Target{{"twin", "t", "4"}, {"claude", "c", "2"}, {"gem", "g", "3"}, {"main", "small-1", "1"}, {"cheap", "mini-1", "0"}}},
		// twin and cheap tie at 0.75 €: twin's 100ms beats cheap's unset latency.
		{"cost then latency", "balanced", "2", []alias.Target{{"twin", "t", "2"}, {"cheap", "mini-1", "1"}, {"gem", "g", "3"}, {"main", "small-1", "0"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := tab.Resolve(tt.alias, alias.Subject{Tenant: "acme"})
			if !ok {
				t.Fatal("not resolved")
			}
			if r.Alias != tt.alias || r.Arm != tt.wantArm || r.Classifier != nil {
				t.Errorf("route = %q arm %q classifier %v, want %q arm %q", r.Alias, r.Arm, r.Classifier, tt.alias, tt.wantArm)
			}
			if diff := cmp.Diff(tt.wantTgts, r.Targets); diff != "" {
				t.Errorf("targets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveUnknown(t *testing.T) {
	tab := compileTable(t, testConfig(t))
	if _, ok := tab.Resolve("large-1", alias.Subject{}); ok {
		t.Error("a model that names no alias resolved")
	}
	var none *alias.Table
	if _, ok := none.Resolve("fast", alias.Subject{}); ok || none.Names() != nil {
		t.Error("a nil table resolved")
	}
	want := []string{"balanced", "fast", "one", "quick", "reviewer", "smart", "thrifty", "triage"}
	if diff := cmp.Diff(want, tab.Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
}

func TestResolveCanaryRoutes(t *testing.T) {
	tab := compileTable(t, testConfig(t))
	main := alias.Target{Backend: "main", Model: "large-1", Arm: "0"}
	canary := alias.Target{Backend: "claude", Model: "claude-sonnet-4-5", Arm: "canary"}
	for _, tt := range []struct {
		draw uint64
		want []alias.Target
	}{{0, []alias.Target{main, canary}}, {89, []alias.Target{main, canary}}, {90, []alias.Target{canary, main}}, {99, []alias.Target{canary, main}}} {
		r, _ := tab.Resolve("smart", alias.Subject{Rand: fixed(tt.draw)})
		if diff := cmp.Diff(tt.want, r.Targets); diff != "" || r.Arm != tt.want[0].Arm {
			t.Errorf("draw %d: arm %q, targets (-want +got):\n%s", tt.draw, r.Arm, diff)
		}
	}
}

// TestCanaryDistribution: 10,000 draws of a 90/10 canary land within ±2 %
// of each weight, and the weight-0 target is never drawn nor a failover.
func TestCanaryDistribution(t *testing.T) {
	tab := compileTable(t, testConfig(t))
	s := alias.Subject{Tenant: "acme", Rand: rand.New(rand.NewPCG(1, 2))}
	counts := map[string]int{}
	const n = 10_000
	for range n {
		r, _ := tab.Resolve("smart", s)
		counts[r.Arm]++
		for _, tg := range r.Targets {
			if tg.Arm == "off" {
				t.Fatalf("the weight-0 target is in a route: %v", r.Targets)
			}
		}
	}
	t.Logf("10,000 draws of 90/10: %v", counts)
	if got := counts["0"]; got < 8_800 || got > 9_200 {
		t.Errorf("main drawn %d times of %d, want 9,000 ± 200", got, n)
	}
	if got := counts["canary"]; got < 800 || got > 1_200 {
		t.Errorf("canary drawn %d times of %d, want 1,000 ± 200", got, n)
	}
	if counts["off"] != 0 || len(counts) != 2 {
		t.Errorf("arms drawn = %v, want only 0 and canary", counts)
	}

	// The global source, as in production, keeps the split too.
	counts = map[string]int{}
	for range n {
		r, _ := tab.Resolve("smart", alias.Subject{})
		counts[r.Arm]++
	}
	if got := counts["0"]; got < 8_800 || got > 9_200 {
		t.Errorf("global source: main drawn %d times of %d, want 9,000 ± 200", got, n)
	}
}

// wantABArm is the arm the documented formula gives, computed here with
// the standard library's FNV-1a and MurmurHash3's fmix64: a 50/50 split
// of control and candidate.
func wantABArm(aliasName, subject string) string {
	h := fnv.New64a()
	h.Write([]byte(aliasName))
	h.Write([]byte{0})
	h.Write([]byte(subject))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	if p, _ := bits.Mul64(x, 100); p < 50 {
		return "control"
	}
	return "candidate"
}

// TestABSticky: a subject always gets the same arm, across 1,000 calls and
// across two separately compiled tables (two replicas, or a restart), and
// that arm is the documented hash's.
func TestABSticky(t *testing.T) {
	one := compileTable(t, testConfig(t))
	two := compileTable(t, testConfig(t))
	s := alias.Subject{Tenant: "acme", Agent: "support-bot", Rand: rand.New(rand.NewPCG(3, 4))}
	first, _ := one.Resolve("reviewer", s)
	if want := wantABArm("reviewer", "support-bot"); first.Arm != want {
		t.Fatalf("arm = %q, want %q (FNV-1a 64 of alias, 0x00, subject)", first.Arm, want)
	}
	for i := range 1_000 {
		tab := one
		if i%2 == 1 {
			tab = two
		}
		if r, _ := tab.Resolve("reviewer", s); r.Arm != first.Arm {
			t.Fatalf("call %d: arm %q, first call %q", i, r.Arm, first.Arm)
		}
	}
	counts := map[string]int{}
	for i := range 10_000 {
		agent := "agent-" + strconv.Itoa(i)
		a, _ := one.Resolve("reviewer", alias.Subject{Tenant: "acme", Agent: agent})
		b, _ := two.Resolve("reviewer", alias.Subject{Tenant: "acme", Agent: agent})
		if a.Arm != b.Arm || a.Arm != wantABArm("reviewer", agent) {
			t.Fatalf("%s: replicas say %q and %q, the formula %q", agent, a.Arm, b.Arm, wantABArm("reviewer", agent))
		}
		if a.Targets[0].Arm != a.Arm || len(a.Targets) != 2 {
			t.Fatalf("%s: route %v does not start with its arm and fail over to the other", agent, a.Targets)
		}
		counts[a.Arm]++
	}
	t.Logf("10,000 agents over 50/50: %v", counts)
	if got := counts["control"]; got < 4_800 || got > 5_200 {
		t.Errorf("control got %d of 10,000 agents, want 5,000 ± 200", got)
	}
}

func TestABSubjects(t *testing.T) {
	c := testConfig(t)
	ab := c.AI.Aliases["reviewer"]
	headers := map[string]string{"X-Experiment": "exp-7"}
	lookup := func(name string) string { return headers[name] }
	tests := []struct {
		sticky string
		s      alias.Subject
		want   string // the subject hashed
	}{
		{"", alias.Subject{Tenant: "acme", Agent: "bot", User: "u1"}, "acme"},
		{"tenant", alias.Subject{Tenant: "acme", Agent: "bot"}, "acme"},
		{"agent", alias.Subject{Tenant: "acme", Agent: "bot"}, "bot"},
		{"agent", alias.Subject{Tenant: "acme"}, "acme"},
		{"user", alias.Subject{Tenant: "acme", User: "u1"}, "u1"},
		{"user", alias.Subject{Tenant: "acme"}, "acme"},
		{"header:X-Experiment", alias.Subject{Tenant: "acme", Header: lookup}, "exp-7"},
		{"header:X-Missing", alias.Subject{Tenant: "acme", Header: lookup}, "acme"},
		{"header:X-Experiment", alias.Subject{Tenant: "acme"}, "acme"},
	}
	for _, tt := range tests {
		t.Run(tt.sticky+"/"+tt.want, func(t *testing.T) {
			ab.Sticky = tt.sticky
			c.AI.Aliases["reviewer"] = ab
			tab := compileTable(t, c)
			// One subject could share its arm with the wrong one by
			// chance: 200 variants of each cannot.
			for i := range 200 {
				s := tt.s
				suffix := "-" + strconv.Itoa(i)
				want := tt.want + suffix
				s.Tenant += suffix
				if s.Agent != "" {
					s.Agent += suffix
				}
				if s.User != "" {
					s.User += suffix
				}
				if s.Header != nil {
					s.Header = func(name string) string {
						if v := lookup(name); v != "" {
							return v + suffix
						}
						return ""
					}
				}
				if r, _ := tab.Resolve("reviewer", s); r.Arm != wantABArm("reviewer", want) {
					t.Fatalf("variant %d: arm %q, want the arm of subject %q", i, r.Arm, want)
				}
			}
		})
	}
}

func TestResolveClassifier(t *testing.T) {
	r, ok := compileTable(t, testConfig(t)).Resolve("triage", alias.Subject{Tenant: "acme"})
	if !ok || r.Classifier == nil {
		t.Fatalf("Resolve = %+v, %v; want the above route with its classifier", r, ok)
	}
	want := alias.ClassifierSpec{
		URL: "http://10.0.0.9:8080/score", External: false, Timeout: 150 * time.Millisecond, Threshold: 0.25,
		Below: alias.Route{Alias: "triage", Strategy: config.StrategyClassifier, Arm: "below",
			Targets: []alias.Target{{Backend: "cheap", Model: "mini-1", Arm: "below"}}},
	}
	if diff := cmp.Diff(want, *r.Classifier); diff != "" {
		t.Errorf("classifier (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]alias.Target{{Backend: "main", Model: "large-1", Arm: "above"}}, r.Targets); diff != "" || r.Arm != "above" {
		t.Errorf("above route arm %q (-want +got):\n%s", r.Arm, diff)
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name string
		a    config.Alias
		want string
	}{
		{"unknown backend", config.Alias{Strategy: config.StrategyFailover, Targets: []config.AliasTarget{{Backend: "nope", Model: "m"}}}, `ai.aliases.x: targets[0]: no backend "nope"`},
		{"no target", config.Alias{Strategy: config.StrategyCost}, "ai.aliases.x: no target"},
		{"zero weights", config.Alias{Strategy: config.StrategyCanary, Targets: []config.AliasTarget{{Backend: "main", Model: "m"}}}, "every weight is 0"},
		{"unknown strategy", config.Alias{Strategy: "random", Targets: []config.AliasTarget{{Backend: "main", Model: "m"}}}, `unknown strategy "random"`},
		{"classifier without scorer", config.Alias{Strategy: config.StrategyClassifier}, "without classifier"},
		{"bad sticky", config.Alias{Strategy: config.StrategyAB, Sticky: "header:", Targets: []config.AliasTarget{{Backend: "main", Model: "m", Weight: 1}}}, `unknown sticky subject "header:"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig(t)
			c.AI.Aliases = map[string]config.Alias{"x": tt.a}
			_, err := alias.Compile(c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Compile error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
