package main

import (
	"fmt"
	"sort"
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
	// TLS, when set, is server.tls (CertFile, KeyFile, ClientCAFile).
	TLS *testTLS
	// MaxInflightBodyBytes, when set, is server.max_inflight_body_bytes,
	// e.g. "1MiB".
	MaxInflightBodyBytes string
	// Keys are identity.api_keys.
	Keys []testKey
	// Relays are identity.relays.
	Relays []testRelay
	// Backend is ai.backend; SensitiveBackend, when set,
	// ai.sensitive_backend.
	Backend, SensitiveBackend string
	// SoftBackend is ai.budget.soft_backend; Budget is the rest of
	// ai.budget, YAML lines indented under it (four spaces).
	SoftBackend, Budget string
	// Tenants are ai.tenants, in this order.
	Tenants []testTenant
	// GRPCServices, when set, is ai.grpc.
	GRPCServices *testGRPC
	// Vision, when set, is ai.vision.
	Vision *testVision
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

// testRelay is one identity.relays entry: its key is read from Env, or,
// when Env is empty, given by KeySHA256 (hex); IdentityHeaders is the
// identity_headers mapping in YAML flow form, e.g. "{tenant: X-Tenant}".
type testRelay struct {
	Name, Env, KeySHA256, IdentityHeaders string
}

// testTenant is one ai.tenants entry.
type testTenant struct {
	Name    string
	Backend string // empty: none
	// Sensitive writes sensitive: true.
	Sensitive bool
	// Budget is the tenant's budget in YAML flow form, e.g.
	// "{tokens_per_day: 100}"; empty: none.
	Budget string
	Agents []testAgent
}

// testAgent is one agents entry of a tenant.
type testAgent struct {
	Name, Backend string
	Sensitive     bool
}

// testGRPC is ai.grpc: the descriptor set files and the routed services,
// service name to backend, written in sorted order.
type testGRPC struct {
	DescriptorSets []string
	Services       map[string]string
}

// testVision is ai.vision; empty fields are left out.
type testVision struct {
	AllowedOrigins []string
	MaxBodyBytes   string // e.g. "1MiB"
}

// testTLS is a tls block: server.tls (CertFile, KeyFile, ClientCAFile) or
// a backend's (CAFile, CertFile, KeyFile); empty fields are left out,
// paths are quoted.
type testTLS struct {
	CAFile, CertFile, KeyFile, ClientCAFile string
}

// flow renders t in YAML flow form.
func (t testTLS) flow() string {
	var parts []string
	for _, f := range []struct{ k, v string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"client_ca_file", t.ClientCAFile}} {
		if f.v != "" {
			parts = append(parts, fmt.Sprintf("%s: %q", f.k, f.v))
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// testBackend is one ai.backends entry; empty fields are left out.
type testBackend struct {
	Name string
	// Kind is openai (when empty), relay or grpc.
	Kind string
	URL  string // ai.backends.NAME.url as written, e.g. http://127.0.0.1:9/v1
	// Bearer sets auth to a bearer secret, env:FLEXWAY_TEST_UPSTREAM_TOKEN;
	// Auth, when set, is the auth mapping in YAML flow form instead.
	Bearer bool
	Auth   string
	// TLS, when set, is the backend's tls (CAFile, CertFile, KeyFile).
	TLS *testTLS
	// Internal writes external: false.
	Internal bool
	// Metering is metering (local or upstream); IdentityHeaders the
	// identity_headers mapping in YAML flow form.
	Metering, IdentityHeaders string
	Models                    []string
	DefaultModel              string
	// Price is the input and output euros per million tokens; nil: none.
	Price        *[2]float64
	Capabilities []string
	// Fallback is the fallback list in YAML flow form, e.g. "[spare]".
	Fallback             string
	Timeout, IdleTimeout string
	// CircuitBreaker in YAML flow form, e.g. "{failures: 5, open_for: 30s}".
	CircuitBreaker string
	// Extra is more YAML lines under the backend, indented six spaces
	// (api_version, max_output_tokens, a price with cache tiers...).
	Extra string
}

// acmeBot is the demo key's entry: tenant acme, agent bot (demoKey).
var acmeBot = testKey{Name: "acme-bot", Env: "FLEXWAY_TEST_KEY", Tenant: "acme", Agent: "bot"}

// baseTestConfig is the base test configuration, the one every other
// builds on: the demo key, and ai.backend main at upstreamURL (models
// m-large and m-small, chat and embeddings, 2 s timeouts, a bearer secret),
// with the audit in audit.jsonl.
func baseTestConfig(upstreamURL string) testConfig {
	return testConfig{
		Keys:      []testKey{acmeBot},
		Backend:   "main",
		Backends:  []testBackend{baseBackend("main", upstreamURL)},
		AuditPath: "audit.jsonl",
	}
}

// baseBackend is the base configuration's backend, named name, at the
// upstream upstreamURL (/v1 appended).
func baseBackend(name, upstreamURL string) testBackend {
	return testBackend{Name: name, URL: upstreamURL + "/v1", Bearer: true, Models: []string{"m-large", "m-small"},
		DefaultModel: "m-small", Capabilities: []string{"chat", "embeddings"}, Timeout: "2s", IdleTimeout: "2s"}
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
	// line writes "key: value" at indent when value is set.
	line := func(indent, key, value string) {
		if value != "" {
			fmt.Fprintf(&b, "%s%s: %s\n", indent, key, value)
		}
	}
	fmt.Fprintf(&b, "server:\n  http: %s\n  grpc: %s\n", or(c.HTTP, "127.0.0.1:0"), or(c.GRPC, "localhost:0"))
	if c.AdminKey {
		b.WriteString("  admin_key: env:FLEXWAY_TEST_ADMIN_KEY\n")
	}
	if c.TLS != nil {
		line("  ", "tls", c.TLS.flow())
	}
	line("  ", "max_inflight_body_bytes", c.MaxInflightBodyBytes)
	b.WriteString("identity:\n  api_keys:\n")
	for _, k := range c.Keys {
		fmt.Fprintf(&b, "    - name: %s\n      key: env:%s\n      tenant: %s\n", k.Name, k.Env, k.Tenant)
		line("      ", "agent", k.Agent)
	}
	if len(c.Relays) > 0 {
		b.WriteString("  relays:\n")
		for _, r := range c.Relays {
			fmt.Fprintf(&b, "    - name: %s\n", r.Name)
			if r.Env != "" {
				fmt.Fprintf(&b, "      key: env:%s\n", r.Env)
			}
			line("      ", "key_sha256", r.KeySHA256)
			line("      ", "identity_headers", r.IdentityHeaders)
		}
	}
	fmt.Fprintf(&b, "ai:\n  backend: %s\n", c.Backend)
	line("  ", "sensitive_backend", c.SensitiveBackend)
	if c.SoftBackend != "" || c.Budget != "" {
		b.WriteString("  budget:\n")
		line("    ", "soft_backend", c.SoftBackend)
		writeLines(&b, c.Budget)
	}
	if len(c.Tenants) > 0 {
		b.WriteString("  tenants:\n")
		for _, t := range c.Tenants {
			if t.Backend == "" && !t.Sensitive && t.Budget == "" && len(t.Agents) == 0 {
				fmt.Fprintf(&b, "    %s: {}\n", t.Name)
				continue
			}
			fmt.Fprintf(&b, "    %s:\n", t.Name)
			line("      ", "backend", t.Backend)
			if t.Sensitive {
				b.WriteString("      sensitive: true\n")
			}
			line("      ", "budget", t.Budget)
			if len(t.Agents) > 0 {
				b.WriteString("      agents:\n")
				for _, a := range t.Agents {
					var fields []string
					if a.Backend != "" {
						fields = append(fields, "backend: "+a.Backend)
					}
					if a.Sensitive {
						fields = append(fields, "sensitive: true")
					}
					fmt.Fprintf(&b, "        %s: {%s}\n", a.Name, strings.Join(fields, ", "))
				}
			}
		}
	}
	if c.GRPCServices != nil {
		fmt.Fprintf(&b, "  grpc:\n    descriptor_sets: [%s]\n    services:\n", strings.Join(c.GRPCServices.DescriptorSets, ", "))
		services := make([]string, 0, len(c.GRPCServices.Services))
		for s := range c.GRPCServices.Services {
			services = append(services, s)
		}
		sort.Strings(services)
		for _, s := range services {
			fmt.Fprintf(&b, "      %s: %s\n", s, c.GRPCServices.Services[s])
		}
	}
	if v := c.Vision; v != nil {
		b.WriteString("  vision:\n")
		if len(v.AllowedOrigins) > 0 {
			fmt.Fprintf(&b, "    allowed_origins: [%s]\n", strings.Join(v.AllowedOrigins, ", "))
		}
		line("    ", "max_body_bytes", v.MaxBodyBytes)
	}
	b.WriteString("  backends:\n")
	for _, be := range c.Backends {
		fmt.Fprintf(&b, "    %s:\n", be.Name)
		line("      ", "kind", be.Kind)
		fmt.Fprintf(&b, "      url: %s\n", be.URL)
		if be.Bearer {
			b.WriteString("      auth: {type: bearer, secret: env:FLEXWAY_TEST_UPSTREAM_TOKEN}\n")
		}
		line("      ", "auth", be.Auth)
		if be.TLS != nil {
			line("      ", "tls", be.TLS.flow())
		}
		if be.Internal {
			b.WriteString("      external: false\n")
		}
		line("      ", "metering", be.Metering)
		line("      ", "identity_headers", be.IdentityHeaders)
		if len(be.Models) > 0 {
			fmt.Fprintf(&b, "      models: [%s]\n", strings.Join(be.Models, ", "))
		}
		line("      ", "default_model", be.DefaultModel)
		if be.Price != nil {
			fmt.Fprintf(&b, "      price: {input: %.2f, output: %.2f}\n", be.Price[0], be.Price[1])
		}
		if len(be.Capabilities) > 0 {
			fmt.Fprintf(&b, "      capabilities: [%s]\n", strings.Join(be.Capabilities, ", "))
		}
		line("      ", "fallback", be.Fallback)
		line("      ", "timeout", be.Timeout)
		line("      ", "idle_timeout", be.IdleTimeout)
		line("      ", "circuit_breaker", be.CircuitBreaker)
		writeLines(&b, be.Extra)
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
		{Name: "main", URL: mainURL + "/v1", Internal: true, Models: []string{"m"}, DefaultModel: "m", Price: &[2]float64{1, 2},
			Capabilities: []string{"chat", "embeddings"}, Fallback: "[cheap]", Timeout: "2s", IdleTimeout: "2s"},
		{Name: "cheap", URL: cheapURL + "/v1", Internal: true, Models: []string{"m"}, DefaultModel: "m", Price: &[2]float64{0.10, 0.20},
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
		{Name: "main", URL: mainURL + "/v1", Models: []string{"m"}, DefaultModel: "m", Fallback: mainFallback, Timeout: "300ms", IdleTimeout: "2s", CircuitBreaker: breaker},
		{Name: "spare", URL: spareURL + "/v1", Models: []string{"m"}, DefaultModel: "m", Fallback: spareFallback, Timeout: "300ms", IdleTimeout: "2s"},
	}
	return c.yaml()
}
