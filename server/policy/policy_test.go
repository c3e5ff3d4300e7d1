package policy

import (
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"testing"

	"github.com/flexway/flexway/server/config"
)

func i64(v int64) *int64 { return &v }

// naive is the reference: every policy whose match selects k, sorted by
// (Level, Index).
func naive(ps []config.Policy, k Key, preBody bool) []string {
	type hit struct {
		lvl config.PolicyLevel
		idx int
		n   string
	}
	var hits []hit
	for i, p := range ps {
		m := p.Match
		if preBody && m.Model != "" {
			continue
		}
		if (m.Listener != "" && m.Listener != k.Listener) ||
			(m.Operation != "" && m.Operation != k.Operation) ||
			(!preBody && m.Model != "" && m.Model != k.Model) ||
			(m.Tenant != "" && m.Tenant != k.Tenant) ||
			(m.Agent != "" && m.Agent != k.Agent) {
			continue
		}
		hits = append(hits, hit{m.Level(), i, p.Name})
	}
	sort.SliceStable(hits, func(a, b int) bool {
		if hits[a].lvl != hits[b].lvl {
			return hits[a].lvl < hits[b].lvl
		}
		return hits[a].idx < hits[b].idx
	})
	var names []string
	for _, h := range hits {
		names = append(names, h.n)
	}
	return names
}

func names(s Set) []string {
	var out []string
	for _, p := range s.Policies {
		out = append(out, p.Name)
	}
	return out
}

func pick(r *rand.Rand, vals ...string) string { return vals[r.Intn(len(vals))] }

var (
	listeners  = []string{config.ListenerHTTP, config.ListenerGRPC}
	operations = []string{config.OperationChatCompletions, config.OperationEmbeddings, "acme.ocr.v1.OcrService"}
	models     = []string{"gpt-4o", "mistral-small", "fast"}
	tenants    = []string{"acme", "globex", "initech"}
	agents     = []string{"bot", "crawler"}
)

func randomPolicies(r *rand.Rand, n int) []config.Policy {
	ps := make([]config.Policy, n)
	for i := range ps {
		var m config.PolicyMatch
		if r.Intn(4) == 0 {
			m.Listener = pick(r, listeners...)
		}
		if r.Intn(4) == 0 {
			m.Operation = pick(r, operations...)
		}
		if r.Intn(3) == 0 {
			m.Model = pick(r, models...)
		}
		if r.Intn(2) == 0 {
			m.Tenant = pick(r, tenants...)
		}
		if r.Intn(3) == 0 {
			m.Agent = pick(r, agents...)
		}
		p := config.Policy{Name: fmt.Sprintf("p%d", i), Match: m}
		if r.Intn(3) == 0 {
			p.Budget = &config.PolicyBudget{Caps: config.Caps{RequestsPerMinute: i64(10)}}
		}
		ps[i] = p
	}
	return ps
}

func randomKey(r *rand.Rand) Key {
	// "" and unknown values are keys like any other.
	return Key{
		Listener:  pick(r, append(listeners, "")...),
		Operation: pick(r, append(operations, "")...),
		Model:     pick(r, append(models, "", "other")...),
		Tenant:    pick(r, append(tenants, "", "unknown")...),
		Agent:     pick(r, append(agents, "")...),
	}
}

func TestResolveMatchesNaiveScan(t *testing.T) {
	r := rand.New(rand.NewSource(16))
	for round := 0; round < 300; round++ {
		ps := randomPolicies(r, r.Intn(40))
		tab := MustCompile(ps)
		for i := 0; i < 50; i++ {
			k := randomKey(r)
			if got, want := names(tab.Resolve(k)), naive(ps, k, false); !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: Resolve(%+v) = %v, want %v\npolicies: %+v", round, k, got, want, ps)
			}
			if got, want := names(tab.PreBody(k)), naive(ps, k, true); !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: PreBody(%+v) = %v, want %v", round, k, got, want)
			}
			s := tab.Resolve(k)
			if got, want := s.BudgetNames(), budgetNames(s.Policies); !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: BudgetNames = %v, want %v", round, got, want)
			}
		}
	}
}

func TestResolveOrdersByLevelThenDeclaration(t *testing.T) {
	ps := []config.Policy{
		{Name: "global"},
		{Name: "listener", Match: config.PolicyMatch{Listener: "http"}},
		{Name: "service", Match: config.PolicyMatch{Operation: config.OperationChatCompletions, Listener: "http"}},
		{Name: "route", Match: config.PolicyMatch{Model: "gpt-4o"}},
		{Name: "tenant-model", Match: config.PolicyMatch{Tenant: "acme", Model: "gpt-4o"}},
		{Name: "tenant", Match: config.PolicyMatch{Tenant: "acme"}},
		{Name: "agent", Match: config.PolicyMatch{Tenant: "acme", Agent: "bot"}},
		{Name: "global2"},
		{Name: "other-tenant", Match: config.PolicyMatch{Tenant: "globex"}},
	}
	tab := MustCompile(ps)
	k := Key{Listener: "http", Operation: config.OperationChatCompletions, Model: "gpt-4o", Tenant: "acme", Agent: "bot"}
	want := []string{"agent", "tenant-model", "tenant", "route", "service", "listener", "global", "global2"}
	if got := names(tab.Resolve(k)); !reflect.DeepEqual(got, want) {
		t.Fatalf("Resolve = %v, want %v", got, want)
	}
	want = []string{"agent", "tenant", "service", "listener", "global", "global2"}
	if got := names(tab.PreBody(k)); !reflect.DeepEqual(got, want) {
		t.Fatalf("PreBody = %v, want %v", got, want)
	}
	for i, p := range tab.Policies() {
		if p.Index != i || p.Name != ps[i].Name || p.Level != ps[i].Match.Level() {
			t.Fatalf("Policies()[%d] = %+v", i, p)
		}
	}
}

func TestResolveSharesOneGroupsSlice(t *testing.T) {
	tab := MustCompile([]config.Policy{
		{Name: "a", Match: config.PolicyMatch{Tenant: "acme"}},
		{Name: "b", Match: config.PolicyMatch{Tenant: "acme"}, Budget: &config.PolicyBudget{Caps: config.Caps{TokensPerMinute: i64(5)}}},
	})
	k := Key{Tenant: "acme", Listener: "http"}
	if n := testing.AllocsPerRun(100, func() { _ = tab.Resolve(k).BudgetNames() }); n != 0 {
		t.Fatalf("Resolve+BudgetNames of one group: %v allocations, want 0", n)
	}
	merged := MustCompile([]config.Policy{
		{Name: "a", Match: config.PolicyMatch{Tenant: "acme"}},
		{Name: "b", Match: config.PolicyMatch{Listener: "http"}},
		{Name: "c"},
	})
	if n := testing.AllocsPerRun(100, func() { _ = merged.Resolve(k).BudgetNames() }); n != 1 {
		t.Fatalf("Resolve+BudgetNames of three groups, no budget: %v allocations, want 1", n)
	}
	if got := tab.Resolve(k).BudgetNames(); !reflect.DeepEqual(got, []string{"b"}) {
		t.Fatalf("BudgetNames = %v", got)
	}
	if s := tab.Resolve(Key{Tenant: "globex"}); s.Policies != nil || s.BudgetNames() != nil {
		t.Fatalf("no match: %+v", s)
	}
	if !MustCompile(nil).Empty() || tab.Empty() {
		t.Fatal("Empty")
	}
}

func gov(models, backends []string, shadow bool) *config.Governance {
	g := &config.Governance{Models: models, Backends: backends, Mode: config.GovernanceEnforce}
	if shadow {
		g.Mode = config.GovernanceShadow
	}
	return g
}

func TestCheckModelComposition(t *testing.T) {
	acme := config.PolicyMatch{Tenant: "acme"}
	bot := config.PolicyMatch{Tenant: "acme", Agent: "bot"}
	tab := MustCompile([]config.Policy{
		{Name: "everything", Governance: gov([]string{"*"}, nil, false)},
		{Name: "acme-list", Match: acme, Governance: gov([]string{"gpt-4o", "fast"}, nil, false)},
		{Name: "bot-shadow", Match: bot, Governance: gov([]string{"fast"}, nil, true)},
		{Name: "bot-none", Match: config.PolicyMatch{Tenant: "acme", Agent: "nobody"}, Governance: gov([]string{}, nil, false)},
		{Name: "route-shadow", Match: config.PolicyMatch{Model: "gpt-4o"}, Governance: gov([]string{}, nil, true)},
	})
	cases := []struct {
		key          Key
		deny, shadow string
	}{
		// "*" allows all; no other rule.
		{Key{Tenant: "globex", Model: "anything"}, "", ""},
		// The tenant's list refuses; "*" at global does not rescue it.
		{Key{Tenant: "acme", Model: "mistral"}, "acme-list", ""},
		{Key{Tenant: "acme", Model: "fast"}, "", ""},
		// Shadow only reports: gpt-4o is allowed by the enforced list.
		{Key{Tenant: "acme", Agent: "bot", Model: "gpt-4o"}, "", "bot-shadow"},
		// Both: deny names the enforced, shadow the shadow one.
		{Key{Tenant: "acme", Agent: "bot", Model: "mistral"}, "acme-list", "bot-shadow"},
		// [] allows none, most specific enforced first.
		{Key{Tenant: "acme", Agent: "nobody", Model: "fast"}, "bot-none", ""},
		{Key{Tenant: "globex", Model: "gpt-4o"}, "", "route-shadow"},
	}
	for _, c := range cases {
		s := tab.Resolve(c.key)
		deny, shadow := s.CheckModel(c.key.Model)
		if got := denialName(deny); got != c.deny {
			t.Errorf("%+v: deny = %q, want %q", c.key, got, c.deny)
		}
		if got := denialName(shadow); got != c.shadow {
			t.Errorf("%+v: shadow = %q, want %q", c.key, got, c.shadow)
		}
		if deny != nil && (deny.Shadow || deny.Reason != ReasonModelNotAllowed) {
			t.Errorf("%+v: deny = %+v", c.key, deny)
		}
		if shadow != nil && (!shadow.Shadow || shadow.Reason != ReasonModelNotAllowed) {
			t.Errorf("%+v: shadow = %+v", c.key, shadow)
		}
	}
	s := tab.Resolve(Key{Tenant: "acme", Agent: "bot", Model: "mistral"})
	if n := testing.AllocsPerRun(100, func() { s.CheckModel("mistral") }); n != 0 {
		t.Fatalf("CheckModel: %v allocations", n)
	}
	if deny, shadow := (Set{}).CheckModel("x"); deny != nil || shadow != nil {
		t.Fatal("the zero Set refused")
	}
}

func denialName(d *Denial) string {
	if d == nil {
		return ""
	}
	return d.Policy
}

func TestBackendComposition(t *testing.T) {
	tab := MustCompile([]config.Policy{
		{Name: "eu", Match: config.PolicyMatch{Tenant: "acme"}, Governance: gov(nil, []string{"mistral-eu", "azure-eu"}, false)},
		{Name: "no-azure", Match: config.PolicyMatch{Tenant: "acme", Agent: "bot"}, Governance: gov(nil, []string{"mistral-eu", "openai"}, false)},
		{Name: "shadow-local", Match: config.PolicyMatch{Listener: "http"}, Governance: gov(nil, []string{"ollama"}, true)},
		{Name: "no-rule", Governance: gov([]string{"*"}, nil, false)},
	})
	bot := tab.Resolve(Key{Listener: "http", Tenant: "acme", Agent: "bot"})
	for b, want := range map[string]bool{"mistral-eu": true, "azure-eu": false, "openai": false, "ollama": false} {
		if got := bot.AllowBackend(b); got != want {
			t.Errorf("bot AllowBackend(%s) = %v, want %v", b, got, want)
		}
	}
	// The shadow rule never refuses.
	other := tab.Resolve(Key{Listener: "http", Tenant: "globex"})
	if !other.AllowBackend("openai") {
		t.Error("a shadow backend rule refused")
	}
	if d := other.ShadowBackends([]string{"openai", "azure-eu"}); d == nil || d.Policy != "shadow-local" || !d.Shadow || d.Reason != ReasonBackendNotAllowed {
		t.Errorf("ShadowBackends = %+v", d)
	}
	if d := other.ShadowBackends([]string{"openai", "ollama"}); d != nil {
		t.Errorf("ShadowBackends with ollama left = %+v", d)
	}
	if d := other.ShadowBackends(nil); d != nil {
		t.Errorf("ShadowBackends(nil) = %+v", d)
	}
	// azure-eu: refused by no-azure (the agent's, most specific).
	if d := bot.BackendDenial([]string{"azure-eu"}); d == nil || d.Policy != "no-azure" || d.Shadow {
		t.Errorf("BackendDenial(azure-eu) = %+v", d)
	}
	// openai: the agent's rule allows it, the tenant's refuses it.
	if d := bot.BackendDenial([]string{"openai", "azure-eu"}); d == nil || d.Policy != "eu" {
		t.Errorf("BackendDenial(openai) = %+v", d)
	}
	if d := other.BackendDenial([]string{"openai"}); d != nil {
		t.Errorf("BackendDenial with no enforced rule = %+v", d)
	}
}

func TestPolicyDeclaration(t *testing.T) {
	tab := MustCompile([]config.Policy{
		{Name: "capped", Budget: &config.PolicyBudget{Caps: config.Caps{TokensPerMinute: i64(100)}}},
		{Name: "empty-budget", Budget: &config.PolicyBudget{Per: config.PerAgent}},
		{Name: "gov", Governance: gov([]string{}, []string{"a"}, true)},
	})
	ps := tab.Policies()
	if !ps[0].Budget || ps[0].Caps() == nil || *ps[0].Caps().TokensPerMinute != 100 || ps[0].Caps().Per != config.PerTenant {
		t.Errorf("capped: %+v %+v", ps[0], ps[0].Caps())
	}
	if ps[1].Budget || ps[1].Caps() != nil {
		t.Errorf("a budget with no cap is no budget: %+v", ps[1])
	}
	if !ps[2].Shadow || !ps[2].HasModelRule() || ps[2].Models() == nil || len(ps[2].Models()) != 0 ||
		!ps[2].HasBackendRule() || !reflect.DeepEqual(ps[2].Backends(), []string{"a"}) || ps[2].AllowsModel("x") {
		t.Errorf("gov: %+v", ps[2])
	}
	if ps[0].HasModelRule() || ps[0].HasBackendRule() || !ps[0].AllowsModel("x") || !ps[0].AllowsBackend("y") || ps[0].Models() != nil {
		t.Errorf("no governance: %+v", ps[0])
	}
}

func TestConsumerIgnoresListenerAndModel(t *testing.T) {
	tab := MustCompile([]config.Policy{
		{Name: "global"},
		{Name: "grpc-only", Match: config.PolicyMatch{Listener: "grpc"}},
		{Name: "embed", Match: config.PolicyMatch{Operation: config.OperationEmbeddings}},
		{Name: "chat-fast", Match: config.PolicyMatch{Operation: config.OperationChatCompletions, Model: "fast"}},
		{Name: "acme", Match: config.PolicyMatch{Tenant: "acme"}},
		{Name: "acme-bot", Match: config.PolicyMatch{Tenant: "acme", Agent: "bot"}},
		{Name: "globex", Match: config.PolicyMatch{Tenant: "globex"}},
		{Name: "any-bot", Match: config.PolicyMatch{Agent: "bot"}},
	})
	var got []string
	for _, p := range tab.Consumer(config.OperationChatCompletions, "acme", "bot") {
		got = append(got, p.Name)
	}
	if want := []string{"acme-bot", "any-bot", "acme", "chat-fast", "grpc-only", "global"}; !reflect.DeepEqual(got, want) {
		t.Errorf("agent view = %v, want %v", got, want)
	}
	got = nil
	for _, p := range tab.Consumer(config.OperationEmbeddings, "acme", "") {
		got = append(got, p.Name)
	}
	if want := []string{"acme", "embed", "grpc-only", "global"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tenant view = %v, want %v", got, want)
	}
}
