package policy

import (
	"strings"
	"testing"

	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/guardrail"
)

func rules(rs ...config.GuardrailRule) []config.GuardrailRule { return rs }

// TestGuardrailsCompose: every matching policy's rules are in the set's
// scanner (a merged set of three shapes included), a shadow policy's
// marked Shadow, whole rules listed most specific first, and the most
// specific prompt_logging decides, even when it turns logging off.
func TestGuardrailsCompose(t *testing.T) {
	tab := MustCompile([]config.Policy{
		{Name: "global", Guardrails: &config.Guardrails{
			Prompt:   rules(config.GuardrailRule{Type: "secrets", Action: "deny"}),
			Response: rules(config.GuardrailRule{Type: "json_schema", Action: "deny"}),
		}, PromptLogging: &config.PromptLogging{Enabled: true, Path: "/tmp/all.jsonl"}},
		{Name: "acme", Match: config.PolicyMatch{Tenant: "acme"}, Guardrails: &config.Guardrails{
			Prompt: rules(config.GuardrailRule{Type: "pii", Entities: []string{"credit_card"}, Action: "redact"}),
		}, PromptLogging: &config.PromptLogging{Enabled: false}},
		{Name: "http-shadow", Match: config.PolicyMatch{Listener: "http"}, Governance: gov([]string{"*"}, nil, true),
			Guardrails: &config.Guardrails{Prompt: rules(config.GuardrailRule{Type: "banned", Words: []string{"hydra"}, Action: "deny"})}},
		{Name: "other", Match: config.PolicyMatch{Tenant: "globex"}},
	})
	set := tab.Resolve(Key{Listener: "http", Tenant: "acme", Operation: "ai.chatCompletions"})
	sc := set.Scanner(guardrail.Prompt)
	var got []string
	for _, r := range sc.Rules() {
		got = append(got, r.Policy+":"+r.Type+":"+r.Action.String()+map[bool]string{true: ":shadow"}[r.Shadow])
	}
	want := "acme:pii:redact,http-shadow:banned:deny:shadow,global:secrets:deny"
	if strings.Join(got, ",") != want {
		t.Errorf("prompt rules = %v, want %s", got, want)
	}
	ms := sc.Find("card 4111 1111 1111 1111, key sk-abcdefghijklmnopqrstuvwxyz012345, project hydra", nil)
	var ents []string
	for _, m := range ms {
		ents = append(ents, m.Entity)
	}
	if strings.Join(ents, ",") != "credit_card,secret,banned" {
		t.Errorf("matches = %v", ents)
	}
	if sc2 := tab.Resolve(Key{Listener: "http", Tenant: "acme", Operation: "ai.chatCompletions"}).Scanner(guardrail.Prompt); sc2 != sc {
		t.Errorf("a merged set's scanner is joined again per call")
	}
	if w := set.WholeRules(guardrail.Response); len(w) != 1 || w[0].Policy != "global" || w[0].Type != "json_schema" || w[0].Action != guardrail.Deny {
		t.Errorf("response whole rules = %+v", w)
	}
	if !set.Guarded(guardrail.Response) || set.Scanner(guardrail.Response) != nil {
		t.Errorf("response: guarded %v, scanner %v; want guarded by json_schema only", set.Guarded(guardrail.Response), set.Scanner(guardrail.Response))
	}
	if l := set.Logging(); l == nil || l.Policy != "acme" || l.Enabled {
		t.Errorf("Logging = %+v, want acme's (disabled)", l)
	}
	if l := tab.Resolve(Key{Listener: "grpc", Tenant: "globex"}).Logging(); l == nil || l.Policy != "global" || !l.Enabled || l.Path != "/tmp/all.jsonl" {
		t.Errorf("globex Logging = %+v, want global's", l)
	}
	// A set without guarded policies has none, and pays nothing for it.
	bare := MustCompile([]config.Policy{{Name: "g", Governance: gov([]string{"*"}, nil, false)}})
	bs := bare.Resolve(Key{Tenant: "acme"})
	if bs.Scanner(guardrail.Prompt) != nil || bs.Guarded(guardrail.Prompt) || bs.Logging() != nil {
		t.Errorf("unguarded set has guards")
	}
	if n := testing.AllocsPerRun(100, func() { _ = bare.Resolve(Key{Tenant: "acme"}).Scanner(guardrail.Prompt) }); n != 0 {
		t.Errorf("Resolve+Scanner without guardrails: %v allocations", n)
	}
	// A hand-built set works the same.
	if hs := (Set{Policies: set.Policies}).Scanner(guardrail.Prompt); len(hs.Rules()) != 3 {
		t.Errorf("hand-built set: %d rules", len(hs.Rules()))
	}
}

// TestGuardrailCompileErrors: a schema file that does not compile is
// Compile's error, naming the rule's key path.
func TestGuardrailCompileErrors(t *testing.T) {
	_, err := Compile([]config.Policy{{Name: "p", Guardrails: &config.Guardrails{
		Prompt: rules(config.GuardrailRule{Type: "json_schema", Action: "deny", Schema: &config.GuardrailSchema{JSON: []byte(`{"type": 12}`)}}),
	}}})
	if err == nil || !strings.HasPrefix(err.Error(), "ai.policies[0].guardrails.prompt[0].schema: ") {
		t.Fatalf("Compile = %v, want an error at ai.policies[0].guardrails.prompt[0].schema", err)
	}
	_, err = Compile([]config.Policy{{Name: "p", Guardrails: &config.Guardrails{
		Response: rules(config.GuardrailRule{Type: "json_schema", Action: "deny", Schema: &config.GuardrailSchema{File: "/nonexistent/s.json"}}),
	}}})
	if err == nil || !strings.Contains(err.Error(), "ai.policies[0].guardrails.response[0].schema") {
		t.Fatalf("Compile = %v", err)
	}
}

// TestTableGuarded: a table is guarded for a phase only when some policy
// has a rule in it; prompt_logging alone guards nothing.
func TestTableGuarded(t *testing.T) {
	none := MustCompile([]config.Policy{{Name: "log-only", PromptLogging: &config.PromptLogging{Enabled: true, Path: "/tmp/p.jsonl"}}})
	if none.Guarded(guardrail.Prompt) || none.Guarded(guardrail.Response) {
		t.Errorf("prompt_logging alone guards a phase")
	}
	resp := MustCompile([]config.Policy{{Name: "a"}, {Name: "b", Guardrails: &config.Guardrails{
		Response: rules(config.GuardrailRule{Type: "json_schema", Action: "deny"}),
	}}})
	if resp.Guarded(guardrail.Prompt) || !resp.Guarded(guardrail.Response) {
		t.Errorf("response-only table: prompt %v response %v", resp.Guarded(guardrail.Prompt), resp.Guarded(guardrail.Response))
	}
	prompt := MustCompile([]config.Policy{{Name: "c", Guardrails: &config.Guardrails{
		Prompt: rules(config.GuardrailRule{Type: "pii", Action: "redact"}),
	}}})
	if !prompt.Guarded(guardrail.Prompt) || prompt.Guarded(guardrail.Response) {
		t.Errorf("prompt-only table: prompt %v response %v", prompt.Guarded(guardrail.Prompt), prompt.Guarded(guardrail.Response))
	}
}
