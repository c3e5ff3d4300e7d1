package config_test

import (
	"math"
	"strings"
	"testing"

	"github.com/flexway/flexway/server/config"
)

// kindsConfig is validConfig plus one backend of each translated kind, as
// the reference writes them, with fallbacks across wire formats: claude
// (anthropic) to main (openai), gem (gemini) to claude, agentx (a2a) to
// gem, and main's price with a cache_write an OpenAI-compatible upstream
// (LiteLLM, a Flexway relay) may report.
func kindsConfig(t *testing.T) *config.Config {
	t.Helper()
	c := validConfig(t)
	c.AI.Backends["claude"] = config.Backend{
		Kind: config.KindAnthropic, URL: "https://anthropic.example.com",
		Auth:   config.Auth{Type: config.AuthHeader, Name: "x-api-key", Secret: mustSecret(t, "env:CLAUDE_KEY")},
		Models: []string{"claude-sonnet-4-5"}, DefaultModel: "claude-sonnet-4-5",
		Betas:        []string{"interleaved-thinking-2025-05-14", "files-api-2025-04-14"},
		Price:        config.Price{Input: 3, Output: 15, CacheRead: ptr(0.30), CacheWrite: ptr(3.75)},
		Capabilities: []config.Capability{chat, vision}, Fallback: []string{"main"},
	}
	c.AI.Backends["gem"] = config.Backend{
		Kind: config.KindGemini, URL: "https://gemini.example.com/v1beta",
		Auth:  config.Auth{Type: config.AuthHeader, Name: "x-goog-api-key", Secret: mustSecret(t, "env:GEMINI_KEY")},
		Price: config.Price{Input: 0.30, Output: 2.50, CacheRead: ptr(0.075)},
		// Gemini's examples carry an API version, never a credential, in
		// the query.
		Capabilities: []config.Capability{chat, vision, embeddings}, Fallback: []string{"claude"},
	}
	c.AI.Backends["agentx"] = config.Backend{
		Kind: config.KindA2A, URL: "https://agents.example.com/a2a?tenant=acme",
		Auth:  config.Auth{Type: config.AuthBearer, Secret: mustSecret(t, "env:AGENTX_KEY")},
		Price: config.Price{PerCall: 0.002}, Fallback: []string{"gem", "main"},
	}
	backend(c, "main", func(b *config.Backend) { b.Price.CacheWrite = ptr(3.0) })
	c.ApplyDefaults()
	return c
}

func TestValidKindsConfigHasNoProblem(t *testing.T) {
	c := kindsConfig(t)
	warnings, err := c.Validate()
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Validate() = %v, %v; want no problem", warnings, err)
	}
	claude, gem, agentx := c.AI.Backends["claude"], c.AI.Backends["gem"], c.AI.Backends["agentx"]
	runChecks(t, []check{
		{"claude.api_version (defaulted)", claude.APIVersion, "2023-06-01"},
		{"claude.max_output_tokens (defaulted)", claude.MaxOutputTokens, int64(4096)},
		{"gem.api_version (anthropic only)", gem.APIVersion, ""},
		{"gem.max_output_tokens (anthropic only)", gem.MaxOutputTokens, int64(0)},
		{"agentx.capabilities (defaulted)", agentx.Capabilities, []config.Capability{chat}},
		{"agentx.per_call", agentx.Price.PerCallNanoEUR(), int64(2_000_000)},
		{"claude.cache_write", claude.Price.CacheWriteNanoEURPerMTok(), int64(3_750_000_000)},
		{"gem.cache_read", gem.Price.CacheReadNanoEURPerMTok(), int64(75_000_000)},
	})
}

func TestValidateKinds(t *testing.T) {
	runValidateCases(t, kindsConfig, []validateCase{
		// URLs, as for openai.
		{name: "anthropic url not http", edit: func(c *config.Config) {
			backend(c, "claude", func(b *config.Backend) { b.URL = "ftp://anthropic.example.com" })
		}, wantPath: "ai.backends.claude.url", wantText: `"ftp://anthropic.example.com" is not an http or https URL`},
		{name: "gemini url without host", edit: func(c *config.Config) { backend(c, "gem", func(b *config.Backend) { b.URL = "https:///v1beta" }) },
			wantPath: "ai.backends.gem.url", wantText: "is not an http or https URL"},
		{name: "gemini key in the url query", edit: func(c *config.Config) {
			backend(c, "gem", func(b *config.Backend) { b.URL = "https://gemini.example.com/v1beta?key=AIza-SECRET" })
		}, wantPath: "ai.backends.gem.url",
			wantText: `query parameter "key": credentials may not be written in a URL query; use auth (type header, name x-goog-api-key) with a secret reference`},
		{name: "anthropic key in the url query", edit: func(c *config.Config) {
			backend(c, "claude", func(b *config.Backend) { b.URL = "https://anthropic.example.com?x-api-key=SECRET" })
		}, wantPath: "ai.backends.claude.url", wantText: `query parameter "x-api-key": credentials may not be written in a URL query; use auth (type header, name x-api-key)`},
		{name: "a2a token in the url query", edit: func(c *config.Config) {
			backend(c, "agentx", func(b *config.Backend) { b.URL = "https://agents.example.com/a2a?access_token=SECRET" })
		}, wantPath: "ai.backends.agentx.url", wantText: `query parameter "access_token": credentials may not be written in a URL query; use auth (type header or bearer)`},
		{name: "a2a url with user info", edit: func(c *config.Config) {
			backend(c, "agentx", func(b *config.Backend) { b.URL = "https://agent:pw@agents.example.com/a2a" })
		}, wantPath: "ai.backends.agentx.url", wantText: "user info is not allowed in a URL; use auth"},
		{name: "anthropic tls with an http url", edit: func(c *config.Config) {
			backend(c, "claude", func(b *config.Backend) { b.URL, b.TLS.CAFile = "http://10.0.0.8:8080", "/ca.pem" })
		}, wantPath: "ai.backends.claude.tls", wantText: "tls needs an https url"},

		// Capabilities per kind.
		{name: "embeddings on anthropic", edit: func(c *config.Config) {
			backend(c, "claude", func(b *config.Backend) { b.Capabilities = []config.Capability{chat, embeddings} })
		}, wantPath: "ai.backends.claude.capabilities[1]",
			wantText: "kind anthropic serves chat and vision, not embeddings: Anthropic's Messages API has no embeddings endpoint"},
		{name: "embeddings on a2a", edit: func(c *config.Config) {
			backend(c, "agentx", func(b *config.Backend) { b.Capabilities = []config.Capability{embeddings} })
		}, wantPath: "ai.backends.agentx.capabilities[0]",
			wantText: "kind a2a serves chat and vision, not embeddings: an A2A agent answers messages (message/send) and computes no embeddings"},
		{name: "unknown capability on gemini", edit: func(c *config.Config) {
			backend(c, "gem", func(b *config.Backend) { b.Capabilities = []config.Capability{chat, "audio"} })
		}, wantPath: "ai.backends.gem.capabilities[1]", wantText: `unknown capability "audio": want chat, vision or embeddings`},
		{name: "no capability on anthropic", edit: func(c *config.Config) {
			backend(c, "claude", func(b *config.Backend) { b.Capabilities = []config.Capability{} })
		}, wantPath: "ai.backends.claude.capabilities", wantText: "at least one of chat, vision or embeddings is required"},
		{name: "embeddings override to an agent", edit: func(c *config.Config) { c.AI.Capabilities[embeddings] = "agentx" },
			wantPath: "ai.capabilities.embeddings", wantText: `backend "agentx" does not list capability embeddings`},

		// Keys of kind anthropic only.
		{name: "api_version on openai", edit: func(c *config.Config) { backend(c, "cheap", func(b *config.Backend) { b.APIVersion = "2023-06-01" }) },
			wantPath: "ai.backends.cheap.api_version", wantText: "only a kind: anthropic backend sends anthropic-version; this one is kind openai: remove it"},
		{name: "api_version on gemini", edit: func(c *config.Config) { backend(c, "gem", func(b *config.Backend) { b.APIVersion = "v1beta" }) },
			wantPath: "ai.backends.gem.api_version", wantText: "this one is kind gemini"},
		{name: "betas on a2a", edit: func(c *config.Config) {
			backend(c, "agentx", func(b *config.Backend) { b.Betas = []string{"x-2025-01-01"} })
		},
			wantPath: "ai.backends.agentx.betas", wantText: "only a kind: anthropic backend sends anthropic-beta; this one is kind a2a"},
		{name: "max_output_tokens on gemini", edit: func(c *config.Config) { backend(c, "gem", func(b *config.Backend) { b.MaxOutputTokens = 8192 }) },
			wantPath: "ai.backends.gem.max_output_tokens",
			wantText: "only a kind: anthropic backend needs a max_tokens of its own; this one is kind gemini: remove it (ai.budget.max_output_tokens bounds the calls of every kind)"},
		{name: "max_output_tokens on relay", edit: func(c *config.Config) { backend(c, "peer", func(b *config.Backend) { b.MaxOutputTokens = -1 }) },
			wantPath: "ai.backends.peer.max_output_tokens", wantText: "this one is kind relay"},
		{name: "empty api_version", edit: func(c *config.Config) { backend(c, "claude", func(b *config.Backend) { b.APIVersion = "" }) },
			wantPath: "ai.backends.claude.api_version", wantText: "required for kind anthropic: the anthropic-version header"},
		{name: "api_version not a header value", edit: func(c *config.Config) {
			backend(c, "claude", func(b *config.Backend) { b.APIVersion = "2023-06-01\r\nX-Evil: 1" })
		}, wantPath: "ai.backends.claude.api_version", wantText: `is not a valid anthropic-version header value: want a version date such as 2023-06-01`},
		{name: "api_version not a date", edit: func(c *config.Config) { backend(c, "claude", func(b *config.Backend) { b.APIVersion = "latest" }) },
			wantPath: "ai.backends.claude.api_version", wantWarning: true,
			wantText: `"latest" is not a version date (YYYY-MM-DD) as Anthropic's versions are`},
		{name: "empty beta", edit: func(c *config.Config) {
			backend(c, "claude", func(b *config.Backend) { b.Betas = []string{"files-api-2025-04-14", ""} })
		}, wantPath: "ai.backends.claude.betas[1]", wantText: "empty beta name"},
		{name: "two betas in one entry", edit: func(c *config.Config) {
			backend(c, "claude", func(b *config.Backend) { b.Betas = []string{"files-api-2025-04-14, context-1m-2025-08-07"} })
		}, wantPath: "ai.backends.claude.betas[0]",
			wantText: `"files-api-2025-04-14, context-1m-2025-08-07" is not a valid anthropic-beta value: want one name such as interleaved-thinking-2025-05-14 (no space or comma; list each beta apart)`},
		{name: "duplicate beta", edit: func(c *config.Config) {
			backend(c, "claude", func(b *config.Backend) { b.Betas = []string{"a-1", "b-2", "a-1"} })
		}, wantPath: "ai.backends.claude.betas[2]", wantText: `duplicate beta "a-1"`},
		{name: "zero max_output_tokens", edit: func(c *config.Config) { backend(c, "claude", func(b *config.Backend) { b.MaxOutputTokens = 0 }) },
			wantPath: "ai.backends.claude.max_output_tokens", wantText: "must be positive: the Messages API requires max_tokens (absent, it is 4096)"},
		{name: "negative max_output_tokens", edit: func(c *config.Config) { backend(c, "claude", func(b *config.Backend) { b.MaxOutputTokens = -4096 }) },
			wantPath: "ai.backends.claude.max_output_tokens", wantText: "must be positive"},

		// Prices.
		{name: "negative cache_read", edit: func(c *config.Config) {
			backend(c, "claude", func(b *config.Backend) { b.Price.CacheRead = ptr(-0.3) })
		},
			wantPath: "ai.backends.claude.price.cache_read", wantText: "must not be negative"},
		{name: "cache_write not a number", edit: func(c *config.Config) {
			backend(c, "claude", func(b *config.Backend) { b.Price.CacheWrite = ptr(math.NaN()) })
		}, wantPath: "ai.backends.claude.price.cache_write", wantText: "not a number"},
		{name: "per_call too large", edit: func(c *config.Config) { backend(c, "agentx", func(b *config.Backend) { b.Price.PerCall = 2e9 }) },
			wantPath: "ai.backends.agentx.price.per_call", wantText: "too large: at most 1000000000 euros"},
		{name: "negative per_call on openai", edit: func(c *config.Config) { backend(c, "cheap", func(b *config.Backend) { b.Price.PerCall = -0.01 }) },
			wantPath: "ai.backends.cheap.price.per_call", wantText: "must not be negative"},
		{name: "cache_write on gemini", edit: func(c *config.Config) { backend(c, "gem", func(b *config.Backend) { b.Price.CacheWrite = ptr(1.0) }) },
			wantPath: "ai.backends.gem.price.cache_write", wantWarning: true,
			wantText: "never applied: kind gemini reports cached reads (cachedContentTokenCount) but no cache writes"},
		{name: "cache_read on a2a", edit: func(c *config.Config) { backend(c, "agentx", func(b *config.Backend) { b.Price.CacheRead = ptr(0.1) }) },
			wantPath: "ai.backends.agentx.price.cache_read", wantWarning: true,
			wantText: "never applied: kind a2a reports no tokens (they are estimated, none of them cached); price it with per_call"},
		{name: "cache_write on a2a", edit: func(c *config.Config) {
			backend(c, "agentx", func(b *config.Backend) { b.Price.CacheWrite = ptr(0.1) })
		},
			wantPath: "ai.backends.agentx.price.cache_write", wantWarning: true, wantText: "never applied: kind a2a reports no tokens"},
		{name: "per_call on grpc", edit: func(c *config.Config) { backend(c, "ocr", func(b *config.Backend) { b.Price.PerCall = 0.01 }) },
			wantPath: "ai.backends.ocr.price", wantWarning: true,
			wantText: "not applied to a kind: grpc backend: its methods are priced by their (flexway.v1.operation).ai option"},

		// Identity, fallback.
		{name: "identity headers on anthropic", edit: func(c *config.Config) {
			backend(c, "claude", func(b *config.Backend) { b.IdentityHeaders.Tenant = "Flexway-Tenant" })
		}, wantPath: "ai.backends.claude.identity_headers",
			wantText: "only a kind: relay or kind: grpc backend receives the caller's identity; this one is kind anthropic"},
		{name: "identity headers on a2a", edit: func(c *config.Config) {
			backend(c, "agentx", func(b *config.Backend) { b.IdentityHeaders.Agent = "Flexway-Agent" })
		}, wantPath: "ai.backends.agentx.identity_headers", wantText: "this one is kind a2a"},
		{name: "anthropic falls back to grpc", edit: func(c *config.Config) {
			backend(c, "claude", func(b *config.Backend) { b.Fallback = []string{"main", "ocr"} })
		}, wantPath: "ai.backends.claude.fallback[1]", wantText: `backend "ocr" is kind grpc: a kind anthropic backend cannot fall back to it`},
		{name: "grpc falls back to gemini", edit: func(c *config.Config) { backend(c, "ocr", func(b *config.Backend) { b.Fallback = []string{"gem"} }) },
			wantPath: "ai.backends.ocr.fallback[0]", wantText: `backend "gem" is kind gemini: a kind grpc backend cannot fall back to it`},
	})
}

// TestValidateKindsEveryFallback: every inference kind may fall back to
// every other (before any content byte, each backend once: the rules are
// the gateway's, not the kind's).
func TestValidateKindsEveryFallback(t *testing.T) {
	names := []string{"main", "peer", "claude", "gem", "agentx"}
	for _, from := range names {
		for _, to := range names {
			if from == to {
				continue
			}
			c := kindsConfig(t)
			backend(c, from, func(b *config.Backend) { b.Fallback = []string{to} })
			if _, err := c.Validate(); err != nil {
				t.Errorf("%s (kind %s) falling back to %s (kind %s): %v", from, c.AI.Backends[from].Kind, to, c.AI.Backends[to].Kind, err)
			}
		}
	}
}

// TestLoadAnthropicDefaults: absent (or null) api_version and
// max_output_tokens get their defaults; written empty or zero, they are
// reported at their line instead of silently replaced, as every explicit
// zero of the file is.
func TestLoadAnthropicDefaults(t *testing.T) {
	const claude = "    claude:\n      kind: anthropic\n      url: https://anthropic.example.com\n"
	t.Run("absent and null", func(t *testing.T) {
		path := writeConfig(t, base+claude+"      max_output_tokens:\n  backend: main\n")
		cfg, warnings, err := config.Load(path)
		if err != nil || len(warnings) != 0 {
			t.Fatalf("Load: %v, %v", warnings, err)
		}
		b := cfg.AI.Backends["claude"]
		runChecks(t, []check{
			{"api_version", b.APIVersion, "2023-06-01"},
			{"max_output_tokens", b.MaxOutputTokens, int64(4096)},
			{"capabilities", b.Capabilities, []config.Capability{chat}},
			{"main.max_output_tokens (openai: none)", cfg.AI.Backends["main"].MaxOutputTokens, int64(0)},
		})
	})
	t.Run("written empty and zero", func(t *testing.T) {
		path, errs, _ := loadProblems(t, base+claude+"      api_version: \"\"\n      max_output_tokens: 0\n  backend: main\n")
		got := make([]string, len(errs))
		for i, p := range errs {
			got[i] = strings.TrimPrefix(p.Error(), path)
		}
		want := []string{
			":15: ai.backends.claude.api_version: required for kind anthropic: the anthropic-version header, e.g. 2023-06-01 (the default when the key is absent)",
			":16: ai.backends.claude.max_output_tokens: must be positive: the Messages API requires max_tokens (absent, it is 4096)",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}
