package config_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexway/flexway/server/config"
)

// compatDir holds configuration files that must load unchanged in every
// later release: never edit them to make a change pass. A change that breaks
// one of them breaks users' files; add keys, never rename or re-mean one.
const compatDir = "../../testdata/config/compat"

// check is one asserted value of a loaded file.
type check struct {
	name      string
	got, want any
}

func runChecks(t *testing.T, checks []check) {
	t.Helper()
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func mustHex(t *testing.T, s string) [32]byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		t.Fatalf("bad test hash %q", s)
	}
	return [32]byte(b)
}

func resolve(t *testing.T, s config.Secret) string {
	t.Helper()
	v, err := s.Resolve()
	if err != nil {
		t.Fatalf("Resolve(%v): %v", s, err)
	}
	return v
}

// TestCompatFilesLoad loads the compatibility files unchanged. These files
// must load unchanged in every later release, with the meaning asserted
// here: if this test fails, the change broke the configuration contract.
func TestCompatFilesLoad(t *testing.T) {
	t.Run("reference", func(t *testing.T) {
		env := map[string]string{
			"FLEXWAY_ADMIN_KEY": "admin-secret",
			"GLOBEX_KEY":        "globex-secret",
			"MAIN_TOKEN":        "main-token",
			"CHEAP_KEY":         "cheap-key",
			"PEER_KEY":          "peer-key",
			"FLEXWAY_AUDIT_KEY": "audit-key",
		}
		for k, v := range env {
			t.Setenv(k, v)
		}
		// The onprem backend's token file, /var/run/secrets/tokens/onprem,
		// is mounted where the file is deployed; not on a developer's
		// machine (see TestCompatTokenFileNotMounted).
		cfg, warnings, err := config.LoadWithTokenFiles(filepath.Join(compatDir, "reference.yaml"), mounted)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		// Every backend of the reference is fine, and peer, the only relay,
		// is metered upstream: nothing to warn about.
		if len(warnings) != 0 {
			t.Errorf("warnings: %v", warnings)
		}
		dir, err := filepath.Abs(compatDir)
		if err != nil {
			t.Fatal(err)
		}
		ai := cfg.AI
		main, cheap, onprem, embedder, peer, ocr := ai.Backends["main"], ai.Backends["cheap"],
			ai.Backends["onprem"], ai.Backends["embedder"], ai.Backends["peer"], ai.Backends["ocr"]
		acme := ai.Tenants["acme"]
		defaultEUR, _ := ai.Budget.Default.NanoEURPerMonth()
		acmeEUR, _ := acme.Budget.NanoEURPerMonth()
		botEUR, _ := acme.Agents["support-bot"].Budget.NanoEURPerMonth()
		runChecks(t, []check{
			{"version", cfg.Version, 1},
			{"server.http", cfg.Server.HTTP, "127.0.0.1:8080"},
			{"server.grpc", cfg.Server.GRPC, "127.0.0.1:9090"},
			{"server.tls enabled", cfg.Server.TLS.Enabled(), false},
			{"server.admin_key ref", cfg.Server.AdminKey.Ref(), "env:FLEXWAY_ADMIN_KEY"},
			{"server.admin_key value", resolve(t, cfg.Server.AdminKey), "admin-secret"},
			{"api key count", len(cfg.Identity.APIKeys), 2},
			{"api_keys[0].name", cfg.Identity.APIKeys[0].Name, "acme-support"},
			{"api_keys[0].hash", cfg.Identity.APIKeys[0].Hash(), mustHex(t, "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8")},
			{"api_keys[0].tenant", cfg.Identity.APIKeys[0].Tenant, "acme"},
			{"api_keys[0].agent", cfg.Identity.APIKeys[0].Agent, "support-bot"},
			{"api_keys[1].hash", cfg.Identity.APIKeys[1].Hash(), sha256.Sum256([]byte("globex-secret"))},
			{"api_keys[1].tenant", cfg.Identity.APIKeys[1].Tenant, "globex"},
			{"api_keys[1].agent", cfg.Identity.APIKeys[1].Agent, ""},
			{"relays[0].name", cfg.Identity.Relays[0].Name, "edge-eu"},
			{"relays[0].hash", cfg.Identity.Relays[0].Hash(), sha256.Sum256([]byte("foo"))},
			{"relays[0].identity_headers", cfg.Identity.Relays[0].IdentityHeaders,
				config.IdentityHeaders{Tenant: "Flexway-Tenant", Agent: "Flexway-Agent", Sensitive: "Flexway-Sensitive"}},

			{"ai.backend", ai.Backend, "main"},
			{"ai.sensitive_header", ai.SensitiveHeader, "Flexway-Sensitive"},
			{"ai.sensitive_backend", ai.SensitiveBackend, "onprem"},
			{"ai.capabilities", ai.Capabilities, map[config.Capability]string{"vision": "main", "embeddings": "embedder"}},
			{"budget.soft", ai.Budget.Soft, 0.8},
			{"budget.soft_backend", ai.Budget.SoftBackend, "cheap"},
			{"budget.reserve_output_tokens", ai.Budget.ReserveOutputTokens, int64(1024)},
			{"budget.max_output_tokens (absent: none)", ai.Budget.MaxOutputTokens, int64(0)},
			{"main.prompt_overhead_tokens (absent: the default)", ai.Backends["main"].PromptOverheadTokens, int64(32)},
			{"budget.timezone", ai.Budget.Timezone, "UTC"},
			{"budget.store", ai.Budget.Store, config.Store{Type: config.StoreEmbedded, Path: filepath.Join(dir, "flexway-data", "ledger.db")}},
			{"budget.default.tokens_per_day", ai.Budget.Default.TokensPerDay, ptr(int64(2_000_000))},
			{"budget.default.tokens_per_month", ai.Budget.Default.TokensPerMonth, ptr(int64(40_000_000))},
			{"budget.default eur nano", defaultEUR, int64(200_000_000_000)},
			{"tenants", len(ai.Tenants), 2},
			{"acme.backend", acme.Backend, "main"},
			{"acme.tokens_per_day", acme.Budget.TokensPerDay, ptr(int64(500_000))},
			{"acme.tokens_per_month (absent: no cap)", acme.Budget.TokensPerMonth, (*int64)(nil)},
			{"acme eur nano", acmeEUR, int64(50_000_000_000)},
			{"support-bot.backend", acme.Agents["support-bot"].Backend, "cheap"},
			{"support-bot eur nano", botEUR, int64(5_000_000_000)},
			{"globex.sensitive", ai.Tenants["globex"].Sensitive, true},
			{"acme.sensitive", acme.Sensitive, false},

			{"vision.max_image_bytes", ai.Vision.MaxImageBytes, config.ByteSize(8 * 1024 * 1024)},
			{"vision.max_body_bytes", ai.Vision.MaxBodyBytes, config.ByteSize(24 * 1024 * 1024)},
			{"vision.allow_data_uris", ai.Vision.DataURIsAllowed(), true},
			{"vision.allowed_origins", ai.Vision.AllowedOrigins, []string{"https://images.example.com"}},
			{"vision.reserve_tokens_per_image", ai.Vision.ReserveTokensPerImage, int64(2048)},

			{"backends", len(ai.Backends), 6},
			{"main.kind", main.Kind, config.KindOpenAI},
			{"main.url", main.URL, "https://llm.example.com/v1"},
			{"main.auth.type", main.Auth.Type, config.AuthBearer},
			{"main.auth.secret", resolve(t, main.Auth.Secret), "main-token"},
			{"main.models", main.Models, []string{"large-1", "small-1"}},
			{"main.default_model", main.DefaultModel, "small-1"},
			{"main.price.input nano", main.Price.InputNanoEURPerMTok(), int64(2_500_000_000)},
			{"main.price.output nano", main.Price.OutputNanoEURPerMTok(), int64(10_000_000_000)},
			{"main.capabilities", main.Capabilities, []config.Capability{config.CapabilityChat, config.CapabilityVision}},
			{"main.external", main.IsExternal(), true},
			{"main.fallback", main.Fallback, []string{"cheap", "onprem"}},
			{"main.timeout", main.Timeout.Std(), 60 * time.Second},
			{"main.idle_timeout", main.IdleTimeout.Std(), 30 * time.Second},
			{"main.circuit_breaker", main.CircuitBreaker, config.CircuitBreaker{Failures: 5, OpenFor: config.Duration(30 * time.Second)}},
			{"main.metering", main.Metering, config.MeteringLocal},
			{"cheap.kind (defaulted)", cheap.Kind, config.KindOpenAI},
			{"cheap.auth", []any{cheap.Auth.Type, cheap.Auth.Name, resolve(t, cheap.Auth.Secret)}, []any{config.AuthHeader, "api-key", "cheap-key"}},
			{"cheap.capabilities (defaulted)", cheap.Capabilities, []config.Capability{config.CapabilityChat}},
			{"cheap.price.input nano", cheap.Price.InputNanoEURPerMTok(), int64(150_000_000)},
			{"cheap.price.output nano", cheap.Price.OutputNanoEURPerMTok(), int64(600_000_000)},
			{"cheap.external (defaulted)", cheap.IsExternal(), true},
			{"cheap.timeout (defaulted)", cheap.Timeout.Std(), 60 * time.Second},
			{"onprem.auth", onprem.Auth, config.Auth{Type: config.AuthTokenFile, Path: "/var/run/secrets/tokens/onprem"}},
			{"onprem.external", onprem.IsExternal(), false},
			{"onprem.price", []int64{onprem.Price.InputNanoEURPerMTok(), onprem.Price.OutputNanoEURPerMTok()}, []int64{0, 0}},
			{"onprem.capabilities", onprem.Capabilities, []config.Capability{config.CapabilityChat, config.CapabilityEmbeddings}},
			{"embedder.capabilities", embedder.Capabilities, []config.Capability{config.CapabilityEmbeddings}},
			{"embedder.price.input nano", embedder.Price.InputNanoEURPerMTok(), int64(20_000_000)},
			{"peer.kind", peer.Kind, config.KindRelay},
			{"peer.metering", peer.Metering, config.MeteringUpstream},
			{"peer.external", peer.IsExternal(), false},
			{"peer.tls", peer.TLS, config.BackendTLS{
				CAFile:   filepath.Join(dir, "certs", "ca.pem"),
				CertFile: filepath.Join(dir, "certs", "client.pem"),
				KeyFile:  filepath.Join(dir, "certs", "client-key.pem"),
			}},
			{"peer.identity_headers", peer.IdentityHeaders,
				config.IdentityHeaders{Tenant: "Flexway-Tenant", Agent: "Flexway-Agent", Sensitive: "Flexway-Sensitive"}},
			{"peer.auth.secret", resolve(t, peer.Auth.Secret), "peer-key"},
			{"ocr.kind", ocr.Kind, config.KindGRPC},
			{"ocr.url", ocr.URL, "dns:///ocr.internal:9000"},
			{"ocr.capabilities (none for grpc)", ocr.Capabilities, []config.Capability(nil)},
			{"grpc.descriptor_sets", ai.GRPC.DescriptorSets, []string{filepath.Join(dir, "protos", "ocr.binpb")}},
			{"grpc.services", ai.GRPC.Services, map[string]string{"acme.ocr.v1.OcrService": "ocr"}},

			{"audit.path", cfg.Audit.Path, filepath.Join(dir, "flexway-data", "audit.jsonl")},
			{"audit.hash_key", resolve(t, cfg.Audit.HashKey), "audit-key"},
			{"telemetry.prometheus", cfg.Telemetry.PrometheusEnabled(), true},
			{"telemetry.otlp_endpoint", cfg.Telemetry.OTLPEndpoint, ""},
		})
	})

	t.Run("minimal", func(t *testing.T) {
		cfg, warnings, err := config.Load(filepath.Join(compatDir, "minimal.yaml"))
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if len(warnings) != 0 {
			t.Errorf("warnings: %v", warnings)
		}
		local, ok := cfg.AI.Backends["local"]
		if !ok {
			t.Fatalf("no backend local: %v", cfg.AI.Backends)
		}
		dir, err := filepath.Abs(compatDir)
		if err != nil {
			t.Fatal(err)
		}
		runChecks(t, []check{
			{"version", cfg.Version, 1},
			{"server.grpc (defaulted)", cfg.Server.GRPC, "127.0.0.1:9090"},
			{"api_keys[0].hash", cfg.Identity.APIKeys[0].Hash(), sha256.Sum256([]byte("flexway-dev-key"))},
			{"ai.backend (the only backend)", cfg.AI.Backend, "local"},
			{"local.kind (defaulted)", local.Kind, config.KindOpenAI},
			{"local.auth.type", local.Auth.Type, config.AuthNone},
			{"local.capabilities (defaulted)", local.Capabilities, []config.Capability{config.CapabilityChat}},
			{"local.external (defaulted)", local.IsExternal(), true},
			{"local.metering (defaulted)", local.Metering, config.MeteringLocal},
			{"local.circuit_breaker (defaulted)", local.CircuitBreaker, config.CircuitBreaker{Failures: 5, OpenFor: config.Duration(30 * time.Second)}},
			{"budget.soft (defaulted)", cfg.AI.Budget.Soft, 0.8},
			{"budget.store (defaulted)", cfg.AI.Budget.Store, config.Store{Type: config.StoreEmbedded, Path: filepath.Join(dir, "flexway-data", "ledger.db")}},
			{"vision.max_image_bytes (defaulted)", cfg.AI.Vision.MaxImageBytes, 8 * config.MiB},
			{"vision.max_body_bytes (defaulted)", cfg.AI.Vision.MaxBodyBytes, 24 * config.MiB},
			{"server.max_inflight_body_bytes (defaulted)", cfg.Server.MaxInflightBodyBytes, 256 * config.MiB},
			{"vision.allow_data_uris (defaulted)", cfg.AI.Vision.DataURIsAllowed(), true},
			{"audit.path (defaulted)", cfg.Audit.Path, filepath.Join(dir, "flexway-data", "audit.jsonl")},
			{"audit.hash_key (absent)", cfg.Audit.HashKey.IsZero(), true},
			{"telemetry.prometheus (defaulted)", cfg.Telemetry.PrometheusEnabled(), true},
		})
	})

	t.Run("issue12-bounds", func(t *testing.T) {
		cfg, warnings, err := config.Load(filepath.Join(compatDir, "issue12-bounds.yaml"))
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if len(warnings) != 0 {
			t.Errorf("warnings: %v", warnings)
		}
		dir, err := filepath.Abs(compatDir)
		if err != nil {
			t.Fatal(err)
		}
		runChecks(t, []check{
			{"server.max_inflight_body_bytes", cfg.Server.MaxInflightBodyBytes, 256 * config.MiB},
			{"budget.max_output_tokens", cfg.AI.Budget.MaxOutputTokens, int64(4096)},
			{"budget.store", cfg.AI.Budget.Store, config.Store{Type: config.StoreRedis, URL: "redis://127.0.0.1:6379/0", Path: filepath.Join(dir, "flexway-data", "replica-a")}},
			{"local.prompt_overhead_tokens", cfg.AI.Backends["local"].PromptOverheadTokens, int64(64)},
		})
	})
	t.Run("relay-upstream", func(t *testing.T) {
		t.Setenv("HQ_RELAY_KEY", "hq-relay-key")
		t.Setenv("PARTNER_RELAY_KEY", "partner-relay-key")
		cfg, warnings, err := config.Load(filepath.Join(compatDir, "relay-upstream.yaml"))
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		// Both relays are metered upstream: nothing to warn about.
		if len(warnings) != 0 {
			t.Errorf("warnings: %v", warnings)
		}
		dir, err := filepath.Abs(compatDir)
		if err != nil {
			t.Fatal(err)
		}
		hq, partner := cfg.AI.Backends["hq"], cfg.AI.Backends["partner"]
		runChecks(t, []check{
			{"ai.backend", cfg.AI.Backend, "hq"},
			{"ai.sensitive_backend", cfg.AI.SensitiveBackend, "hq"},
			{"hq.kind", hq.Kind, config.KindRelay},
			{"hq.url", hq.URL, "https://flexway-hq.example.com:8443/v1"},
			{"hq.auth", []any{hq.Auth.Type, resolve(t, hq.Auth.Secret)}, []any{config.AuthBearer, "hq-relay-key"}},
			{"hq.tls", hq.TLS, config.BackendTLS{
				CAFile:   filepath.Join(dir, "certs", "hq-ca.pem"),
				CertFile: filepath.Join(dir, "certs", "edge.pem"),
				KeyFile:  filepath.Join(dir, "certs", "edge-key.pem"),
			}},
			{"hq.external", hq.IsExternal(), false},
			{"hq.metering", hq.Metering, config.MeteringUpstream},
			{"hq.identity_headers", hq.IdentityHeaders,
				config.IdentityHeaders{Tenant: "Flexway-Tenant", Agent: "Flexway-Agent", Sensitive: "Flexway-Sensitive"}},
			{"hq.capabilities", hq.Capabilities, []config.Capability{config.CapabilityChat, config.CapabilityEmbeddings}},
			{"partner.kind", partner.Kind, config.KindRelay},
			{"partner.external (a relay's default)", partner.IsExternal(), true},
			{"partner.auth", []any{partner.Auth.Type, partner.Auth.Name, resolve(t, partner.Auth.Secret)}, []any{config.AuthHeader, "X-Relay-Key", "partner-relay-key"}},
			{"partner.metering", partner.Metering, config.MeteringUpstream},
			{"partner.identity_headers", partner.IdentityHeaders, config.IdentityHeaders{Tenant: "X-Partner-Tenant"}},
			{"partner.capabilities (defaulted)", partner.Capabilities, []config.Capability{config.CapabilityChat}},
			{"partner.tls (none)", partner.TLS, config.BackendTLS{}},
		})
	})

	t.Run("server-tls", func(t *testing.T) {
		t.Setenv("DIRECT_KEY", "direct-key")
		cfg, warnings, err := config.Load(filepath.Join(compatDir, "server-tls.yaml"))
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if len(warnings) != 0 {
			t.Errorf("warnings: %v", warnings)
		}
		dir, err := filepath.Abs(compatDir)
		if err != nil {
			t.Fatal(err)
		}
		runChecks(t, []check{
			{"server.http", cfg.Server.HTTP, "0.0.0.0:8443"},
			{"server.grpc", cfg.Server.GRPC, "0.0.0.0:9443"},
			{"server.tls enabled", cfg.Server.TLS.Enabled(), true},
			{"server.tls", cfg.Server.TLS, config.ServerTLS{
				CertFile:     filepath.Join(dir, "tls", "server.pem"),
				KeyFile:      filepath.Join(dir, "tls", "server-key.pem"),
				ClientCAFile: "/etc/flexway/clients-ca.pem",
			}},
			{"relays[0].name", cfg.Identity.Relays[0].Name, "edge"},
			{"relays[0].hash", cfg.Identity.Relays[0].Hash(), sha256.Sum256([]byte("bar"))},
			{"relays[0].identity_headers", cfg.Identity.Relays[0].IdentityHeaders,
				config.IdentityHeaders{Tenant: "Flexway-Tenant", Agent: "Flexway-Agent", Sensitive: "Flexway-Sensitive"}},
			{"api_keys[0].hash", cfg.Identity.APIKeys[0].Hash(), sha256.Sum256([]byte("direct-key"))},
			{"acme agents", len(cfg.AI.Tenants["acme"].Agents), 1},
			{"ai.backend (the only backend)", cfg.AI.Backend, "model"},
		})
	})

	t.Run("ai-backends", func(t *testing.T) {
		for k, v := range map[string]string{"MAIN_TOKEN": "main-token", "CHEAP_KEY": "cheap-key", "PEER_KEY": "peer-key",
			"CLAUDE_KEY": "claude-key", "GEMINI_KEY": "gemini-key", "AGENTX_KEY": "agentx-key"} {
			t.Setenv(k, v)
		}
		cfg, warnings, err := config.LoadWithTokenFiles(filepath.Join(compatDir, "ai-backends.yaml"), mounted)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		// claude's cache_write is one Anthropic reports; gem sets none.
		if len(warnings) != 0 {
			t.Errorf("warnings: %v", warnings)
		}
		b := cfg.AI.Backends
		claude, gem, embed, agentx := b["claude"], b["gem"], b["gem-embed"], b["agentx"]
		runChecks(t, []check{
			{"backends", slices.Sorted(maps.Keys(b)), []string{"agentx", "cheap", "claude", "embedder", "gem", "gem-embed", "main", "ocr", "onprem", "peer"}},
			{"main.kind", b["main"].Kind, config.KindOpenAI},
			{"cheap.kind (defaulted)", b["cheap"].Kind, config.KindOpenAI},
			{"peer.kind", b["peer"].Kind, config.KindRelay},
			{"ocr.kind", b["ocr"].Kind, config.KindGRPC},

			{"claude.kind", claude.Kind, config.KindAnthropic},
			{"claude.url", claude.URL, "https://anthropic.example.com"},
			{"claude.auth", []any{claude.Auth.Type, claude.Auth.Name, resolve(t, claude.Auth.Secret)}, []any{config.AuthHeader, "x-api-key", "claude-key"}},
			{"claude.api_version", claude.APIVersion, "2023-06-01"},
			{"claude.max_output_tokens", claude.MaxOutputTokens, int64(64000)},
			{"claude.betas", claude.Betas, []string{"interleaved-thinking-2025-05-14"}},
			{"claude.price", []int64{claude.Price.InputNanoEURPerMTok(), claude.Price.OutputNanoEURPerMTok(),
				claude.Price.CacheReadNanoEURPerMTok(), claude.Price.CacheWriteNanoEURPerMTok(), claude.Price.PerCallNanoEUR()},
				[]int64{3_000_000_000, 15_000_000_000, 300_000_000, 3_750_000_000, 0}},
			{"claude.capabilities", claude.Capabilities, []config.Capability{config.CapabilityChat, config.CapabilityVision}},
			{"claude.fallback (across wire formats)", claude.Fallback, []string{"main"}},

			{"gem.kind", gem.Kind, config.KindGemini},
			{"gem.url", gem.URL, "https://gemini.example.com/v1beta"},
			{"gem.auth.name", gem.Auth.Name, "x-goog-api-key"},
			{"gem.api_version (anthropic only)", gem.APIVersion, ""},
			{"gem.max_output_tokens (anthropic only)", gem.MaxOutputTokens, int64(0)},
			{"gem.price", []any{gem.Price.InputNanoEURPerMTok(), gem.Price.CacheReadNanoEURPerMTok(), gem.Price.CacheWrite},
				[]any{int64(300_000_000), int64(75_000_000), (*float64)(nil)}},
			{"gem.cache_write (unset: input)", gem.Price.CacheWriteNanoEURPerMTok(), int64(300_000_000)},
			{"gem-embed.capabilities", embed.Capabilities, []config.Capability{config.CapabilityEmbeddings}},
			{"gem-embed.default_model", embed.DefaultModel, "gemini-embedding-001"},

			{"agentx.kind", agentx.Kind, config.KindA2A},
			{"agentx.url", agentx.URL, "https://agents.example.com/a2a"},
			{"agentx.auth", []any{agentx.Auth.Type, resolve(t, agentx.Auth.Secret)}, []any{config.AuthBearer, "agentx-key"}},
			{"agentx.capabilities (defaulted)", agentx.Capabilities, []config.Capability{config.CapabilityChat}},
			{"agentx.price", []any{agentx.Price.PerCallNanoEUR(), agentx.Price.InputNanoEURPerMTok(), agentx.Price.IsZero()},
				[]any{int64(2_000_000), int64(0), false}},
			{"agentx.external (defaulted)", agentx.IsExternal(), true},
		})
	})
}

func sha256Of(s string) [32]byte { return sha256.Sum256([]byte(s)) }

// mounted stands for a machine where every token file is in place.
func mounted(string) error { return nil }

// TestCompatTokenFileNotMounted: where the reference's token file is not
// mounted (yet), the file still loads, with one warning more, at the
// token_file's path, and nothing else changes.
func TestCompatTokenFileNotMounted(t *testing.T) {
	for k, v := range map[string]string{
		"FLEXWAY_ADMIN_KEY": "a", "GLOBEX_KEY": "g", "MAIN_TOKEN": "m",
		"CHEAP_KEY": "c", "PEER_KEY": "p", "FLEXWAY_AUDIT_KEY": "h",
	} {
		t.Setenv(k, v)
	}
	var asked []string
	missing := func(path string) error {
		asked = append(asked, path)
		return &fs.PathError{Op: "stat", Path: path, Err: fs.ErrNotExist}
	}
	path := filepath.Join(compatDir, "reference.yaml")
	_, warnings, err := config.LoadWithTokenFiles(path, missing)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if want := []string{"/var/run/secrets/tokens/onprem"}; !reflect.DeepEqual(asked, want) {
		t.Errorf("token files checked: %q, want %q", asked, want)
	}
	if len(warnings) != 1 {
		t.Fatalf("warnings = %v, want one", warnings)
	}
	w := warnings[0]
	if w.Path != "ai.backends.onprem.auth.path" || w.Line != 101 || !errors.Is(w, fs.ErrNotExist) ||
		!strings.Contains(w.Error(), "the token file cannot be read now") {
		t.Errorf("warning = %q (path %s, line %d), want one at ai.backends.onprem.auth.path, line 101, wrapping fs.ErrNotExist", w.Error(), w.Path, w.Line)
	}
}

// TestCompatAIAliases: issue 15's sections of the reference (ai.aliases of
// every strategy, main's expected_latency, the credentials comment) load
// unchanged, with their values.
func TestCompatAIAliases(t *testing.T) {
	for k, v := range map[string]string{"MAIN_TOKEN": "main-token", "CHEAP_KEY": "cheap-key", "PEER_KEY": "peer-key",
		"CLAUDE_KEY": "claude-key", "GEMINI_KEY": "gemini-key", "AGENTX_KEY": "agentx-key"} {
		t.Setenv(k, v)
	}
	cfg, warnings, err := config.LoadWithTokenFiles(filepath.Join(compatDir, "ai-aliases.yaml"), mounted)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	a := cfg.AI.Aliases
	runChecks(t, []check{
		{"aliases", slices.Sorted(maps.Keys(a)), []string{"fast", "reviewer", "smart", "thrifty", "triage"}},
		{"fast", []any{a["fast"].Strategy, len(a["fast"].Targets), a["fast"].Targets[0].Backend, a["fast"].Targets[0].Model},
			[]any{config.StrategyFailover, 2, "cheap", "mini-1"}},
		{"smart weights", []int64{int64(a["smart"].Targets[0].Weight), int64(a["smart"].Targets[1].Weight)}, []int64{90, 10}},
		{"reviewer", []any{a["reviewer"].Strategy, a["reviewer"].Sticky, a["reviewer"].Targets[1].Arm}, []any{config.StrategyAB, "agent", "candidate"}},
		{"thrifty", a["thrifty"].Strategy, config.StrategyCost},
		{"triage", []any{a["triage"].Strategy, a["triage"].Below.Backend, a["triage"].Above.Model}, []any{config.StrategyClassifier, "cheap", "large-1"}},
		{"main.expected_latency", cfg.AI.Backends["main"].ExpectedLatency.Std(), 800 * time.Millisecond},
	})
}

// TestCompatAIPolicies: issue 16's sections of the reference (the policies
// everyone and acme-governed, without guardrails, and the per-minute caps
// of ai.budget.default) load unchanged, with their values and defaults.
func TestCompatAIPolicies(t *testing.T) {
	cfg, warnings, err := config.Load(filepath.Join(compatDir, "ai-policies.yaml"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	ps := cfg.AI.Policies
	if len(ps) != 2 {
		t.Fatalf("%d policies, want 2", len(ps))
	}
	d := cfg.AI.Budget.Default
	runChecks(t, []check{
		{"budget.default.tokens_per_minute", d.TokensPerMinute, ptr(int64(100_000))},
		{"budget.default.requests_per_minute", d.RequestsPerMinute, ptr(int64(600))},
		{"budget.default.tokens_per_day", d.TokensPerDay, ptr(int64(2_000_000))},
		{"acme.tokens_per_minute (absent: the default's)", cfg.AI.Tenants["acme"].Budget.TokensPerMinute, (*int64)(nil)},

		{"everyone", []any{ps[0].Name, ps[0].Match, ps[0].Match.Level(), ps[0].Budget},
			[]any{"everyone", config.PolicyMatch{}, config.LevelGlobal, (*config.PolicyBudget)(nil)}},
		{"everyone.governance (mode defaulted)", *ps[0].Governance, config.Governance{Models: []string{"*"}, Mode: config.GovernanceEnforce}},
		{"acme-governed", []any{ps[1].Name, ps[1].Match, ps[1].Match.Level()},
			[]any{"acme-governed", config.PolicyMatch{Tenant: "acme"}, config.LevelTenant}},
		{"acme-governed.governance", *ps[1].Governance, config.Governance{
			Models: []string{"fast", "small-1"}, Backends: []string{"main", "cheap", "onprem"}, Mode: config.GovernanceEnforce}},
		{"acme-governed.budget", *ps[1].Budget, config.PolicyBudget{Caps: config.Caps{TokensPerMinute: ptr(int64(20_000))}, Per: config.PerAgent}},
	})
}

// TestReferencePoliciesWithoutEmbedder: the reference's ai.policies as
// written, without its ai.cache, load but for faq-cache's semantic mode,
// refused with one error at its line because no embeddings_backend embeds
// the questions; the only other problem is the warning that
// support-logging collects prompts.
func TestReferencePoliciesWithoutEmbedder(t *testing.T) {
	file := filepath.Join("testdata", "broken", "reference_policies.yaml")
	cfg, warnings, err := config.Load(file)
	if cfg != nil || len(warnings) != 1 || warnings[0].Path != "ai.policies[2].prompt_logging" {
		t.Errorf("Load = %v, warnings %v; want no config, the prompt_logging warning", cfg, warnings)
	}
	var errs config.Problems
	if !errors.As(err, &errs) {
		t.Fatalf("Load error = %v, want Problems", err)
	}
	type found struct {
		path string
		line int
	}
	var got []found
	for _, p := range errs {
		if !strings.Contains(p.Error(), "semantic needs ai.cache.embeddings_backend") {
			t.Errorf("%v: want the embeddings_backend error", p)
		}
		got = append(got, found{p.Path, p.Line})
	}
	runChecks(t, []check{{"errors", got, []found{
		{"ai.policies[3].cache.mode", 94},
	}}})
}

// TestCompatAIGuardrails: issue 17's sections of the reference (its
// ai.policies without faq-cache: acme-governed's guardrails, every rule
// type in both phases, and support-logging's prompt_logging) load
// unchanged, with their values and defaults; the only problem is the
// warning that support-logging collects prompts.
func TestCompatAIGuardrails(t *testing.T) {
	cfg, warnings, err := config.Load(filepath.Join(compatDir, "ai-guardrails.yaml"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(warnings) != 1 || warnings[0].Path != "ai.policies[2].prompt_logging" {
		t.Errorf("warnings: %v; want the prompt_logging one", warnings)
	}
	dir, err := filepath.Abs(compatDir)
	if err != nil {
		t.Fatal(err)
	}
	ps := cfg.AI.Policies
	if len(ps) != 3 {
		t.Fatalf("%d policies, want 3", len(ps))
	}
	g := ps[1].Guardrails
	if g == nil || len(g.Prompt) != 6 || len(g.Response) != 2 {
		t.Fatalf("acme-governed.guardrails = %+v", g)
	}
	p, r := g.Prompt, g.Response
	runChecks(t, []check{
		{"pii", []any{p[0].Type, p[0].Entities, p[0].Action}, []any{"pii", []string{"email", "phone", "credit_card", "iban"}, "redact"}},
		{"secrets", []any{p[1].Type, p[1].Action}, []any{"secrets", "deny"}},
		{"injection", []any{p[2].Type, p[2].Action}, []any{"injection", "deny"}},
		{"banned", []any{p[3].Type, p[3].Words, p[3].Action}, []any{"banned", []string{"project-hydra"}, "deny"}},
		{"regex", []any{p[4].Type, p[4].Pattern, p[4].Action}, []any{"regex", "ACME-[0-9]{6}", "redact"}},
		{"webhook (action defaulted)", []any{p[5].Type, p[5].URL, p[5].Timeout.Std(), p[5].OnError, p[5].Action, p[5].IsExternal()},
			[]any{"webhook", "http://10.0.0.7:8080/check", 200 * time.Millisecond, "deny", "deny", true}},
		{"response pii", []any{r[0].Type, r[0].Entities, r[0].Action}, []any{"pii", []string{"credit_card"}, "redact"}},
		{"response json_schema", []any{r[1].Type, r[1].Action, r[1].Schema == nil}, []any{"json_schema", "deny", true}},
		{"support-logging", *ps[2].PromptLogging, config.PromptLogging{
			Enabled: true, Path: filepath.Join(dir, "flexway-data", "prompts-acme-support.jsonl"), IncludeSensitive: false}},
		{"support-logging match", ps[2].Match, config.PolicyMatch{Tenant: "acme", Agent: "support-bot"}},
	})
}

// TestCompatReferencePipeline: the second design's reference, the whole
// file with ai.cache and the faq-cache policy, loads unchanged; its only
// warning is that support-logging collects prompts, and its cache
// sections keep their values.
func TestCompatReferencePipeline(t *testing.T) {
	for k, v := range map[string]string{
		"FLEXWAY_ADMIN_KEY": "a", "GLOBEX_KEY": "g", "MAIN_TOKEN": "m", "CHEAP_KEY": "c", "PEER_KEY": "p",
		"CLAUDE_KEY": "k", "GEMINI_KEY": "j", "AGENTX_KEY": "x", "FLEXWAY_AUDIT_KEY": "h",
	} {
		t.Setenv(k, v)
	}
	cfg, warnings, err := config.LoadWithTokenFiles(filepath.Join(compatDir, "reference-pipeline.yaml"), mounted)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(warnings) != 1 || warnings[0].Path != "ai.policies[2].prompt_logging" {
		t.Errorf("warnings: %v; want the prompt_logging one", warnings)
	}
	ps := cfg.AI.Policies
	if len(ps) != 4 || ps[3].Cache == nil {
		t.Fatalf("policies = %+v; want 4, the last with a cache", ps)
	}
	runChecks(t, []check{
		{"ai.cache", cfg.AI.Cache, config.Cache{Store: config.CacheMemory, MaxBytes: 256 * config.MiB, EmbeddingsBackend: "embedder"}},
		{"faq-cache match", ps[3].Match, config.PolicyMatch{Operation: "ai.chatCompletions", Model: "fast"}},
		{"faq-cache", *ps[3].Cache, config.PolicyCache{Mode: config.CacheSemantic, Similarity: 0.95, TTL: config.Duration(time.Hour)}},
		{"aliases", len(cfg.AI.Aliases), 5},
		{"backends", len(cfg.AI.Backends), 10},
	})
}
