package config_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/flexway/flexway/server/config"
)

const (
	hashA = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
	hashB = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
)

var (
	chat       = config.CapabilityChat
	vision     = config.CapabilityVision
	embeddings = config.CapabilityEmbeddings
)

// validConfig is a valid configuration built in code, with one backend of
// each shape the rules talk about.
func validConfig(t *testing.T) *config.Config {
	t.Helper()
	c := &config.Config{
		Identity: config.Identity{
			APIKeys: []config.APIKey{{Name: "a", KeySHA256: hashA, Tenant: "acme"}},
			Relays: []config.Relay{{Name: "edge", KeySHA256: hashB,
				IdentityHeaders: config.IdentityHeaders{Tenant: "Flexway-Tenant"}}},
		},
		AI: config.AI{
			Backend:      "main",
			Capabilities: map[config.Capability]string{vision: "main", embeddings: "onprem"},
			Tenants: map[string]config.Tenant{
				"acme": {Backend: "cheap", Agents: map[string]config.Agent{"bot": {Backend: "main"}}},
			},
			Backends: map[string]config.Backend{
				"main": {
					URL: "https://llm.example.com/v1", Models: []string{"large-1", "small-1"}, DefaultModel: "small-1",
					Capabilities: []config.Capability{chat, vision}, Fallback: []string{"cheap", "onprem"},
					Auth: config.Auth{Type: config.AuthBearer, Secret: mustSecret(t, "env:MAIN_TOKEN")},
				},
				"cheap":  {URL: "https://cheap.example.com/v1", Price: config.Price{Input: 0.15, Output: 0.6}},
				"onprem": {URL: "http://10.0.0.5:8000/v1", External: ptr(false), Capabilities: []config.Capability{chat, embeddings}},
				"peer": {Kind: config.KindRelay, URL: "https://hq.example.com/v1", Metering: config.MeteringUpstream,
					IdentityHeaders: config.IdentityHeaders{Tenant: "Flexway-Tenant", Agent: "Flexway-Agent", Sensitive: "Flexway-Sensitive"}},
				"ocr":  {Kind: config.KindGRPC, URL: "dns:///ocr.internal:9000"},
				"ocr2": {Kind: config.KindGRPC, URL: "ocr2.internal:9000"},
			},
			GRPC: config.GRPC{Services: map[string]string{"acme.ocr.v1.OcrService": "ocr"}},
		},
	}
	c.ApplyDefaults()
	return c
}

func mustSecret(t *testing.T, ref string) config.Secret {
	t.Helper()
	s, err := config.ParseSecret(ref)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// backend edits one backend of c in place.
func backend(c *config.Config, name string, edit func(b *config.Backend)) {
	b := c.AI.Backends[name]
	edit(&b)
	c.AI.Backends[name] = b
}

func TestValidConfigHasNoProblem(t *testing.T) {
	warnings, err := validConfig(t).Validate()
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Validate() = %v, %v; want no problem", warnings, err)
	}
}

func TestValidate(t *testing.T) {
	tests := []validateCase{
		// Version and server.
		{name: "version other than 1", edit: func(c *config.Config) { c.Version = 2 },
			wantPath: "version", wantText: "unsupported version 2"},
		{name: "http not host:port", edit: func(c *config.Config) { c.Server.HTTP = "localhost" },
			wantPath: "server.http", wantText: `"localhost" is not a host:port`},
		{name: "grpc port not a number", edit: func(c *config.Config) { c.Server.GRPC = "127.0.0.1:grpc" },
			wantPath: "server.grpc", wantText: "is not a host:port"},
		{name: "listeners on one address", edit: func(c *config.Config) { c.Server.GRPC = c.Server.HTTP },
			wantPath: "server.grpc", wantText: "same address as server.http"},
		{name: "tls key without cert", edit: func(c *config.Config) { c.Server.TLS.KeyFile = "/k.pem" },
			wantPath: "server.tls.cert_file", wantText: "required with key_file"},
		{name: "client CA without tls", edit: func(c *config.Config) { c.Server.TLS.ClientCAFile = "/ca.pem" },
			wantPath: "server.tls.client_ca_file", wantText: "needs cert_file and key_file"},

		// Identity.
		{name: "api key with both hash and key", edit: func(c *config.Config) {
			c.Identity.APIKeys[0].Key = mustSecret(t, "env:A")
		}, wantPath: "identity.api_keys[0]", wantText: "set key_sha256 or key, not both"},
		{name: "api key with neither", edit: func(c *config.Config) { c.Identity.APIKeys[0].KeySHA256 = "" },
			wantPath: "identity.api_keys[0]", wantText: "one of key_sha256 or key is required"},
		{name: "api key hash not 64 hex", edit: func(c *config.Config) { c.Identity.APIKeys[0].KeySHA256 = hashA[:63] + "g" },
			wantPath: "identity.api_keys[0].key_sha256", wantText: "want 64 hex digits"},
		{name: "api key hash too short", edit: func(c *config.Config) { c.Identity.APIKeys[0].KeySHA256 = hashA[:62] },
			wantPath: "identity.api_keys[0].key_sha256", wantText: "got 62 characters"},
		{name: "api key without tenant", edit: func(c *config.Config) { c.Identity.APIKeys[0].Tenant = "" },
			wantPath: "identity.api_keys[0].tenant", wantText: "required"},
		{name: "api key without name", edit: func(c *config.Config) { c.Identity.APIKeys[0].Name = "" },
			wantPath: "identity.api_keys[0].name", wantText: "required"},
		{name: "api key names unique", edit: func(c *config.Config) {
			c.Identity.APIKeys = append(c.Identity.APIKeys, config.APIKey{Name: "a", Key: mustSecret(t, "env:B"), Tenant: "acme"})
		}, wantPath: "identity.api_keys[1].name", wantText: `duplicate name "a" (also identity.api_keys[0])`},
		{name: "api key hashes unique", edit: func(c *config.Config) {
			c.Identity.APIKeys = append(c.Identity.APIKeys, config.APIKey{Name: "b", KeySHA256: strings.ToUpper(hashA), Tenant: "acme"})
		}, wantPath: "identity.api_keys[1]", wantText: "same key as identity.api_keys[0]"},
		{name: "relay key equal to an api key", edit: func(c *config.Config) { c.Identity.Relays[0].KeySHA256 = hashA },
			wantPath: "identity.relays[0]", wantText: "same key as identity.api_keys[0]"},
		{name: "relay without tenant header", edit: func(c *config.Config) { c.Identity.Relays[0].IdentityHeaders.Tenant = "" },
			wantPath: "identity.relays[0].identity_headers.tenant", wantText: "required"},
		{name: "relay header not a token", edit: func(c *config.Config) { c.Identity.Relays[0].IdentityHeaders.Agent = "Flexway Agent" },
			wantPath: "identity.relays[0].identity_headers.agent", wantText: "not a valid header name"},
		{name: "relay without key", edit: func(c *config.Config) { c.Identity.Relays[0].KeySHA256 = "" },
			wantPath: "identity.relays[0]", wantText: "one of key_sha256 or key is required"},

		// Backend references.
		{name: "no backend", edit: func(c *config.Config) { c.AI.Backends = nil; c.AI.Backend = "" },
			wantPath: "ai.backends", wantText: "at least one backend is required"},
		{name: "no default backend among several", edit: func(c *config.Config) { c.AI.Backend = "" },
			wantPath: "ai.backend", wantText: "required: the default backend, one of cheap, main, ocr, ocr2, onprem, peer"},
		{name: "default backend unknown", edit: func(c *config.Config) { c.AI.Backend = "mian" },
			wantPath: "ai.backend", wantText: `no backend "mian" in ai.backends`},
		{name: "default backend of kind grpc", edit: func(c *config.Config) { c.AI.Backend = "ocr" },
			wantPath: "ai.backend", wantText: `backend "ocr" is kind grpc`},
		{name: "capability override unknown backend", edit: func(c *config.Config) { c.AI.Capabilities[vision] = "nope" },
			wantPath: "ai.capabilities.vision", wantText: `no backend "nope"`},
		{name: "capability override to a backend without it", edit: func(c *config.Config) { c.AI.Capabilities[embeddings] = "cheap" },
			wantPath: "ai.capabilities.embeddings", wantText: `backend "cheap" does not list capability embeddings`},
		{name: "capability override of an unknown capability", edit: func(c *config.Config) { c.AI.Capabilities["audio"] = "main" },
			wantPath: "ai.capabilities.audio", wantText: `unknown capability "audio"`},
		{name: "tenant backend unknown", edit: func(c *config.Config) { c.AI.Tenants["acme"] = config.Tenant{Backend: "nope"} },
			wantPath: "ai.tenants.acme.backend", wantText: `no backend "nope"`},
		{name: "agent backend unknown", edit: func(c *config.Config) {
			c.AI.Tenants["acme"].Agents["bot"] = config.Agent{Backend: "nope"}
		}, wantPath: "ai.tenants.acme.agents.bot.backend", wantText: `no backend "nope"`},
		{name: "soft backend unknown", edit: func(c *config.Config) { c.AI.Budget.SoftBackend = "nope" },
			wantPath: "ai.budget.soft_backend", wantText: `no backend "nope"`},
		{name: "sensitive backend unknown", edit: func(c *config.Config) { c.AI.SensitiveBackend = "nope" },
			wantPath: "ai.sensitive_backend", wantText: `no backend "nope"`},
		{name: "sensitive backend external", edit: func(c *config.Config) { c.AI.SensitiveBackend = "cheap" },
			wantPath: "ai.sensitive_backend", wantText: `backend "cheap" is external`},
		{name: "sensitive backend external by default as a relay", edit: func(c *config.Config) { c.AI.SensitiveBackend = "peer" },
			wantPath: "ai.sensitive_backend", wantText: `backend "peer" is external`},
		{name: "fallback unknown", edit: func(c *config.Config) {
			backend(c, "main", func(b *config.Backend) { b.Fallback = []string{"cheap", "nope"} })
		},
			wantPath: "ai.backends.main.fallback[1]", wantText: `no backend "nope"`},
		{name: "fallback to itself", edit: func(c *config.Config) { backend(c, "main", func(b *config.Backend) { b.Fallback = []string{"main"} }) },
			wantPath: "ai.backends.main.fallback[0]", wantText: "cannot fall back to itself"},
		{name: "fallback duplicate", edit: func(c *config.Config) {
			backend(c, "main", func(b *config.Backend) { b.Fallback = []string{"cheap", "onprem", "cheap"} })
		}, wantPath: "ai.backends.main.fallback[2]", wantText: `duplicate fallback "cheap"`},
		{name: "fallback to a grpc backend", edit: func(c *config.Config) { backend(c, "main", func(b *config.Backend) { b.Fallback = []string{"ocr"} }) },
			wantPath: "ai.backends.main.fallback[0]", wantText: "a kind openai backend cannot fall back to it"},
		{name: "grpc service on a non-grpc backend", edit: func(c *config.Config) { c.AI.GRPC.Services["acme.ocr.v1.OcrService"] = "main" },
			wantPath: `ai.grpc.services["acme.ocr.v1.OcrService"]`, wantText: "must name a kind: grpc backend"},
		{name: "grpc service on an unknown backend", edit: func(c *config.Config) { c.AI.GRPC.Services["acme.x.v1.X"] = "nope" },
			wantPath: `ai.grpc.services["acme.x.v1.X"]`, wantText: `no backend "nope"`},

		// Backends.
		{name: "url missing", edit: func(c *config.Config) { backend(c, "cheap", func(b *config.Backend) { b.URL = "" }) },
			wantPath: "ai.backends.cheap.url", wantText: "required"},
		{name: "url does not parse", edit: func(c *config.Config) { backend(c, "cheap", func(b *config.Backend) { b.URL = "https://[::1" }) },
			wantPath: "ai.backends.cheap.url", wantText: "is not an http or https URL"},
		{name: "url not http", edit: func(c *config.Config) {
			backend(c, "cheap", func(b *config.Backend) { b.URL = "ftp://cheap.example.com" })
		},
			wantPath: "ai.backends.cheap.url", wantText: "is not an http or https URL"},
		{name: "relay url without host", edit: func(c *config.Config) { backend(c, "peer", func(b *config.Backend) { b.URL = "https:///v1" }) },
			wantPath: "ai.backends.peer.url", wantText: "is not an http or https URL"},
		{name: "url with user info", edit: func(c *config.Config) {
			backend(c, "main", func(b *config.Backend) { b.URL = "https://user:pw-SECRET@llm.example.com/v1" })
		}, wantPath: "ai.backends.main.url", wantText: "user info is not allowed in a URL; use auth"},
		{name: "relay url with a user name only", edit: func(c *config.Config) {
			backend(c, "peer", func(b *config.Backend) { b.URL = "https://flexway@hq.example.com/v1" })
		}, wantPath: "ai.backends.peer.url", wantText: "user info is not allowed in a URL; use auth"},
		{name: "tls with an http url", edit: func(c *config.Config) {
			backend(c, "onprem", func(b *config.Backend) { b.TLS.CAFile = "/ca.pem" })
		}, wantPath: "ai.backends.onprem.tls", wantText: "tls needs an https url"},
		{name: "api key in the url query", edit: func(c *config.Config) {
			backend(c, "cheap", func(b *config.Backend) {
				b.URL = "https://cheap.example.com/v1?api-version=2024-10-21&api-key=Q-SECRET"
			})
		}, wantPath: "ai.backends.cheap.url",
			wantText: `query parameter "api-key": credentials may not be written in a URL query; use auth (type header or bearer) with a secret reference`},
		{name: "credential query names without case", edit: func(c *config.Config) {
			backend(c, "cheap", func(b *config.Backend) {
				b.URL = "https://cheap.example.com/v1?Access_Token=a&X-Amz-Signature=b&client_SECRET=c&PassWord=d&key=e"
			})
		}, wantPath: "ai.backends.cheap.url",
			wantText: `query parameter "Access_Token", "X-Amz-Signature", "client_SECRET", "PassWord", "key": credentials may not be written`},
		{name: "escaped credential query name", edit: func(c *config.Config) {
			backend(c, "cheap", func(b *config.Backend) { b.URL = "https://cheap.example.com/v1?api%2Dkey=x" })
		}, wantPath: "ai.backends.cheap.url", wantText: `query parameter "api-key": credentials`},
		{name: "grpc target not a target", edit: func(c *config.Config) { backend(c, "ocr", func(b *config.Backend) { b.URL = "ocr internal" }) },
			wantPath: "ai.backends.ocr.url", wantText: "is not a gRPC target"},
		{name: "unknown kind", edit: func(c *config.Config) { backend(c, "cheap", func(b *config.Backend) { b.Kind = "bedrock" }) },
			wantPath: "ai.backends.cheap.kind", wantText: `unknown kind "bedrock"`},
		{name: "bearer without secret", edit: func(c *config.Config) {
			backend(c, "main", func(b *config.Backend) { b.Auth.Secret = config.Secret{} })
		},
			wantPath: "ai.backends.main.auth.secret", wantText: "required for auth type bearer"},
		{name: "header without name", edit: func(c *config.Config) {
			backend(c, "main", func(b *config.Backend) { b.Auth.Type = config.AuthHeader })
		},
			wantPath: "ai.backends.main.auth.name", wantText: "required for auth type header"},
		{name: "header without secret", edit: func(c *config.Config) {
			backend(c, "cheap", func(b *config.Backend) { b.Auth = config.Auth{Type: config.AuthHeader, Name: "api-key"} })
		}, wantPath: "ai.backends.cheap.auth.secret", wantText: "required for auth type header"},
		{name: "header name not a token", edit: func(c *config.Config) {
			backend(c, "main", func(b *config.Backend) { b.Auth.Type, b.Auth.Name = config.AuthHeader, "api key" })
		}, wantPath: "ai.backends.main.auth.name", wantText: "not a valid header name"},
		{name: "token_file without path", edit: func(c *config.Config) {
			backend(c, "cheap", func(b *config.Backend) { b.Auth.Type = config.AuthTokenFile })
		}, wantPath: "ai.backends.cheap.auth.path", wantText: "required for auth type token_file"},
		{name: "none with a secret", edit: func(c *config.Config) {
			backend(c, "cheap", func(b *config.Backend) { b.Auth.Secret = mustSecret(t, "env:X") })
		}, wantPath: "ai.backends.cheap.auth.secret", wantText: "not used by auth type none"},
		{name: "unknown auth type", edit: func(c *config.Config) { backend(c, "cheap", func(b *config.Backend) { b.Auth.Type = "basic" }) },
			wantPath: "ai.backends.cheap.auth.type", wantText: `unknown auth type "basic"`},
		{name: "backend tls cert without key", edit: func(c *config.Config) { backend(c, "peer", func(b *config.Backend) { b.TLS.CertFile = "/c.pem" }) },
			wantPath: "ai.backends.peer.tls.key_file", wantText: "required with cert_file"},
		{name: "negative input price", edit: func(c *config.Config) { backend(c, "cheap", func(b *config.Backend) { b.Price.Input = -0.15 }) },
			wantPath: "ai.backends.cheap.price.input", wantText: "must not be negative"},
		{name: "negative output price", edit: func(c *config.Config) { backend(c, "cheap", func(b *config.Backend) { b.Price.Output = -1 }) },
			wantPath: "ai.backends.cheap.price.output", wantText: "must not be negative"},
		{name: "price not a number", edit: func(c *config.Config) { backend(c, "cheap", func(b *config.Backend) { b.Price.Output = math.Inf(1) }) },
			wantPath: "ai.backends.cheap.price.output", wantText: "not a number"},
		{name: "no capability", edit: func(c *config.Config) {
			backend(c, "cheap", func(b *config.Backend) { b.Capabilities = []config.Capability{} })
		},
			wantPath: "ai.backends.cheap.capabilities", wantText: "at least one"},
		{name: "unknown capability", edit: func(c *config.Config) {
			backend(c, "cheap", func(b *config.Backend) { b.Capabilities = []config.Capability{chat, "audio"} })
		}, wantPath: "ai.backends.cheap.capabilities[1]", wantText: `unknown capability "audio"`},
		{name: "duplicate capability", edit: func(c *config.Config) {
			backend(c, "cheap", func(b *config.Backend) { b.Capabilities = []config.Capability{chat, chat} })
		}, wantPath: "ai.backends.cheap.capabilities[1]", wantText: "duplicate capability chat"},
		{name: "capabilities on a grpc backend", edit: func(c *config.Config) {
			backend(c, "ocr", func(b *config.Backend) { b.Capabilities = []config.Capability{chat} })
		}, wantPath: "ai.backends.ocr.capabilities", wantText: "kind grpc serves no chat"},
		{name: "duplicate model", edit: func(c *config.Config) {
			backend(c, "main", func(b *config.Backend) { b.Models = []string{"small-1", "small-1"} })
		},
			wantPath: "ai.backends.main.models[1]", wantText: `duplicate model "small-1"`},
		{name: "zero timeout", edit: func(c *config.Config) { backend(c, "cheap", func(b *config.Backend) { b.Timeout = 0 }) },
			wantPath: "ai.backends.cheap.timeout", wantText: "must be positive"},
		{name: "negative idle timeout", edit: func(c *config.Config) { backend(c, "cheap", func(b *config.Backend) { b.IdleTimeout = -1 }) },
			wantPath: "ai.backends.cheap.idle_timeout", wantText: "must be positive"},
		{name: "zero breaker failures", edit: func(c *config.Config) { backend(c, "cheap", func(b *config.Backend) { b.CircuitBreaker.Failures = 0 }) },
			wantPath: "ai.backends.cheap.circuit_breaker.failures", wantText: "must be positive"},
		{name: "zero breaker open_for", edit: func(c *config.Config) { backend(c, "cheap", func(b *config.Backend) { b.CircuitBreaker.OpenFor = 0 }) },
			wantPath: "ai.backends.cheap.circuit_breaker.open_for", wantText: "must be positive"},
		{name: "unknown metering", edit: func(c *config.Config) { backend(c, "peer", func(b *config.Backend) { b.Metering = "remote" }) },
			wantPath: "ai.backends.peer.metering", wantText: `unknown metering "remote"`},
		{name: "identity headers on an openai backend", edit: func(c *config.Config) {
			backend(c, "cheap", func(b *config.Backend) { b.IdentityHeaders.Tenant = "Flexway-Tenant" })
		}, wantPath: "ai.backends.cheap.identity_headers", wantText: "only a kind: relay or kind: grpc backend"},
		{name: "relay identity headers without tenant", edit: func(c *config.Config) {
			backend(c, "peer", func(b *config.Backend) {
				b.IdentityHeaders = config.IdentityHeaders{Agent: "Flexway-Agent", Sensitive: "Flexway-Sensitive"}
			})
		}, wantPath: "ai.backends.peer.identity_headers.tenant", wantText: "required with agent or sensitive"},
		{name: "relay identity header not a token", edit: func(c *config.Config) {
			backend(c, "peer", func(b *config.Backend) { b.IdentityHeaders = config.IdentityHeaders{Tenant: "Flexway Tenant"} })
		}, wantPath: "ai.backends.peer.identity_headers.tenant", wantText: "not a valid header name"},

		// Budget, tenants, vision.
		{name: "soft zero", edit: func(c *config.Config) { c.AI.Budget.Soft = 0 },
			wantPath: "ai.budget.soft", wantText: "is not in (0, 1)"},
		{name: "soft above one", edit: func(c *config.Config) { c.AI.Budget.Soft = 1.5 },
			wantPath: "ai.budget.soft", wantText: "1.5 is not in (0, 1)"},
		{name: "soft at the cap itself", edit: func(c *config.Config) { c.AI.Budget.Soft = 1 },
			wantPath: "ai.budget.soft", wantText: "1 is not in (0, 1)"},
		{name: "soft NaN", edit: func(c *config.Config) { c.AI.Budget.Soft = math.NaN() },
			wantPath: "ai.budget.soft", wantText: "is not in (0, 1)"},
		{name: "negative reserve_output_tokens", edit: func(c *config.Config) { c.AI.Budget.ReserveOutputTokens = -1 },
			wantPath: "ai.budget.reserve_output_tokens", wantText: "must not be negative"},
		{name: "negative max_output_tokens", edit: func(c *config.Config) { c.AI.Budget.MaxOutputTokens = -5 },
			wantPath: "ai.budget.max_output_tokens", wantText: "must not be negative"},
		{name: "negative prompt_overhead_tokens", edit: func(c *config.Config) {
			b := c.AI.Backends["main"]
			b.PromptOverheadTokens = -1
			c.AI.Backends["main"] = b
		}, wantPath: "ai.backends.main.prompt_overhead_tokens", wantText: "must not be negative"},
		{name: "unknown time zone", edit: func(c *config.Config) { c.AI.Budget.Timezone = "Europe/Pariss" },
			wantPath: "ai.budget.timezone", wantText: `unknown time zone "Europe/Pariss"`},
		{name: "embedded store without path", edit: func(c *config.Config) { c.AI.Budget.Store.Path = "" },
			wantPath: "ai.budget.store.path", wantText: "required for store type embedded"},
		{name: "redis store without url", edit: func(c *config.Config) { c.AI.Budget.Store.Type = config.StoreRedis },
			wantPath: "ai.budget.store.url", wantText: "required for store type redis"},
		{name: "redis store with an http url", edit: func(c *config.Config) {
			c.AI.Budget.Store = config.Store{Type: config.StoreRedis, URL: "http://127.0.0.1:6379"}
		}, wantPath: "ai.budget.store.url", wantText: "want redis://host:port/db"},
		{name: "unknown store", edit: func(c *config.Config) { c.AI.Budget.Store.Type = "sqlite" },
			wantPath: "ai.budget.store.type", wantText: `unknown store type "sqlite"`},
		{name: "negative default tokens per day", edit: func(c *config.Config) { c.AI.Budget.Default.TokensPerDay = ptr(int64(-1)) },
			wantPath: "ai.budget.default.tokens_per_day", wantText: "must not be negative"},
		{name: "negative default tokens per month", edit: func(c *config.Config) { c.AI.Budget.Default.TokensPerMonth = ptr(int64(-1)) },
			wantPath: "ai.budget.default.tokens_per_month", wantText: "must not be negative"},
		{name: "negative tenant euro cap", edit: func(c *config.Config) {
			c.AI.Tenants["acme"] = config.Tenant{Budget: config.Caps{EURPerMonth: ptr(-5.0)}}
		}, wantPath: "ai.tenants.acme.budget.eur_per_month", wantText: "must not be negative"},
		{name: "agent euro cap too large", edit: func(c *config.Config) {
			c.AI.Tenants["acme"].Agents["bot"] = config.Agent{Budget: config.Caps{EURPerMonth: ptr(1e13)}}
		}, wantPath: "ai.tenants.acme.agents.bot.budget.eur_per_month", wantText: "too large"},
		{name: "zero max_body_bytes", edit: func(c *config.Config) { c.AI.Vision.MaxBodyBytes = 0 },
			wantPath: "ai.vision.max_body_bytes", wantText: "must be positive"},
		{name: "zero max_inflight_body_bytes", edit: func(c *config.Config) { c.Server.MaxInflightBodyBytes = 0 },
			wantPath: "server.max_inflight_body_bytes", wantText: "must be positive"},
		{name: "max_inflight_body_bytes below max_body_bytes", edit: func(c *config.Config) { c.Server.MaxInflightBodyBytes = c.AI.Vision.MaxBodyBytes - 1 },
			wantPath: "server.max_inflight_body_bytes", wantText: "below ai.vision.max_body_bytes"},
		{name: "negative max_image_bytes", edit: func(c *config.Config) { c.AI.Vision.MaxImageBytes = -1 },
			wantPath: "ai.vision.max_image_bytes", wantText: "must be positive"},
		{name: "negative reserve_tokens_per_image", edit: func(c *config.Config) { c.AI.Vision.ReserveTokensPerImage = -1 },
			wantPath: "ai.vision.reserve_tokens_per_image", wantText: "must not be negative"},
		{name: "http origin", edit: func(c *config.Config) { c.AI.Vision.AllowedOrigins = []string{"http://images.example.com"} },
			wantPath: "ai.vision.allowed_origins[0]", wantText: "is not an https origin"},
		{name: "origin with a path", edit: func(c *config.Config) {
			c.AI.Vision.AllowedOrigins = []string{"https://ok.example.com", "https://images.example.com/cats"}
		}, wantPath: "ai.vision.allowed_origins[1]", wantText: "is not an https origin"},
		{name: "sensitive header not a token", edit: func(c *config.Config) { c.AI.SensitiveHeader = "Flexway Sensitive" },
			wantPath: "ai.sensitive_header", wantText: "not a valid header name"},
		{name: "audit path empty", edit: func(c *config.Config) { c.Audit.Path = "" },
			wantPath: "audit.path", wantText: "required"},

		// Warnings.
		{name: "default model not in models", edit: func(c *config.Config) { backend(c, "main", func(b *config.Backend) { b.DefaultModel = "medium-1" }) },
			wantPath: "ai.backends.main.default_model", wantText: `"medium-1" is not in models`, wantWarning: true},
		{name: "relay metered locally", edit: func(c *config.Config) {
			backend(c, "peer", func(b *config.Backend) { b.Metering = config.MeteringLocal })
		},
			wantPath: "ai.backends.peer.metering", wantWarning: true,
			wantText: "relay metered locally: consumption is counted by both gateways, this one and the peer; set metering: upstream if the peer meters and bills"},
		{name: "image limit above body limit", edit: func(c *config.Config) { c.AI.Vision.MaxImageBytes = 32 * config.MiB },
			wantPath: "ai.vision.max_image_bytes", wantText: "32MiB exceeds max_body_bytes (24MiB)", wantWarning: true},
		{name: "sensitive tenant routed to its external backend", edit: func(c *config.Config) {
			c.AI.Tenants["acme"] = config.Tenant{Backend: "cheap", Sensitive: true}
		}, wantPath: "ai.tenants.acme.sensitive", wantWarning: true,
			wantText: "every call of this tenant is sensitive but routes to external backend cheap and ai.sensitive_backend is not set: its calls will be refused (403)"},
		{name: "redis password inline", edit: func(c *config.Config) {
			c.AI.Budget.Store = config.Store{Type: config.StoreRedis, URL: "redis://:pw@127.0.0.1:6379/0"}
		}, wantPath: "ai.budget.store.url", wantText: "inline password", wantWarning: true},
	}
	runValidateCases(t, validConfig, tests)
}

// The reference's own rule: a default backend is needed only when there is
// a choice.
func TestApplyDefaultsOnlyBackend(t *testing.T) {
	tests := []struct {
		name     string
		backends []string
		want     string
	}{
		{name: "one backend is the default", backends: []string{"local"}, want: "local"},
		{name: "two backends: no guess", backends: []string{"a", "b"}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &config.Config{AI: config.AI{Backends: map[string]config.Backend{}}}
			for _, name := range tt.backends {
				c.AI.Backends[name] = config.Backend{URL: "http://127.0.0.1:8000/v1"}
			}
			c.ApplyDefaults()
			if c.AI.Backend != tt.want {
				t.Errorf("ai.backend = %q, want %q", c.AI.Backend, tt.want)
			}
		})
	}
}

// A relay is external unless declared otherwise; the warning about local
// metering follows the relay, wherever it is in the file.
func TestLoadRelayMeteredLocallyWarning(t *testing.T) {
	content := base + "    peer:\n      kind: relay\n      url: https://hq.example.com/v1\n      identity_headers: {tenant: Flexway-Tenant}\n  backend: main\n"
	path, errs, warnings := loadProblems(t, content)
	if errs != nil {
		t.Fatal(errs)
	}
	if len(warnings) != 1 {
		t.Fatalf("warnings = %v, want one", warnings)
	}
	// metering is absent: the warning points at the backend's line.
	want := path + ":12: warning: ai.backends.peer.metering: relay metered locally: consumption is counted by both gateways, this one and the peer; set metering: upstream if the peer meters and bills"
	if got := warnings[0].Error(); got != want {
		t.Errorf("warning =\n  %s\nwant\n  %s", got, want)
	}
}

// TestValidateURLNeverEchoesCredentials: a backend URL's user info and
// query are never repeated by a problem, whatever else is wrong with it.
func TestValidateURLNeverEchoesCredentials(t *testing.T) {
	for _, raw := range []string{
		"https://user:pw-SECRET@llm.example.com/v1?api-key=Q-SECRET",
		"ftp://user:pw-SECRET@llm.example.com/v1?token=Q-SECRET",
		"https://user:pw-SECRET@[::1/v1?sig=Q-SECRET",
		"https:///v1?password=Q-SECRET",
		"https:user:pw-SECRET@llm.example.com",
	} {
		t.Run(raw, func(t *testing.T) {
			c := validConfig(t)
			backend(c, "main", func(b *config.Backend) { b.URL = raw })
			warnings, err := c.Validate()
			if err == nil {
				t.Fatal("Validate() = nil, want errors")
			}
			for _, text := range []string{err.Error(), warnings.Error()} {
				if strings.Contains(text, "SECRET") {
					t.Errorf("problems repeat a credential of the URL:\n%s", text)
				}
			}
		})
	}
}

// TestValidateURLQueryAllowed: query parameters that do not name a
// credential stay allowed, and https with tls is fine.
func TestValidateURLQueryAllowed(t *testing.T) {
	for _, raw := range []string{
		"https://res.openai.azure.com/openai/deployments/d?api-version=2024-10-21",
		"https://llm.example.com/v1?region=eu&tier=batch&",
		"https://llm.example.com/v1?",
	} {
		t.Run(raw, func(t *testing.T) {
			c := validConfig(t)
			backend(c, "main", func(b *config.Backend) {
				b.URL = raw
				b.TLS = config.BackendTLS{CAFile: "/ca.pem", CertFile: "/c.pem", KeyFile: "/k.pem"}
			})
			if warnings, err := c.Validate(); err != nil || len(warnings) != 0 {
				t.Errorf("Validate() = %v, %v; want no problem", warnings, err)
			}
		})
	}
}

// TestValidateSensitiveRoutes: a tenant or agent sensitive by configuration
// whose calls route (agent, else tenant, else ai.backend) to an external
// backend is warned about when no ai.sensitive_backend is set, and only
// then.
func TestValidateSensitiveRoutes(t *testing.T) {
	tests := []struct {
		name string
		// ai.backend is main (external); cheap is external, onprem
		// internal, peer a relay declared internal below.
		sensitiveBackend string
		tenant           config.Tenant
		want             []string // "path: backend"
	}{
		{name: "sensitive tenant on the default backend",
			tenant: config.Tenant{Sensitive: true},
			want:   []string{"ai.tenants.acme.sensitive: main"}},
		{name: "sensitive tenant on its own external backend",
			tenant: config.Tenant{Sensitive: true, Backend: "cheap"},
			want:   []string{"ai.tenants.acme.sensitive: cheap"}},
		{name: "sensitive tenant on an internal backend",
			tenant: config.Tenant{Sensitive: true, Backend: "onprem"}},
		{name: "sensitive tenant routed to an internal relay",
			tenant: config.Tenant{Sensitive: true, Backend: "peer"}},
		{name: "sensitive tenant with a sensitive backend set", sensitiveBackend: "onprem",
			tenant: config.Tenant{Sensitive: true, Agents: map[string]config.Agent{"bot": {Sensitive: true, Backend: "cheap"}}}},
		{name: "not sensitive on an external backend",
			tenant: config.Tenant{Backend: "cheap", Agents: map[string]config.Agent{"bot": {}}}},
		{name: "sensitive agent on its own external backend",
			tenant: config.Tenant{Backend: "onprem", Agents: map[string]config.Agent{"bot": {Sensitive: true, Backend: "cheap"}}},
			want:   []string{"ai.tenants.acme.agents.bot.sensitive: cheap"}},
		{name: "sensitive agent on its tenant's external backend",
			tenant: config.Tenant{Backend: "cheap", Agents: map[string]config.Agent{"bot": {Sensitive: true}}},
			want:   []string{"ai.tenants.acme.agents.bot.sensitive: cheap"}},
		{name: "sensitive agent on an internal backend",
			tenant: config.Tenant{Agents: map[string]config.Agent{"bot": {Sensitive: true, Backend: "onprem"}}}},
		{name: "agent of a sensitive tenant routed apart, externally",
			tenant: config.Tenant{Sensitive: true, Backend: "onprem", Agents: map[string]config.Agent{"bot": {Backend: "cheap"}}},
			want:   []string{"ai.tenants.acme.agents.bot.backend: cheap"}},
		{name: "agent of a sensitive tenant on the same backend: one warning",
			tenant: config.Tenant{Sensitive: true, Agents: map[string]config.Agent{"bot": {Sensitive: true}, "batch": {}}},
			want:   []string{"ai.tenants.acme.sensitive: main"}},
		{name: "an unknown backend is an error, not this warning",
			tenant: config.Tenant{Sensitive: true, Backend: "nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig(t)
			backend(c, "peer", func(b *config.Backend) { b.External = ptr(false) })
			c.AI.SensitiveBackend = tt.sensitiveBackend
			c.AI.Tenants = map[string]config.Tenant{"acme": tt.tenant}
			warnings, _ := c.Validate()
			var got []string
			for _, w := range warnings {
				who := "tenant"
				if strings.Contains(w.Path, ".agents.") {
					who = "agent"
				}
				for _, name := range []string{"main", "cheap", "onprem", "peer"} {
					if strings.Contains(w.Error(), "every call of this "+who) && strings.Contains(w.Error(), "external backend "+name+" ") {
						got = append(got, w.Path+": "+name)
					}
				}
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("sensitive route warnings:\n%s\nwant:\n%s\nall warnings: %v", strings.Join(got, "\n"), strings.Join(tt.want, "\n"), warnings)
			}
		})
	}
}

// TestRelayIdentityWarnings: a relay without identity headers is refused
// by its peer on every call; an internal relay that cannot pass the
// sensitive flag gets no sensitive call.
func TestRelayIdentityWarnings(t *testing.T) {
	for _, tc := range []struct{ relay, want string }{
		{"    peer:\n      kind: relay\n      url: https://hq.example.com/v1\n      metering: upstream\n", "ai.backends.peer.identity_headers: not set: the peer gets no tenant"},
		{"    peer:\n      kind: relay\n      url: https://hq.example.com/v1\n      metering: upstream\n      external: false\n      identity_headers: {tenant: Flexway-Tenant}\n", "ai.backends.peer.identity_headers.sensitive: not set: the peer cannot know a call is sensitive"},
	} {
		_, errs, warnings := loadProblems(t, base+tc.relay+"  backend: main\n")
		if errs != nil {
			t.Fatal(errs)
		}
		if len(warnings) != 1 || !strings.Contains(warnings[0].Error(), tc.want) {
			t.Errorf("warnings %v, want one with %q", warnings, tc.want)
		}
	}
}

// TestGRPCBackendKeysNotApplied: fallback and price on a kind: grpc
// backend load with a warning that they are not applied.
func TestGRPCBackendKeysNotApplied(t *testing.T) {
	relay := "    ocr:\n      kind: grpc\n      url: 127.0.0.1:9300\n      price: {input: 1, output: 1}\n      fallback: [ocr2]\n    ocr2:\n      kind: grpc\n      url: 127.0.0.1:9301\n"
	_, errs, warnings := loadProblems(t, base+relay+"  backend: main\n")
	if errs != nil {
		t.Fatal(errs)
	}
	text := fmt.Sprint(warnings)
	for _, want := range []string{"ai.backends.ocr.fallback: not applied", "ai.backends.ocr.price: not applied"} {
		if !strings.Contains(text, want) {
			t.Errorf("no warning %q in %s", want, text)
		}
	}
}
