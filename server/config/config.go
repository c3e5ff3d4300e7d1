package config

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Config is a whole flexway.yaml. Build it with [Load]; a Config built in
// code needs [Config.ApplyDefaults] and then [Config.Validate].
type Config struct {
	// Version is the configuration format; optional, absent means 1, and 1
	// is the only version this release reads.
	Version int `yaml:"version"`
	// Server holds the listeners.
	Server Server `yaml:"server"`
	// Identity says who may call.
	Identity Identity `yaml:"identity"`
	// AI holds routing, budgets and backends.
	AI AI `yaml:"ai"`
	// Audit is the audit log.
	Audit Audit `yaml:"audit"`
	// Telemetry is metrics and traces export.
	Telemetry Telemetry `yaml:"telemetry"`
}

// Server holds the listeners (server.*).
type Server struct {
	// HTTP is the host:port of the OpenAI-compatible /v1/*, admin REST,
	// /metrics, /healthz, /readyz and /console. Default 127.0.0.1:8080.
	HTTP string `yaml:"http"`
	// GRPC is the host:port of the flexway.v1 services and the proxied
	// specialised-model services. Default 127.0.0.1:9090.
	GRPC string `yaml:"grpc"`
	// TLS, when CertFile is set, serves both listeners over TLS.
	TLS ServerTLS `yaml:"tls"`
	// AdminKey is the bearer of the /flexway/v1/* admin routes and the
	// console; optional (no key, no admin access). Resolved at load.
	AdminKey Secret `yaml:"admin_key"`
	// MaxInflightBodyBytes bounds the bytes of /v1/* request bodies being
	// read and parsed at once, across all callers: a request whose body
	// would pass it is answered 503 with Retry-After before (or, for a
	// chunked body, as soon as) it is read. At least
	// ai.vision.max_body_bytes. Default 256MiB.
	MaxInflightBodyBytes ByteSize `yaml:"max_inflight_body_bytes"`
}

// ServerTLS is the listeners' TLS (server.tls). Paths are absolute after
// [Load]; the files are read by the server, not at load.
type ServerTLS struct {
	// CertFile is the PEM certificate chain; with KeyFile, enables TLS.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `yaml:"key_file"`
	// ClientCAFile, optional, is a PEM bundle: clients must then present a
	// certificate it signed (mutual TLS).
	ClientCAFile string `yaml:"client_ca_file"`
}

// Enabled reports whether the listeners serve TLS.
func (t ServerTLS) Enabled() bool { return t.CertFile != "" }

// Identity says who may call (identity.*).
type Identity struct {
	// APIKeys are the callers' keys; each maps to a tenant and an agent.
	APIKeys []APIKey `yaml:"api_keys"`
	// Relays are other Flexways allowed to pass a caller's identity in
	// headers; identity headers from anyone else are ignored.
	Relays []Relay `yaml:"relays"`
}

// APIKey is one caller key (identity.api_keys[i]): exactly one of KeySHA256
// and Key is set.
type APIKey struct {
	// Name identifies the key in logs and audit (hashed there); unique.
	Name string `yaml:"name"`
	// KeySHA256 is the hex SHA-256 (64 characters) of the key.
	KeySHA256 string `yaml:"key_sha256"`
	// Key is a reference to the key itself, hashed at load; only the hash
	// is kept.
	Key Secret `yaml:"key"`
	// Tenant is the tenant the key's calls are billed to; required.
	Tenant string `yaml:"tenant"`
	// Agent, optional, is the agent within the tenant.
	Agent string `yaml:"agent"`

	hash [32]byte // SHA-256 of Key, set at load
}

// Hash returns the SHA-256 of the key: KeySHA256 decoded, or the hash of
// Key's value computed by [Load]. It is the zero array when neither is
// available (an invalid KeySHA256, or a Key never resolved).
func (k APIKey) Hash() [32]byte { return keyHash(k.KeySHA256, k.hash) }

// Relay is another Flexway trusted to pass a caller's identity
// (identity.relays[i]); exactly one of KeySHA256 and Key is set.
type Relay struct {
	// Name identifies the relay in logs and audit; unique.
	Name string `yaml:"name"`
	// KeySHA256 is the hex SHA-256 (64 characters) of the relay's key.
	KeySHA256 string `yaml:"key_sha256"`
	// Key is a reference to the relay's key, hashed at load.
	Key Secret `yaml:"key"`
	// IdentityHeaders names the headers carrying the caller's identity;
	// Tenant is required.
	IdentityHeaders IdentityHeaders `yaml:"identity_headers"`

	hash [32]byte // SHA-256 of Key, set at load
}

// Hash returns the SHA-256 of the relay's key, as [APIKey.Hash] does.
func (r Relay) Hash() [32]byte { return keyHash(r.KeySHA256, r.hash) }

func keyHash(hexSum string, loaded [32]byte) [32]byte {
	var sum [32]byte
	if hexSum == "" {
		return loaded
	}
	if b, err := hex.DecodeString(hexSum); err == nil && len(b) == len(sum) {
		copy(sum[:], b)
	}
	return sum
}

// hashKey is the SHA-256 of a key's value, as [APIKey.Hash] returns it.
func hashKey(value string) [32]byte { return sha256.Sum256([]byte(value)) }

// IdentityHeaders names the HTTP headers that carry a caller's identity
// between Flexways: read from a trusted relay ([Relay]), sent to a
// kind: relay backend ([Backend]). An empty name means "not passed".
type IdentityHeaders struct {
	// Tenant is the header of the tenant, e.g. Flexway-Tenant.
	Tenant string `yaml:"tenant"`
	// Agent is the header of the agent, e.g. Flexway-Agent.
	Agent string `yaml:"agent"`
	// Sensitive is the header of the sensitivity flag, e.g. Flexway-Sensitive.
	Sensitive string `yaml:"sensitive"`
}

// IsZero reports whether no header is named.
func (h IdentityHeaders) IsZero() bool { return h == IdentityHeaders{} }

// AI holds routing, budgets and backends (ai.*). Backend names are the keys
// of Backends.
type AI struct {
	// Backend is the default backend; defaults to the only backend when
	// exactly one is defined, else required.
	Backend string `yaml:"backend"`
	// SensitiveHeader is the request header that flags a call as sensitive
	// with "true" or "1". Default Flexway-Sensitive.
	SensitiveHeader string `yaml:"sensitive_header"`
	// SensitiveBackend, optional, serves every sensitive call; it must be
	// internal (external: false).
	SensitiveBackend string `yaml:"sensitive_backend"`
	// Capabilities overrides, per capability, the backend that serves what
	// the chosen backend cannot; each backend named must list it.
	Capabilities map[Capability]string `yaml:"capabilities"`
	// Budget holds the caps and the ledger.
	Budget Budget `yaml:"budget"`
	// Tenants holds per-tenant and per-agent overrides, by tenant name.
	Tenants map[string]Tenant `yaml:"tenants"`
	// Vision bounds request bodies and images.
	Vision Vision `yaml:"vision"`
	// Backends are the upstreams, by name; at least one.
	Backends map[string]Backend `yaml:"backends"`
	// GRPC routes specialised-model gRPC services to kind: grpc backends.
	GRPC GRPC `yaml:"grpc"`
	// Aliases are the model names a client may request that the operator
	// maps to routes, by alias name; see [Alias].
	Aliases map[string]Alias `yaml:"aliases"`
	// Policies are the rules applied to the calls each one matches, in
	// the order declared; see [Policy].
	Policies []Policy `yaml:"policies"`
	// Cache is where the response cache keeps its entries; off unless a
	// policy's cache section turns it on. See [Cache].
	Cache Cache `yaml:"cache"`
}

// Budget holds the caps and the ledger (ai.budget.*).
type Budget struct {
	// Soft is the fraction of every cap, in (0, 1), at or past which a call
	// gets "Flexway-Budget: soft" and goes to SoftBackend. Default 0.8.
	Soft float64 `yaml:"soft"`
	// SoftBackend, optional, serves calls past the soft cap (never widening
	// a sensitive call).
	SoftBackend string `yaml:"soft_backend"`
	// ReserveOutputTokens is the output, in tokens, reserved when a request
	// sets no max_tokens. Default 1024.
	ReserveOutputTokens int64 `yaml:"reserve_output_tokens"`
	// MaxOutputTokens, when positive, is sent upstream as max_tokens, and
	// reserved, for a chat request that sets neither max_tokens nor
	// max_completion_tokens, so that every call has an output bound.
	// Absent (0) by default: such a request is reserved
	// ReserveOutputTokens and the upstream decides its length.
	MaxOutputTokens int64 `yaml:"max_output_tokens"`
	// Timezone is the IANA zone in which days and months roll over.
	// Default UTC.
	Timezone string `yaml:"timezone"`
	// Store is where the ledger lives.
	Store Store `yaml:"store"`
	// Default holds the caps of every tenant that does not override them.
	Default Caps `yaml:"default"`
}

// Location loads Timezone ("" is UTC). It fails when the zone is unknown
// to the system's (or the embedded) time zone database.
func (b Budget) Location() (*time.Location, error) { return time.LoadLocation(b.Timezone) }

// Store is where the budget ledger lives (ai.budget.store.*).
type Store struct {
	// Type is embedded (the default) or redis.
	Type StoreType `yaml:"type"`
	// Path is the embedded ledger's file (default ./flexway-data/ledger.db)
	// or, for redis, the prefix of this replica's own files (default
	// ./flexway-data/redis-ledger): <path>.state, the commit sequence it
	// saw (rollback detection), <path>.journal, commits Redis could not
	// take, and <path>.lock; one replica each, never shared. Relative to
	// the configuration file's directory; absolute after [Load].
	Path string `yaml:"path"`
	// URL is the redis server, e.g. redis://127.0.0.1:6379/0.
	URL string `yaml:"url"`
}

// Caps are the budget limits of a tenant or an agent; a nil field is no cap.
// The first cap reached decides.
type Caps struct {
	// TokensPerMinute caps input plus output tokens in any 60 seconds (a
	// sliding window, checked before the request body is read too).
	TokensPerMinute *int64 `yaml:"tokens_per_minute"`
	// RequestsPerMinute caps the calls admitted in any 60 seconds; a
	// refused call is not counted.
	RequestsPerMinute *int64 `yaml:"requests_per_minute"`
	// TokensPerDay caps input plus output tokens per day.
	TokensPerDay *int64 `yaml:"tokens_per_day"`
	// TokensPerMonth caps input plus output tokens per calendar month.
	TokensPerMonth *int64 `yaml:"tokens_per_month"`
	// EURPerMonth caps the cost, in euros, per calendar month; use
	// [Caps.NanoEURPerMonth] for arithmetic.
	EURPerMonth *float64 `yaml:"eur_per_month"`
}

// NanoEURPerMonth returns the euro cap in nano-euros (10⁻⁹ €), rounded half
// away from zero at the ninth decimal, and whether there is one. A cap
// [Config.Validate] refuses (NaN, beyond [MaxEUR]) saturates to
// math.MaxInt64.
func (c Caps) NanoEURPerMonth() (nano int64, ok bool) {
	if c.EURPerMonth == nil {
		return 0, false
	}
	return nanoOrMax(*c.EURPerMonth), true
}

// IsZero reports whether no cap is set.
func (c Caps) IsZero() bool {
	return c.TokensPerMinute == nil && c.RequestsPerMinute == nil &&
		c.TokensPerDay == nil && c.TokensPerMonth == nil && c.EURPerMonth == nil
}

// Tenant overrides routing and caps for one tenant (ai.tenants.<name>).
type Tenant struct {
	// Backend, optional, replaces ai.backend for the tenant's calls.
	Backend string `yaml:"backend"`
	// Sensitive makes every call of the tenant sensitive; the header cannot
	// unflag it.
	Sensitive bool `yaml:"sensitive"`
	// Budget replaces ai.budget.default for the tenant, cap by cap; a nil
	// cap here inherits the default.
	Budget Caps `yaml:"budget"`
	// Agents holds per-agent overrides, by agent name.
	Agents map[string]Agent `yaml:"agents"`
}

// Agent overrides routing and caps for one agent of a tenant
// (ai.tenants.<tenant>.agents.<name>).
type Agent struct {
	// Backend, optional, replaces the tenant's backend for the agent's calls.
	Backend string `yaml:"backend"`
	// Sensitive makes every call of the agent sensitive.
	Sensitive bool `yaml:"sensitive"`
	// Budget holds the agent's own caps, enforced besides the tenant's.
	Budget Caps `yaml:"budget"`
}

// Vision bounds request bodies and images (ai.vision.*).
type Vision struct {
	// MaxImageBytes bounds one image as measured in the body (never
	// decoded). Default 8MiB.
	MaxImageBytes ByteSize `yaml:"max_image_bytes"`
	// MaxBodyBytes bounds a request body. Default 24MiB.
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
	// AllowDataURIs allows inline data: images; nil means true. Read it
	// with [Vision.DataURIsAllowed].
	AllowDataURIs *bool `yaml:"allow_data_uris"`
	// AllowedOrigins are the https origins ("https://host[:port]") remote
	// image URLs may come from; none means no remote image.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// ReserveTokensPerImage is reserved, in tokens, per image. Default 2048.
	ReserveTokensPerImage int64 `yaml:"reserve_tokens_per_image"`
}

// DataURIsAllowed reports whether inline data: images are accepted
// (allow_data_uris, default true).
func (v Vision) DataURIsAllowed() bool { return v.AllowDataURIs == nil || *v.AllowDataURIs }

// Backend is one upstream (ai.backends.<name>).
type Backend struct {
	// Kind is openai (the default), relay, grpc, anthropic, gemini or a2a.
	Kind BackendKind `yaml:"kind"`
	// URL is the base URL (http or https) for openai and relay (e.g.
	// https://llm.example.com/v1), anthropic (https://api.anthropic.com:
	// the kind adds /v1/messages), gemini
	// (https://generativelanguage.googleapis.com/v1beta: the kind adds
	// /models/{model}:...) and a2a (the agent's JSON-RPC endpoint); a gRPC
	// target (dns:///host:port or host:port) for grpc. Required. It carries
	// no credential: no user info, no query parameter named like one
	// (Gemini's ?key= included: use auth type header, name x-goog-api-key).
	URL string `yaml:"url"`
	// Auth is how the backend authenticates Flexway.
	Auth Auth `yaml:"auth"`
	// Credentials, instead of Auth, is a pool of credentials for one
	// upstream (kinds openai, anthropic, gemini and relay).
	Credentials *Credentials `yaml:"credentials"`
	// TLS configures the client side of the connection.
	TLS BackendTLS `yaml:"tls"`
	// Models are the model names the backend serves; a requested model in
	// Models is sent as is, any other becomes DefaultModel.
	Models []string `yaml:"models"`
	// DefaultModel is served when the requested model is not in Models.
	DefaultModel string `yaml:"default_model"`
	// Price is the backend's price per million tokens.
	Price Price `yaml:"price"`
	// Capabilities are what the backend serves; default [chat] for every
	// kind but grpc, which lists none. openai, relay and gemini may list
	// chat, vision and embeddings; anthropic and a2a chat and vision (an
	// agent that takes images declares vision). See [BackendKind.Serves].
	Capabilities []Capability `yaml:"capabilities"`
	// External, nil meaning true, says the backend is outside the
	// organisation: never used for a sensitive call. Read it with
	// [Backend.IsExternal].
	External *bool `yaml:"external"`
	// Fallback names the backends tried in order, each once, when this one
	// fails (connection error, 5xx, timeout, open circuit).
	Fallback []string `yaml:"fallback"`
	// Timeout bounds the wait for response headers. Default 60s.
	Timeout Duration `yaml:"timeout"`
	// IdleTimeout bounds the silence between two stream events. Default 30s.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// CircuitBreaker opens the backend's circuit after repeated failures.
	CircuitBreaker CircuitBreaker `yaml:"circuit_breaker"`
	// ExpectedLatency, optional, is the declared latency that aliases of
	// strategy latency and cost_latency sort by (never measured); zero is
	// unset and sorts last.
	ExpectedLatency Duration `yaml:"expected_latency"`
	// PromptOverheadTokens is the chat-template overhead, in tokens, the
	// upstream adds to a call's prompt once (BOS, a default system header,
	// tool instructions, the assistant priming), reserved on top of the
	// input bound (one token per byte plus 8 per message). Default 32.
	PromptOverheadTokens int64 `yaml:"prompt_overhead_tokens"`
	// Metering is local (the default: this Flexway meters and bills) or
	// upstream (the peer does; local caps still hold).
	Metering Metering `yaml:"metering"`
	// IdentityHeaders, for kind relay only, names the headers under which
	// the caller's identity is sent; zero sends none.
	IdentityHeaders IdentityHeaders `yaml:"identity_headers"`
	// APIVersion, for kind anthropic only, is sent as anthropic-version
	// (https://docs.anthropic.com/en/api/versioning): a valid header value,
	// a date like 2023-06-01 (another shape is warned about). Default
	// 2023-06-01 when the key is absent; written empty, it is an error.
	APIVersion string `yaml:"api_version"`
	// Betas, for kind anthropic only, are the anthropic-beta values a
	// caller may pass through (Anthropic's own header names them,
	// https://docs.anthropic.com/en/api/beta-headers): each one non-empty
	// header token (no space, no comma: one beta per entry), no duplicate.
	Betas []string `yaml:"betas"`
	// MaxOutputTokens, for kind anthropic only, is sent as max_tokens, in
	// tokens, when the caller sets neither max_tokens nor
	// max_completion_tokens: the Messages API requires it. Positive;
	// default 4096 when the key is absent (written as 0, it is an error).
	MaxOutputTokens int64 `yaml:"max_output_tokens"`
}

// IsExternal reports whether the backend is outside the organisation
// (external, default true): a sensitive call never goes there.
func (b Backend) IsExternal() bool { return b.External == nil || *b.External }

// Can reports whether the backend lists capability c.
func (b Backend) Can(c Capability) bool {
	for _, have := range b.Capabilities {
		if have == c {
			return true
		}
	}
	return false
}

// Auth is how a backend authenticates Flexway (ai.backends.<name>.auth).
type Auth struct {
	// Type is none (the default), bearer, header or token_file.
	Type AuthType `yaml:"type"`
	// Secret is the credential of bearer and header; resolved at load.
	Secret Secret `yaml:"secret"`
	// Name is the header name of type header, e.g. api-key.
	Name string `yaml:"name"`
	// Path is the token file of type token_file, re-read at every call by
	// the backend (never read at load; [Load] warns when it cannot be
	// opened); absolute after [Load].
	Path string `yaml:"path"`
}

// BackendTLS is the client TLS of a backend (ai.backends.<name>.tls). Paths
// are absolute after [Load]; the files are read by the backend, not at load.
type BackendTLS struct {
	// CAFile, optional, is a PEM bundle trusted instead of the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile, with KeyFile, is the client certificate (mutual TLS).
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `yaml:"key_file"`
}

// Price is a backend's price in euros per million tokens, plus an
// optional price per call; use the methods for arithmetic.
type Price struct {
	// Input is euros per million input tokens (uncached ones, when the
	// cache tiers are set).
	Input float64 `yaml:"input"`
	// Output is euros per million output tokens.
	Output float64 `yaml:"output"`
	// CacheRead, optional, is euros per million input tokens read from the
	// provider's prompt cache (OpenAI's prompt_tokens_details.cached_tokens,
	// Anthropic's cache_read_input_tokens, Gemini's
	// cachedContentTokenCount); nil prices them at Input. Kind a2a reports
	// no tokens: set there, it is warned about.
	CacheRead *float64 `yaml:"cache_read"`
	// CacheWrite, optional, is euros per million input tokens written to
	// the provider's prompt cache (Anthropic's
	// cache_creation_input_tokens, which an OpenAI-compatible upstream
	// such as LiteLLM, or a Flexway relay, may pass on); nil prices them
	// at Input. Kinds gemini and a2a never report cache writes: set there,
	// it is warned about.
	CacheWrite *float64 `yaml:"cache_write"`
	// PerCall is euros per call served, on top of the token prices: what
	// an a2a agent, which reports no tokens, charges. Zero by default.
	PerCall float64 `yaml:"per_call"`
}

// InputNanoEURPerMTok returns Input in nano-euros per million input tokens,
// rounded half away from zero (2.50 € → 2_500_000_000). A price
// [Config.Validate] refuses saturates to math.MaxInt64.
func (p Price) InputNanoEURPerMTok() int64 { return nanoOrMax(p.Input) }

// OutputNanoEURPerMTok returns Output in nano-euros per million output
// tokens, as [Price.InputNanoEURPerMTok] does.
func (p Price) OutputNanoEURPerMTok() int64 { return nanoOrMax(p.Output) }

// CacheReadNanoEURPerMTok returns CacheRead (Input when unset) in
// nano-euros per million cached input tokens.
func (p Price) CacheReadNanoEURPerMTok() int64 {
	if p.CacheRead == nil {
		return p.InputNanoEURPerMTok()
	}
	return nanoOrMax(*p.CacheRead)
}

// CacheWriteNanoEURPerMTok returns CacheWrite (Input when unset) in
// nano-euros per million input tokens written to the cache.
func (p Price) CacheWriteNanoEURPerMTok() int64 {
	if p.CacheWrite == nil {
		return p.InputNanoEURPerMTok()
	}
	return nanoOrMax(*p.CacheWrite)
}

// PerCallNanoEUR returns PerCall in nano-euros per call.
func (p Price) PerCallNanoEUR() int64 { return nanoOrMax(p.PerCall) }

// IsZero reports whether no price at all is set.
func (p Price) IsZero() bool {
	return p.Input == 0 && p.Output == 0 && p.CacheRead == nil && p.CacheWrite == nil && p.PerCall == 0
}

// CircuitBreaker opens a backend's circuit after Failures consecutive
// failures, for OpenFor (ai.backends.<name>.circuit_breaker).
type CircuitBreaker struct {
	// Failures is the consecutive failures that open the circuit. Default 5.
	Failures int `yaml:"failures"`
	// OpenFor is how long the circuit stays open before a trial call.
	// Default 30s.
	OpenFor Duration `yaml:"open_for"`
}

// GRPC routes specialised-model services (ai.grpc.*).
type GRPC struct {
	// DescriptorSets are FileDescriptorSet files (e.g. from `buf build -o`)
	// of the proxied services; absolute after [Load], read by the server.
	DescriptorSets []string `yaml:"descriptor_sets"`
	// Services maps a full service name (acme.ocr.v1.OcrService) to the
	// kind: grpc backend that serves it.
	Services map[string]string `yaml:"services"`
}

// Audit is the audit log (audit.*).
type Audit struct {
	// Path is the JSON-lines file, one line per inference call; "-" is
	// stdout. Default ./flexway-data/audit.jsonl beside the configuration
	// file; absolute after [Load].
	Path string `yaml:"path"`
	// HashKey is the HMAC key of hashed identifiers; resolved at load.
	HashKey Secret `yaml:"hash_key"`
}

// Telemetry is metrics and traces export (telemetry.*).
type Telemetry struct {
	// Prometheus serves /metrics; nil means true. Read it with
	// [Telemetry.PrometheusEnabled].
	Prometheus *bool `yaml:"prometheus"`
	// OTLPEndpoint, optional, is the host:port of an OTLP/gRPC collector.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
}

// PrometheusEnabled reports whether /metrics is served (default true).
func (t Telemetry) PrometheusEnabled() bool { return t.Prometheus == nil || *t.Prometheus }
