package config_test

import (
	"math"
	"testing"
	"time"

	"github.com/flexway/flexway/server/config"
)

// aliasConfig is validConfig with one valid alias of every strategy.
func aliasConfig(t *testing.T) *config.Config {
	t.Helper()
	c := validConfig(t)
	backend(c, "main", func(b *config.Backend) { b.ExpectedLatency = config.Duration(800 * time.Millisecond) })
	c.AI.Aliases = map[string]config.Alias{
		"one":    {Strategy: config.StrategyDirect, Targets: []config.AliasTarget{{Backend: "main", Model: "large-1"}}},
		"fast":   {Targets: []config.AliasTarget{{Backend: "cheap", Model: "mini-1"}, {Backend: "main", Model: "small-1"}}},
		"smart":  {Strategy: config.StrategyCanary, Targets: []config.AliasTarget{{Backend: "main", Model: "large-1", Weight: 90}, {Backend: "peer", Model: "large-1", Weight: 10}, {Backend: "cheap", Model: "mini-1"}}},
		"review": {Strategy: config.StrategyAB, Sticky: "header:X-Experiment", Targets: []config.AliasTarget{{Backend: "main", Model: "large-1", Weight: 50, Arm: "control"}, {Backend: "cheap", Model: "mini-1", Weight: 50, Arm: "candidate"}}},
		"thrift": {Strategy: config.StrategyCostLatency, Targets: []config.AliasTarget{{Backend: "main", Model: "small-1"}, {Backend: "cheap", Model: "mini-1"}}},
		"triage": {Strategy: config.StrategyClassifier, Classifier: &config.Classifier{URL: "http://10.0.0.9:8080/score"},
			Below: config.ClassifierTarget{Backend: "cheap", Model: "mini-1"}, Above: config.ClassifierTarget{Backend: "main", Model: "large-1"}},
	}
	c.ApplyDefaults()
	return c
}

// alias edits one alias of c in place.
func alias(c *config.Config, name string, edit func(a *config.Alias)) {
	a := c.AI.Aliases[name]
	edit(&a)
	c.AI.Aliases[name] = a
}

func TestValidAliasConfigHasNoProblem(t *testing.T) {
	c := aliasConfig(t)
	warnings, err := c.Validate()
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Validate() = %v, %v; want no problem", warnings, err)
	}
	if got := c.AI.Aliases["fast"].Strategy; got != config.StrategyFailover {
		t.Errorf("default strategy = %q, want failover", got)
	}
	cl := c.AI.Aliases["triage"].Classifier
	if cl.Timeout.Std() != 150*time.Millisecond || cl.Threshold != 0.5 || !cl.IsExternal() {
		t.Errorf("classifier defaults = %v, %v, external %v; want 150ms, 0.5, true", cl.Timeout, cl.Threshold, cl.IsExternal())
	}
}

func TestValidateAliases(t *testing.T) {
	runValidateCases(t, aliasConfig, []validateCase{
		{"unknown backend", func(c *config.Config) {
			alias(c, "fast", func(a *config.Alias) { a.Targets[1].Backend = "nope" })
		}, "ai.aliases.fast.targets[1].backend", `no backend "nope"`, false},
		{"grpc backend", func(c *config.Config) {
			alias(c, "one", func(a *config.Alias) { a.Targets[0].Backend = "ocr" })
		}, "ai.aliases.one.targets[0].backend", "is kind grpc", false},
		{"no model", func(c *config.Config) {
			alias(c, "fast", func(a *config.Alias) { a.Targets[0].Model = "" })
		}, "ai.aliases.fast.targets[0].model", "required", false},
		{"direct with two", func(c *config.Config) {
			alias(c, "one", func(a *config.Alias) { a.Targets = append(a.Targets, config.AliasTarget{Backend: "cheap", Model: "m"}) })
		}, "ai.aliases.one.targets", "exactly one target, got 2", false},
		{"no targets", func(c *config.Config) {
			alias(c, "fast", func(a *config.Alias) { a.Targets = nil })
		}, "ai.aliases.fast.targets", "at least one target", false},
		{"duplicate target", func(c *config.Config) {
			alias(c, "fast", func(a *config.Alias) { a.Targets[1] = a.Targets[0] })
		}, "ai.aliases.fast.targets[1]", "duplicate target cheap/mini-1", false},
		{"negative weight", func(c *config.Config) {
			alias(c, "smart", func(a *config.Alias) { a.Targets[2].Weight = -1 })
		}, "ai.aliases.smart.targets[2].weight", "must not be negative", false},
		{"huge weight", func(c *config.Config) {
			alias(c, "smart", func(a *config.Alias) { a.Targets[0].Weight = math.MaxInt64 })
		}, "ai.aliases.smart.targets[0].weight", "at most 1000000", false},
		{"all weights zero ab", func(c *config.Config) {
			alias(c, "review", func(a *config.Alias) { a.Targets[0].Weight, a.Targets[1].Weight = 0, 0 })
		}, "ai.aliases.review.targets", "every weight is 0", false},
		{"weight on failover", func(c *config.Config) {
			alias(c, "fast", func(a *config.Alias) { a.Targets[0].Weight = 3 })
		}, "ai.aliases.fast.targets[0].weight", "read by strategies canary and ab only", true},
		{"bad arm", func(c *config.Config) {
			alias(c, "review", func(a *config.Alias) { a.Targets[0].Arm = "a/b" })
		}, "ai.aliases.review.targets[0].arm", "an arm name is letters", false},
		{"sticky off ab", func(c *config.Config) {
			alias(c, "smart", func(a *config.Alias) { a.Sticky = "agent" })
		}, "ai.aliases.smart.sticky", "applies to strategy ab only", false},
		{"sticky unknown", func(c *config.Config) {
			alias(c, "review", func(a *config.Alias) { a.Sticky = "team" })
		}, "ai.aliases.review.sticky", `unknown sticky subject "team"`, false},
		{"sticky header without name", func(c *config.Config) {
			alias(c, "review", func(a *config.Alias) { a.Sticky = "header:" })
		}, "ai.aliases.review.sticky", "needs the header's name", false},
		{"sticky header invalid", func(c *config.Config) {
			alias(c, "review", func(a *config.Alias) { a.Sticky = "header:X Exp" })
		}, "ai.aliases.review.sticky", `"X Exp" is not a valid header name`, false},
		{"classifier without classifier", func(c *config.Config) {
			alias(c, "triage", func(a *config.Alias) { a.Classifier = nil })
		}, "ai.aliases.triage.classifier", "required for strategy classifier", false},
		{"classifier without above", func(c *config.Config) {
			alias(c, "triage", func(a *config.Alias) { a.Above = config.ClassifierTarget{} })
		}, "ai.aliases.triage.above", "required for strategy classifier", false},
		{"classifier with targets", func(c *config.Config) {
			alias(c, "triage", func(a *config.Alias) { a.Targets = []config.AliasTarget{{Backend: "main", Model: "m"}} })
		}, "ai.aliases.triage.targets", "not targets", false},
		{"classifier url not http", func(c *config.Config) {
			alias(c, "triage", func(a *config.Alias) { a.Classifier.URL = "unix:///run/score.sock" })
		}, "ai.aliases.triage.classifier.url", "is not an http or https URL", false},
		{"classifier url user info", func(c *config.Config) {
			alias(c, "triage", func(a *config.Alias) { a.Classifier.URL = "https://u:hunter2@score.example.com/" })
		}, "ai.aliases.triage.classifier.url", "user info is not allowed", false},
		{"classifier threshold negative", func(c *config.Config) {
			alias(c, "triage", func(a *config.Alias) { a.Classifier.Threshold = -0.1 })
		}, "ai.aliases.triage.classifier.threshold", "-0.1 is outside [0, 1]", false},
		{"classifier threshold NaN", func(c *config.Config) {
			alias(c, "triage", func(a *config.Alias) { a.Classifier.Threshold = math.NaN() })
		}, "ai.aliases.triage.classifier.threshold", "outside [0, 1]", false},
		{"classifier timeout", func(c *config.Config) {
			alias(c, "triage", func(a *config.Alias) { a.Classifier.Timeout = -1 })
		}, "ai.aliases.triage.classifier.timeout", "must be positive", false},
		{"classifier on failover", func(c *config.Config) {
			alias(c, "fast", func(a *config.Alias) { a.Classifier = &config.Classifier{URL: "http://x/"} })
		}, "ai.aliases.fast.classifier", "applies to strategy classifier only", false},
		{"below on failover", func(c *config.Config) {
			alias(c, "fast", func(a *config.Alias) { a.Below = config.ClassifierTarget{Backend: "main"} })
		}, "ai.aliases.fast.below", "applies to strategy classifier only", false},
		{"unknown strategy", func(c *config.Config) {
			alias(c, "fast", func(a *config.Alias) { a.Strategy = "random" })
		}, "ai.aliases.fast.strategy", `unknown strategy "random"`, false},
		{"empty name", func(c *config.Config) {
			c.AI.Aliases[""] = c.AI.Aliases["one"]
		}, `ai.aliases[""]`, "an alias needs a name", false},
		{"name with space", func(c *config.Config) {
			c.AI.Aliases["my alias"] = c.AI.Aliases["one"]
		}, `ai.aliases["my alias"]`, "no white space", false},
		{"shadows a model", func(c *config.Config) {
			c.AI.Aliases["small-1"] = c.AI.Aliases["one"]
		}, "ai.aliases.small-1", `backend main lists a model named "small-1"`, true},
		{"serves nothing", func(c *config.Config) {
			backend(c, "cheap", func(b *config.Backend) { b.Capabilities = []config.Capability{vision} })
			alias(c, "fast", func(a *config.Alias) { a.Targets = a.Targets[:1] })
		}, "ai.aliases.fast", "no target's backend lists chat or embeddings", true},
		{"negative expected_latency", func(c *config.Config) {
			backend(c, "cheap", func(b *config.Backend) { b.ExpectedLatency = -1 })
		}, "ai.backends.cheap.expected_latency", "must not be negative", false},
	})
}

// TestLoadAliasDefaults pins the defaults Load gives an alias, and that an
// explicit zero timeout is kept (and refused) rather than defaulted.
func TestLoadAliasDefaults(t *testing.T) {
	content := base + `      expected_latency: 250ms
  aliases:
    fast:
      targets:
        - {backend: main, model: m1}
    triage:
      strategy: classifier
      classifier: {url: "https://score.example.com/v1"}
      below: {backend: main, model: m1}
      above: {backend: main, model: m2}
`
	cfg, warnings, err := config.Load(writeConfig(t, content))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Load = %v, %v", warnings, err)
	}
	runChecks(t, []check{
		{"fast strategy", cfg.AI.Aliases["fast"].Strategy, config.StrategyFailover},
		{"fast target", cfg.AI.Aliases["fast"].Targets[0], config.AliasTarget{Backend: "main", Model: "m1"}},
		{"classifier timeout", cfg.AI.Aliases["triage"].Classifier.Timeout.Std(), 150 * time.Millisecond},
		{"classifier threshold", cfg.AI.Aliases["triage"].Classifier.Threshold, 0.5},
		{"classifier external", cfg.AI.Aliases["triage"].Classifier.IsExternal(), true},
		{"expected_latency", cfg.AI.Backends["main"].ExpectedLatency.Std(), 250 * time.Millisecond},
	})

	_, errs, _ := loadProblems(t, base+`  aliases:
    triage:
      strategy: classifier
      classifier: {url: "https://score.example.com/v1", timeout: 0s, threshold: 0}
      below: {backend: main, model: m1}
      above: {backend: main, model: m2}
`)
	if p := findProblem(t, errs, "ai.aliases.triage.classifier.timeout"); p.Line != 15 {
		t.Errorf("line = %d, want 15: %v", p.Line, p)
	}
	if len(errs) != 1 {
		t.Errorf("errors = %v, want only the timeout (threshold 0 is valid)", errs)
	}
}
