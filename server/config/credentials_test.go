package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexway/flexway/server/config"
)

// A pool loads with its defaults: strategy round_robin, weight 1 where
// absent, secrets resolved, token files absolute and warned about when
// unreadable, auth left at none.
func TestLoadCredentials(t *testing.T) {
	t.Setenv("POOL_K1", "sk-one")
	path := writeConfig(t, `
identity:
  api_keys:
    - {name: a, key_sha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8, tenant: acme}
ai:
  backends:
    main:
      url: https://llm.example.com/v1
      credentials:
        keys:
          - {name: k1, auth: {type: bearer, secret: env:POOL_K1}}
          - {name: k2, auth: {type: token_file, path: tokens/k2}}
    claude:
      kind: anthropic
      url: https://api.anthropic.com
      credentials:
        strategy: weighted
        keys:
          - {name: w1, auth: {type: header, name: x-api-key, secret: env:POOL_K1}, weight: 3}
          - {name: w2, auth: {type: header, name: x-api-key, secret: env:POOL_K1}}
  backend: main
`)
	cfg, warnings, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.AI.Backends["main"].Credentials
	if c == nil || c.Strategy != config.StrategyRoundRobin || len(c.Keys) != 2 || c.Keys[0].Weight != 1 || c.Keys[1].Weight != 1 {
		t.Fatalf("main credentials %+v", c)
	}
	if v, err := c.Keys[0].Auth.Secret.Resolve(); err != nil || v != "sk-one" {
		t.Fatalf("k1 secret %q %v", v, err)
	}
	if want := filepath.Join(filepath.Dir(path), "tokens", "k2"); c.Keys[1].Auth.Path != want {
		t.Fatalf("k2 path %q, want %q", c.Keys[1].Auth.Path, want)
	}
	if cfg.AI.Backends["main"].Auth.Type != config.AuthNone {
		t.Fatalf("auth %+v", cfg.AI.Backends["main"].Auth)
	}
	w := cfg.AI.Backends["claude"].Credentials
	if w.Strategy != config.StrategyWeighted || w.Keys[0].Weight != 3 || w.Keys[1].Weight != 1 {
		t.Fatalf("claude credentials %+v", w)
	}
	if len(warnings) != 1 || warnings[0].Path != "ai.backends.main.credentials.keys[1].auth.path" ||
		!strings.Contains(warnings[0].Err.Error(), "this key fails every call it is picked for") {
		t.Fatalf("warnings %v", warnings)
	}
}

// A weight written as 0 is refused under weighted; too many keys or a
// wheel too long are refused; a gRPC backend takes no pool.
func TestLoadCredentialsRefused(t *testing.T) {
	t.Setenv("POOL_K1", "sk-one")
	for _, tc := range []struct{ name, backend, path, want string }{
		{"weight 0", `
      credentials:
        strategy: weighted
        keys: [{name: a, auth: {type: bearer, secret: env:POOL_K1}, weight: 0}]`, "ai.backends.main.credentials.keys[0].weight", "must be at least 1"},
		{"wheel", `
      credentials:
        strategy: weighted
        keys: [{name: a, auth: {type: bearer, secret: env:POOL_K1}, weight: 10000}, {name: b, auth: {type: bearer, secret: env:POOL_K1}, weight: 1}]`,
			"ai.backends.main.credentials.keys", "add up to 10001"},
		{"auth none written beside", `
      auth: {type: none}
      credentials:
        keys: [{name: a, auth: {type: bearer, secret: env:POOL_K1}}]`, "ai.backends.main.credentials", "auth and credentials are both set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs, _ := loadProblems(t, `
identity:
  api_keys:
    - {name: a, key_sha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8, tenant: acme}
ai:
  backend: main
  backends:
    main:
      url: https://llm.example.com/v1`+tc.backend+"\n")
			p := findProblem(t, errs, tc.path)
			if !strings.Contains(p.Err.Error(), tc.want) || p.Line == 0 {
				t.Fatalf("%+v, want %q with a line", p, tc.want)
			}
		})
	}
}
