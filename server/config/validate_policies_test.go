package config_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/flexway/flexway/server/config"
)

// policyBase declares what the policies below name: tenant acme with agent
// bot, an API key of acme's agent support-bot and one of tenant initech
// (declared by the key only), alias fast, backends main (models large-1,
// small-1), cheap and ocr (grpc, serving acme.ocr.v1.OcrService). It ends
// at "policies:", line 29: the first policy item a test appends is on line
// 30.
const policyBase = `identity:
  api_keys:
    - name: a
      key_sha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
      tenant: acme
      agent: support-bot
    - {name: b, key_sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae, tenant: initech}
ai:
  backend: main
  tenants:
    acme:
      agents:
        bot: {}
  aliases:
    fast:
      targets: [{backend: main, model: small-1}]
  backends:
    main:
      url: https://llm.example.com/v1
      models: [large-1, small-1]
    cheap:
      url: https://cheap.example.com/v1
    ocr:
      kind: grpc
      url: dns:///ocr.internal:9000
  grpc:
    services:
      acme.ocr.v1.OcrService: ocr
  policies:
`

// TestLoadPolicies loads valid policies of every shape: no problem, every
// key decoded, the defaults (mode enforce, per tenant) set.
func TestLoadPolicies(t *testing.T) {
	cfg, warnings, err := config.Load(writeConfig(t, policyBase+`    - name: everyone
      governance: {models: ["*"]}
    - name: acme-governed
      match: {listener: http, operation: ai.chatCompletions, model: fast, tenant: acme}
      governance:
        models: [fast, small-1]
        backends: [main, cheap]
        mode: shadow
      budget: {tokens_per_minute: 20000, requests_per_minute: 60, tokens_per_day: 100000, tokens_per_month: 0, eur_per_month: 1.5, per: agent}
    - name: ocr
      match: {listener: grpc, operation: acme.ocr.v1.OcrService, agent: any-agent}
      budget: {requests_per_minute: 10}
    - name: bot
      match: {tenant: acme, agent: bot}
      governance: {backends: [ocr]}
    - name: "support · bot"
      match: {tenant: acme, agent: support-bot, operation: ai.embeddings}
      budget: {tokens_per_day: 5, per: policy}
    - name: initech
      match: {tenant: initech, operation: ai.listModels}
      governance: {models: [large-1], mode: enforce}
`))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Load = %v, %v; want no problem", warnings, err)
	}
	ps := cfg.AI.Policies
	if len(ps) != 6 {
		t.Fatalf("%d policies, want 6", len(ps))
	}
	gov, ocr := ps[1], ps[2]
	runChecks(t, []check{
		{"names", []string{ps[0].Name, ps[1].Name, ps[2].Name, ps[3].Name, ps[4].Name, ps[5].Name},
			[]string{"everyone", "acme-governed", "ocr", "bot", "support · bot", "initech"}},
		{"everyone.match (none: global)", ps[0].Match, config.PolicyMatch{}},
		{"everyone.level", ps[0].Match.Level(), config.LevelGlobal},
		{"everyone.governance", *ps[0].Governance, config.Governance{Models: []string{"*"}, Mode: config.GovernanceEnforce}},
		{"everyone.budget (absent)", ps[0].Budget, (*config.PolicyBudget)(nil)},
		{"acme-governed.match", gov.Match, config.PolicyMatch{Listener: "http", Operation: "ai.chatCompletions", Model: "fast", Tenant: "acme"}},
		{"acme-governed.level", gov.Match.Level(), config.LevelTenant},
		{"acme-governed.governance", *gov.Governance, config.Governance{Models: []string{"fast", "small-1"}, Backends: []string{"main", "cheap"}, Mode: config.GovernanceShadow}},
		{"acme-governed.budget", *gov.Budget, config.PolicyBudget{Caps: config.Caps{TokensPerMinute: ptr(int64(20000)),
			RequestsPerMinute: ptr(int64(60)), TokensPerDay: ptr(int64(100000)), TokensPerMonth: ptr(int64(0)), EURPerMonth: ptr(1.5)}, Per: config.PerAgent}},
		{"ocr.match", ocr.Match, config.PolicyMatch{Listener: "grpc", Operation: "acme.ocr.v1.OcrService", Agent: "any-agent"}},
		{"ocr.level", ocr.Match.Level(), config.LevelAgent},
		{"ocr.governance (absent)", ocr.Governance, (*config.Governance)(nil)},
		{"ocr.budget (per defaulted)", *ocr.Budget, config.PolicyBudget{Caps: config.Caps{RequestsPerMinute: ptr(int64(10))}, Per: config.PerTenant}},
		{"bot.governance (mode defaulted, models absent: nil)", *ps[3].Governance, config.Governance{Backends: []string{"ocr"}, Mode: config.GovernanceEnforce}},
		{"support · bot.budget.per", ps[4].Budget.Per, config.PerPolicy},
		{"initech.level", ps[5].Match.Level(), config.LevelTenant},
	})
}

// TestLoadPolicyModelsNilOrEmpty: governance.models and backends absent
// or null are nil (no rule); [] is empty and not nil (allows none), in
// flow and block style.
func TestLoadPolicyModelsNilOrEmpty(t *testing.T) {
	cfg, warnings, err := config.Load(writeConfig(t, policyBase+`    - name: absent
      governance: {mode: shadow}
    - name: "null"
      governance:
        models:
        backends: ~
    - name: empty-flow
      governance: {models: [], backends: []}
    - name: empty-block
      governance:
        models: []
        backends: [main]
`))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	ps := cfg.AI.Policies
	for _, i := range []int{0, 1} {
		if g := ps[i].Governance; g.Models != nil || g.Backends != nil {
			t.Errorf("%s: models %#v, backends %#v; want nil, nil", ps[i].Name, g.Models, g.Backends)
		}
	}
	for _, i := range []int{2, 3} {
		if g := ps[i].Governance; g.Models == nil || len(g.Models) != 0 {
			t.Errorf("%s: models %#v, want empty and not nil", ps[i].Name, g.Models)
		}
	}
	if g := ps[2].Governance; g.Backends == nil || len(g.Backends) != 0 {
		t.Errorf("empty-flow: backends %#v, want empty and not nil", g.Backends)
	}
	// Each empty list is a warning at its line; absent and null ones say
	// the governance restricts nothing.
	want := []string{
		"31: warning: ai.policies[0].governance: sets neither models nor backends: it restricts nothing",
		"33: warning: ai.policies[1].governance: sets neither models nor backends: it restricts nothing",
		"37: warning: ai.policies[2].governance.models: []: this policy denies every model (every call it matches is refused, 403 model_not_allowed); list \"*\" to allow every one",
		"37: warning: ai.policies[2].governance.backends: []: this policy allows no backend (every call it matches is refused, 403 backend_not_allowed)",
		"40: warning: ai.policies[3].governance.models: []: this policy denies every model (every call it matches is refused, 403 model_not_allowed); list \"*\" to allow every one",
	}
	got := make([]string, len(warnings))
	for i, w := range warnings {
		_, rest, _ := strings.Cut(w.Error(), ":")
		got[i] = rest
	}
	runChecks(t, []check{{"warnings", got, want}})
}

// TestApplyDefaultsPolicies: a configuration built in code gets the
// policies' defaults from ApplyDefaults, without writing through the
// caller's pointers.
func TestApplyDefaultsPolicies(t *testing.T) {
	c := validConfig(t)
	g := &config.Governance{Models: []string{"*"}}
	b := &config.PolicyBudget{Caps: config.Caps{TokensPerMinute: ptr(int64(1))}}
	c.AI.Policies = []config.Policy{{Name: "p", Governance: g, Budget: b}}
	c.ApplyDefaults()
	p := c.AI.Policies[0]
	runChecks(t, []check{
		{"mode", p.Governance.Mode, config.GovernanceEnforce},
		{"per", p.Budget.Per, config.PerTenant},
		{"caller's governance untouched", g.Mode, config.GovernanceMode("")},
	})
	if warnings, err := c.Validate(); err != nil || len(warnings) != 0 {
		t.Errorf("Validate() = %v, %v; want no problem", warnings, err)
	}
}

// policyCase is a list of policies appended to policyBase and the one
// problem it must cause: its key path, line and Error() after "file:".
type policyCase struct {
	name     string
	policies string
	wantPath string
	want     string // "line: [warning: ]path: message"
}

func runPolicyCases(t *testing.T, tests []policyCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, errs, warnings := loadProblems(t, policyBase+tt.policies)
			all := append(append(config.Problems{}, errs...), warnings...)
			if len(all) != 1 {
				t.Fatalf("problems:\n%v\nwant only one at %s", all, tt.wantPath)
			}
			p := all[0]
			wantWarning := strings.Contains(tt.want, ": warning: ")
			if p.Path != tt.wantPath || p.Warning != wantWarning {
				t.Errorf("path %s, warning %v; want %s, %v", p.Path, p.Warning, tt.wantPath, wantWarning)
			}
			if line, _, _ := strings.Cut(tt.want, ":"); strconv.Itoa(p.Line) != line {
				t.Errorf("line = %d, want %s", p.Line, line)
			}
			if got, want := p.Error(), path+":"+tt.want; got != want {
				t.Errorf("Error() =\n  %s\nwant\n  %s", got, want)
			}
		})
	}
}

// TestLoadPolicyErrors: every load error of ai.policies, with its line and
// key path.
func TestLoadPolicyErrors(t *testing.T) {
	runPolicyCases(t, []policyCase{
		{"unknown match key", `    - name: p
      governance: {models: [fast]}
      match: {tenant: acme, modle: fast}
`, "ai.policies[0].match.modle", "32: unknown key ai.policies[0].match.modle (did you mean model?)"},
		{"unknown policy key", `    - name: p
      governance: {models: [fast]}
      budgte: {tokens_per_minute: 5}
`, "ai.policies[0].budgte", "32: unknown key ai.policies[0].budgte (did you mean budget?)"},
		{"unknown governance key", `    - name: p
      governance:
        backend: [main]
        models: [fast]
`, "ai.policies[0].governance.backend", "32: unknown key ai.policies[0].governance.backend (did you mean backends?)"},
		{"unknown budget key", `    - name: p
      budget:
        per: agent
        tokens_per_minutes: 5
        tokens_per_day: 5
`, "ai.policies[0].budget.tokens_per_minutes", "33: unknown key ai.policies[0].budget.tokens_per_minutes (did you mean tokens_per_minute?)"},
		{"cap not an integer", `    - name: p
      budget: {tokens_per_minute: 1.5}
`, "ai.policies[0].budget.tokens_per_minute", `31: ai.policies[0].budget.tokens_per_minute: expected an integer, got "1.5"`},
		{"cache", `    - name: everyone
      governance: {models: ["*"]}
    - name: p
      match: {model: fast}
      governance: {models: [fast]}
      cache: {mode: exakt}
`, "ai.policies[1].cache.mode", "35: ai.policies[1].cache.mode: unknown mode \"exakt\": want off, exact or semantic"},
		{"no name", `    - match: {tenant: acme}
      governance: {models: [fast]}
`, "ai.policies[0].name", "30: ai.policies[0].name: required: the policy's name, given in refusals, the audit line and metrics"},
		{"duplicate name", `    - name: p
      governance: {models: [fast]}
    - governance: {models: [small-1]}
      name: p
`, "ai.policies[1].name", `33: ai.policies[1].name: policy "p" is already declared at ai.policies[0]: names are unique`},
		{"name too long", `    - name: ` + strings.Repeat("n", 65) + `
      governance: {models: [fast]}
`, "ai.policies[0].name", "30: ai.policies[0].name: 65 bytes: a policy name is at most 64 bytes (it is a metric label)"},
		{"name not printable", `    - name: "tab\there"
      governance: {models: [fast]}
`, "ai.policies[0].name", `30: ai.policies[0].name: "tab\there": a policy name holds printable characters only (it is written in refusals, the audit line and metric labels)`},
		{"unknown listener", `    - name: p
      match: {listener: https}
      governance: {models: [fast]}
`, "ai.policies[0].match.listener", `31: ai.policies[0].match.listener: unknown listener "https": want http or grpc`},
		{"unknown operation", `    - name: p
      match: {operation: ai.completions}
      governance: {models: [fast]}
`, "ai.policies[0].match.operation", `31: ai.policies[0].match.operation: unknown operation "ai.completions": want ai.chatCompletions, ai.embeddings, ai.listModels or a gRPC service declared under ai.grpc.services`},
		{"undeclared gRPC service", `    - name: p
      match:
        operation: acme.ocr.v2.OcrService
      budget: {requests_per_minute: 5}
`, "ai.policies[0].match.operation", `32: ai.policies[0].match.operation: unknown operation "acme.ocr.v2.OcrService": want ai.chatCompletions, ai.embeddings, ai.listModels or a gRPC service declared under ai.grpc.services`},
		{"unknown mode", `    - name: p
      governance:
        models: [fast]
        mode: dry-run
`, "ai.policies[0].governance.mode", `33: ai.policies[0].governance.mode: unknown mode "dry-run": want enforce or shadow`},
		{"empty mode kept", `    - name: p
      governance: {models: [fast], mode: ""}
`, "ai.policies[0].governance.mode", `31: ai.policies[0].governance.mode: unknown mode "": want enforce or shadow`},
		{"unknown backend", `    - name: p
      governance:
        backends:
          - main
          - eu-west
`, "ai.policies[0].governance.backends[1]", `34: ai.policies[0].governance.backends[1]: no backend "eu-west" in ai.backends`},
		{"unknown per", `    - name: p
      budget:
        tokens_per_minute: 5
        per: team
`, "ai.policies[0].budget.per", `33: ai.policies[0].budget.per: unknown per "team": want tenant, agent or policy`},
		{"negative tokens_per_minute", `    - name: p
      budget: {tokens_per_minute: -1}
`, "ai.policies[0].budget.tokens_per_minute", "31: ai.policies[0].budget.tokens_per_minute: must not be negative"},
		{"negative requests_per_minute", `    - name: p
      budget:
        requests_per_minute: -5
`, "ai.policies[0].budget.requests_per_minute", "32: ai.policies[0].budget.requests_per_minute: must not be negative"},
		{"negative tokens_per_day", `    - name: p
      budget: {tokens_per_day: -1}
`, "ai.policies[0].budget.tokens_per_day", "31: ai.policies[0].budget.tokens_per_day: must not be negative"},
		{"negative eur_per_month", `    - name: p
      budget: {eur_per_month: -0.5}
`, "ai.policies[0].budget.eur_per_month", "31: ai.policies[0].budget.eur_per_month: must not be negative"},
		{"not a list", `    name: p
`, "ai.policies", "30: ai.policies: expected a list, got a mapping"},
	})
}

// TestLoadPolicyWarnings: every warning of ai.policies, with its line and
// key path; the file still loads.
func TestLoadPolicyWarnings(t *testing.T) {
	runPolicyCases(t, []policyCase{
		{"tenant not declared", `    - name: p
      match: {tenant: globex}
      governance: {models: [fast]}
`, "ai.policies[0].match.tenant", `31: warning: ai.policies[0].match.tenant: tenant "globex" is neither under ai.tenants nor named by an identity.api_keys entry: this policy matches no call until a key (or a relay) names it`},
		{"agent not declared for its tenant", `    - name: p
      match:
        tenant: acme
        agent: ghost
      governance: {models: [fast]}
`, "ai.policies[0].match.agent", `33: warning: ai.policies[0].match.agent: agent "ghost" is neither under ai.tenants.acme.agents nor named by an identity.api_keys entry of tenant acme: this policy matches no call until a key (or a relay) names it`},
		{"agent of another tenant", `    - name: p
      match: {tenant: initech, agent: bot}
      governance: {models: [fast]}
`, "ai.policies[0].match.agent", `31: warning: ai.policies[0].match.agent: agent "bot" is neither under ai.tenants.initech.agents nor named by an identity.api_keys entry of tenant initech: this policy matches no call until a key (or a relay) names it`},
		{"gRPC service on http", `    - name: p
      match: {listener: http, operation: acme.ocr.v1.OcrService}
      budget: {requests_per_minute: 5}
`, "ai.policies[0].match.operation", `31: warning: ai.policies[0].match.operation: gRPC service acme.ocr.v1.OcrService is served on the grpc listener only: with listener http this policy matches no call`},
		{"models empty", `    - name: p
      governance:
        models: []
`, "ai.policies[0].governance.models", `32: warning: ai.policies[0].governance.models: []: this policy denies every model (every call it matches is refused, 403 model_not_allowed); list "*" to allow every one`},
		{"models empty in shadow", `    - name: p
      governance: {models: [], mode: shadow}
`, "ai.policies[0].governance.models", `31: warning: ai.policies[0].governance.models: []: this policy denies every model (every call it matches is audited as would_deny, 403 model_not_allowed); list "*" to allow every one`},
		{"model unknown", `    - name: p
      governance:
        models: [fast, gpt-9]
`, "ai.policies[0].governance.models[1]", `32: warning: ai.policies[0].governance.models[1]: "gpt-9" is neither "*", an alias, nor a model any backend lists: only a backend's default_model can serve it`},
		{"model twice", `    - name: p
      governance:
        models:
          - large-1
          - fast
          - large-1
`, "ai.policies[0].governance.models[2]", `35: warning: ai.policies[0].governance.models[2]: "large-1" is listed twice (first at models[0])`},
		{"backends empty", `    - name: p
      governance: {models: [fast], backends: []}
`, "ai.policies[0].governance.backends", `31: warning: ai.policies[0].governance.backends: []: this policy allows no backend (every call it matches is refused, 403 backend_not_allowed)`},
		{"backend twice", `    - name: p
      governance:
        backends: [cheap, main, cheap]
`, "ai.policies[0].governance.backends[2]", `32: warning: ai.policies[0].governance.backends[2]: "cheap" is listed twice (first at backends[0])`},
		{"governance restricts nothing", `    - name: p
      governance: {mode: shadow}
`, "ai.policies[0].governance", `31: warning: ai.policies[0].governance: sets neither models nor backends: it restricts nothing`},
		{"budget without cap", `    - name: p
      budget: {per: policy}
`, "ai.policies[0].budget", `31: warning: ai.policies[0].budget: sets no cap: set tokens_per_minute, requests_per_minute, tokens_per_day, tokens_per_month or eur_per_month, or remove the section`},
		{"policy sets nothing", `    - name: everyone
      governance: {models: ["*"]}
    - name: p
      match: {tenant: acme}
`, "ai.policies[1]", `32: warning: ai.policies[1]: sets neither governance, budget, guardrails, prompt_logging nor cache: it changes no call`},
	})
}

// TestValidatePerMinuteCaps: tokens_per_minute and requests_per_minute on
// every budget block follow tokens_per_day's rule: 0 or more.
func TestValidatePerMinuteCaps(t *testing.T) {
	neg := ptr(int64(-1))
	runValidateCases(t, validConfig, []validateCase{
		{"default tokens_per_minute", func(c *config.Config) { c.AI.Budget.Default.TokensPerMinute = neg },
			"ai.budget.default.tokens_per_minute", "must not be negative", false},
		{"default requests_per_minute", func(c *config.Config) { c.AI.Budget.Default.RequestsPerMinute = neg },
			"ai.budget.default.requests_per_minute", "must not be negative", false},
		{"tenant tokens_per_minute", func(c *config.Config) {
			t := c.AI.Tenants["acme"]
			t.Budget.TokensPerMinute = neg
			c.AI.Tenants["acme"] = t
		}, "ai.tenants.acme.budget.tokens_per_minute", "must not be negative", false},
		{"agent requests_per_minute", func(c *config.Config) {
			t := c.AI.Tenants["acme"]
			t.Agents["bot"] = config.Agent{Budget: config.Caps{RequestsPerMinute: neg}}
		}, "ai.tenants.acme.agents.bot.budget.requests_per_minute", "must not be negative", false},
	})
	c := validConfig(t)
	zero := ptr(int64(0))
	c.AI.Budget.Default = config.Caps{TokensPerMinute: zero, RequestsPerMinute: zero}
	if warnings, err := c.Validate(); err != nil || len(warnings) != 0 {
		t.Errorf("caps of 0: Validate() = %v, %v; want no problem", warnings, err)
	}
}

// TestValidatePolicyNameUTF8: YAML cannot carry a name that is not UTF-8
// (\xff is U+00FF there); a Config built in code can.
func TestValidatePolicyNameUTF8(t *testing.T) {
	runValidateCases(t, validConfig, []validateCase{
		{"not UTF-8", func(c *config.Config) {
			c.AI.Policies = []config.Policy{{Name: "bad\xff", Budget: &config.PolicyBudget{Caps: config.Caps{TokensPerDay: ptr(int64(1))}, Per: config.PerTenant}}}
		}, "ai.policies[0].name", `"bad\xff" is not valid UTF-8`, false},
	})
}

// TestLoadPerMinuteCaps: the per-minute caps decode on every budget block,
// with line and key path when negative.
func TestLoadPerMinuteCaps(t *testing.T) {
	cfg, warnings, err := config.Load(writeConfig(t, base+`  budget:
    default: {tokens_per_minute: 100000, requests_per_minute: 600}
  tenants:
    acme:
      budget: {tokens_per_minute: 0}
      agents:
        bot:
          budget: {requests_per_minute: 7}
`))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Load = %v, %v", warnings, err)
	}
	acme := cfg.AI.Tenants["acme"]
	runChecks(t, []check{
		{"default", cfg.AI.Budget.Default, config.Caps{TokensPerMinute: ptr(int64(100000)), RequestsPerMinute: ptr(int64(600))}},
		{"acme", acme.Budget, config.Caps{TokensPerMinute: ptr(int64(0))}},
		{"bot", acme.Agents["bot"].Budget, config.Caps{RequestsPerMinute: ptr(int64(7))}},
	})
	_, errs, _ := loadProblems(t, base+`  tenants:
    acme:
      agents:
        bot:
          budget:
            tokens_per_minute: -3
`)
	p := findProblem(t, errs, "ai.tenants.acme.agents.bot.budget.tokens_per_minute")
	if p.Line != 17 || !strings.HasSuffix(p.Error(), ":17: ai.tenants.acme.agents.bot.budget.tokens_per_minute: must not be negative") {
		t.Errorf("problem = %q (line %d), want line 17, must not be negative", p.Error(), p.Line)
	}
}
