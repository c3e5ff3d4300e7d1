package main

import (
	"fmt"
	"strings"
	"testing"
)

// testConfig is a test's gateway configuration as Go values; yaml renders
// it. The in-process gateway listens on the test's own listeners, so the
// listen addresses are ports the kernel picks (127.0.0.1:0 and
// localhost:0: configuration refuses the same address twice) unless a
// test sets them; a child process reports the ports it bound (startChild).
type testConfig struct {
	HTTP, GRPC string // server.http and server.grpc; empty: 127.0.0.1:0, localhost:0
	// AdminKey sets server.admin_key to env:FLEXWAY_TEST_ADMIN_KEY
	// (testAdminKey).
	AdminKey bool
	// Keys are identity.api_keys.
	Keys []testKey
	// Backend is ai.backend.
	Backend string
	// SoftBackend is ai.budget.soft_backend; Budget is the rest of
	// ai.budget, YAML lines indented under it (four spaces).
	SoftBackend, Budget string
	// Tenants are ai.tenants, YAML lines indented under it.
	Tenants string
	// Backends are ai.backends, in this order.
	Backends []testBackend
	// AI is more YAML lines under ai (two spaces), after the backends.
	AI string
	// AuditPath, when set, is audit.path, hashed under
	// env:FLEXWAY_TEST_KEY.
	AuditPath string
}

// testKey is one identity.api_keys entry; the key is read from Env.
type testKey struct {
	Name, Env, Tenant, Agent string
}

// testBackend is one ai.backends entry, kind openai.
type testBackend struct {
	Name, URL string // URL is the upstream's base; /v1 is appended
	// Internal writes external: false.
	Internal     bool
	Models       []string
	DefaultModel string
	// Price is the input and output euros per million tokens; nil: none.
	Price        *[2]float64
	Capabilities []string
	// Fallback is the fallback list in YAML flow form, e.g. "[spare]";
	// empty: none.
	Fallback             string
	Timeout, IdleTimeout string
	// CircuitBreaker in YAML flow form, e.g. "{failures: 5, open_for: 30s}".
	CircuitBreaker string
	// Bearer sets auth to a bearer secret, env:FLEXWAY_TEST_UPSTREAM_TOKEN.
	Bearer bool
}

// acmeBot is the demo key's entry: tenant acme, agent bot (demoKey).
var acmeBot = testKey{Name: "acme-bot", Env: "FLEXWAY_TEST_KEY", Tenant: "acme", Agent: "bot"}

// baseTestConfig is the base test configuration, the one every other
// builds on: the demo key, and ai.backend main at upstreamURL (models
// m-large and m-small, chat and embeddings, 2 s timeouts, a bearer secret),
// with the audit in audit.jsonl.
func baseTestConfig(upstreamURL string) testConfig {
	return testConfig{
		Keys:    []testKey{acmeBot},
		Backend: "main",
		Backends: []testBackend{{Name: "main", URL: upstreamURL, Bearer: true, Models: []string{"m-large", "m-small"},
			DefaultModel: "m-small", Capabilities: []string{"chat", "embeddings"}, Timeout: "2s", IdleTimeout: "2s"}},
		AuditPath: "audit.jsonl",
	}
}

// yaml renders c.
func (c testConfig) yaml() string {
	var b strings.Builder
	or := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	fmt.Fprintf(&b, "server:\n  http: %s\n  grpc: %s\n", or(c.HTTP, "127.0.0.1:0"), or(c.GRPC, "localhost:0"))
	if c.AdminKey {
		b.WriteString("  admin_key: env:FLEXWAY_TEST_ADMIN_KEY\n")
	}
	b.WriteString("identity:\n  api_keys:\n")
	for _, k := range c.Keys {
		fmt.Fprintf(&b, "    - name: %s\n      key: env:%s\n      tenant: %s\n", k.Name, k.Env, k.Tenant)
		if k.Agent != "" {
			fmt.Fprintf(&b, "      agent: %s\n", k.Agent)
		}
	}
	fmt.Fprintf(&b, "ai:\n  backend: %s\n", c.Backend)
	if c.SoftBackend != "" || c.Budget != "" {
		b.WriteString("  budget:\n")
		if c.SoftBackend != "" {
			fmt.Fprintf(&b, "    soft_backend: %s\n", c.SoftBackend)
		}
		writeLines(&b, c.Budget)
	}
	if c.Tenants != "" {
		b.WriteString("  tenants:\n")
		writeLines(&b, c.Tenants)
	}
	b.WriteString("  backends:\n")
	for _, be := range c.Backends {
		fmt.Fprintf(&b, "    %s:\n      url: %s/v1\n", be.Name, be.URL)
		if be.Bearer {
			b.WriteString("      auth: {type: bearer, secret: env:FLEXWAY_TEST_UPSTREAM_TOKEN}\n")
		}
		if be.Internal {
			b.WriteString("      external: false\n")
		}
		fmt.Fprintf(&b, "      models: [%s]\n      default_model: %s\n", strings.Join(be.Models, ", "), be.DefaultModel)
		if be.Price != nil {
			fmt.Fprintf(&b, "      price: {input: %.2f, output: %.2f}\n", be.Price[0], be.Price[1])
		}
		if len(be.Capabilities) > 0 {
			fmt.Fprintf(&b, "      capabilities: [%s]\n", strings.Join(be.Capabilities, ", "))
		}
		if be.Fallback != "" {
			fmt.Fprintf(&b, "      fallback: %s\n", be.Fallback)
		}
		fmt.Fprintf(&b, "      timeout: %s\n      idle_timeout: %s\n", be.Timeout, be.IdleTimeout)
		if be.CircuitBreaker != "" {
			fmt.Fprintf(&b, "      circuit_breaker: %s\n", be.CircuitBreaker)
		}
	}
	writeLines(&b, c.AI)
	if c.AuditPath != "" {
		fmt.Fprintf(&b, "audit:\n  path: %s\n  hash_key: env:FLEXWAY_TEST_KEY\n", c.AuditPath)
	}
	return b.String()
}

// writeLines writes s, already indented, ending it with a newline.
func writeLines(b *strings.Builder, s string) {
	if s == "" {
		return
	}
	b.WriteString(s)
	if !strings.HasSuffix(s, "\n") {
		b.WriteString("\n")
	}
}

// baseConfig is [baseTestConfig] at upstreamURL with extra, YAML lines
// under ai, after the backends.
func baseConfig(t testing.TB, upstreamURL, extra string) string {
	t.Helper()
	c := baseTestConfig(upstreamURL)
	c.AI = extra
	return c.yaml()
}

// budgetTestConfig is the base with the admin key and two internal
// backends: main (1 € and 2 € per million input and output tokens,
// falling back to cheap) and cheap (the soft backend, 0.10 € and 0.20 €),
// both serving model m; budget is the rest of ai.budget (indented under
// it), and there is no audit.
func budgetTestConfig(t testing.TB, mainURL, cheapURL, budget string) testConfig {
	t.Helper()
	t.Setenv("FLEXWAY_TEST_ADMIN_KEY", testAdminKey)
	c := baseTestConfig(mainURL)
	c.AdminKey, c.SoftBackend, c.Budget, c.AuditPath = true, "cheap", budget, ""
	c.Backends = []testBackend{
		{Name: "main", URL: mainURL, Internal: true, Models: []string{"m"}, DefaultModel: "m", Price: &[2]float64{1, 2},
			Capabilities: []string{"chat", "embeddings"}, Fallback: "[cheap]", Timeout: "2s", IdleTimeout: "2s"},
		{Name: "cheap", URL: cheapURL, Internal: true, Models: []string{"m"}, DefaultModel: "m", Price: &[2]float64{0.10, 0.20},
			Capabilities: []string{"chat", "embeddings"}, Timeout: "2s", IdleTimeout: "2s"},
	}
	return c
}

// budgetConfig is [budgetTestConfig] rendered.
func budgetConfig(t testing.TB, mainURL, cheapURL, budget string) string {
	t.Helper()
	return budgetTestConfig(t, mainURL, cheapURL, budget).yaml()
}

// pairConfig is main (falling back to the given list) and spare, both
// with a short timeout to response headers, main with the given circuit
// breaker; the admin key is set, there is no audit.
func pairConfig(t testing.TB, mainURL, spareURL, mainFallback, spareFallback, breaker string) string {
	t.Helper()
	t.Setenv("FLEXWAY_TEST_ADMIN_KEY", testAdminKey)
	c := baseTestConfig(mainURL)
	c.AdminKey, c.AuditPath = true, ""
	c.Backends = []testBackend{
		{Name: "main", URL: mainURL, Models: []string{"m"}, DefaultModel: "m", Fallback: mainFallback, Timeout: "300ms", IdleTimeout: "2s", CircuitBreaker: breaker},
		{Name: "spare", URL: spareURL, Models: []string{"m"}, DefaultModel: "m", Fallback: spareFallback, Timeout: "300ms", IdleTimeout: "2s"},
	}
	return c.yaml()
}
