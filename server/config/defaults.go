package config

import (
	"path/filepath"
	"time"
)

// The defaults, as flexway.reference.yaml documents them.
const (
	defaultHTTP                  = "127.0.0.1:8080"
	defaultGRPC                  = "127.0.0.1:9090"
	defaultSensitiveHeader       = "Flexway-Sensitive"
	defaultSoft                  = 0.8
	defaultReserveOutputTokens   = 1024
	defaultTimezone              = "UTC"
	defaultStorePath             = "./flexway-data/ledger.db"
	defaultRedisStorePath        = "./flexway-data/redis-ledger"
	defaultMaxImageBytes         = 8 * MiB
	defaultMaxBodyBytes          = 24 * MiB
	defaultMaxInflightBodyBytes  = 256 * MiB
	defaultReserveTokensPerImage = 2048
	defaultAuditPath             = "./flexway-data/audit.jsonl"
	defaultTimeout               = Duration(60 * time.Second)
	defaultIdleTimeout           = Duration(30 * time.Second)
	defaultBreakerFailures       = 5
	defaultBreakerOpenFor        = Duration(30 * time.Second)
	defaultPromptOverheadTokens  = 32
	defaultAnthropicVersion      = "2023-06-01"
	defaultAnthropicMaxOutput    = 4096
)

// defaulter is a type whose zero fields have defaults independent of its
// siblings. Load calls setDefaults on every value before decoding into it,
// so that a key written explicitly (even as zero) wins over the default.
type defaulter interface{ setDefaults() }

// ApplyDefaults fills every zero-valued field that has a default: server
// listeners, max_inflight_body_bytes (256MiB), sensitive_header, budget
// soft (0.8), reserve_output_tokens (1024), timezone (UTC), store (embedded
// at ./flexway-data/ledger.db; a redis store's own files at
// ./flexway-data/redis-ledger.*),
// vision limits (8MiB, 24MiB, 2048 tokens per image), audit path
// (./flexway-data/audit.jsonl), and per backend kind openai, auth none,
// capabilities [chat] (none for grpc), timeouts 60s and 30s, circuit
// breaker 5 failures for 30s, prompt_overhead_tokens 32, metering local,
// and for kind anthropic api_version 2023-06-01 and max_output_tokens 4096;
// per policy, governance mode enforce and budget per tenant;
// ai.backend becomes the only backend when exactly one exists. Optional booleans (external,
// allow_data_uris, prometheus) stay nil, which their accessors read as true.
//
// [Load] calls the same defaults before decoding instead, so there an
// explicit zero is kept and reported by [Config.Validate]. Relative paths
// stay relative to the working directory: only Load knows the file's.
func (c *Config) ApplyDefaults() {
	c.setDefaults()
	for name, b := range c.AI.Backends {
		b.setDefaults()
		c.AI.Backends[name] = b
	}
	c.AI.applyAliasDefaults() // see [Alias] for the aliases' defaults
	c.AI.applyPolicyDefaults()
	c.deriveDefaults(func(string) bool { return false })
}

func (c *Config) setDefaults() {
	setZero(&c.Version, 1)
	setZero(&c.Server.HTTP, defaultHTTP)
	setZero(&c.Server.GRPC, defaultGRPC)
	setZero(&c.Server.MaxInflightBodyBytes, defaultMaxInflightBodyBytes)
	setZero(&c.AI.SensitiveHeader, defaultSensitiveHeader)
	b := &c.AI.Budget
	setZero(&b.Soft, defaultSoft)
	setZero(&b.ReserveOutputTokens, defaultReserveOutputTokens)
	setZero(&b.Timezone, defaultTimezone)
	setZero(&b.Store.Type, StoreEmbedded)
	v := &c.AI.Vision
	setZero(&v.MaxImageBytes, defaultMaxImageBytes)
	setZero(&v.MaxBodyBytes, defaultMaxBodyBytes)
	setZero(&v.ReserveTokensPerImage, defaultReserveTokensPerImage)
	setZero(&c.Audit.Path, defaultAuditPath)
	c.AI.Cache.setDefaults()
}

func (b *Backend) setDefaults() {
	setZero(&b.Kind, KindOpenAI)
	setZero(&b.Auth.Type, AuthNone)
	setZero(&b.Timeout, defaultTimeout)
	setZero(&b.IdleTimeout, defaultIdleTimeout)
	setZero(&b.CircuitBreaker.Failures, defaultBreakerFailures)
	setZero(&b.CircuitBreaker.OpenFor, defaultBreakerOpenFor)
	setZero(&b.PromptOverheadTokens, defaultPromptOverheadTokens)
	setZero(&b.Metering, MeteringLocal)
}

// deriveDefaults sets the defaults that depend on other fields; Load runs
// it after decoding. written reports whether the file wrote the key at a
// path (always false for a Config built in code): a default that depends
// on the kind cannot be set before decoding, so this is how an explicit
// zero (api_version: "", max_output_tokens: 0) stays visible to validation.
func (c *Config) deriveDefaults(written func(path string) bool) {
	c.AI.deriveGuardrailDefaults()
	switch s := &c.AI.Budget.Store; s.Type {
	case StoreEmbedded:
		setZero(&s.Path, defaultStorePath)
	case StoreRedis:
		setZero(&s.Path, defaultRedisStorePath)
	}
	for name, b := range c.AI.Backends {
		if b.Capabilities == nil && b.Kind != KindGRPC {
			b.Capabilities = []Capability{CapabilityChat}
		}
		b.deriveCredentials(keyPath("ai.backends", name), written)
		if b.Kind == KindAnthropic {
			path := keyPath("ai.backends", name)
			if b.APIVersion == "" && !written(path+".api_version") {
				b.APIVersion = defaultAnthropicVersion
			}
			if b.MaxOutputTokens == 0 && !written(path+".max_output_tokens") {
				b.MaxOutputTokens = defaultAnthropicMaxOutput
			}
		}
		c.AI.Backends[name] = b
	}
	if c.AI.Backend == "" && len(c.AI.Backends) == 1 {
		for name := range c.AI.Backends {
			c.AI.Backend = name
		}
	}
}

func setZero[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// resolvePaths makes every relative path of the file absolute under dir,
// the configuration file's directory: server TLS files, the ledger file,
// the audit file (except "-", stdout), descriptor sets, backend TLS files,
// token files, and "file:" secret references. It is the only place that
// knows which keys are paths.
func (c *Config) resolvePaths(dir string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	abs(&c.Server.TLS.CertFile)
	abs(&c.Server.TLS.KeyFile)
	abs(&c.Server.TLS.ClientCAFile)
	c.Server.AdminKey.resolvePath(dir)
	for i := range c.Identity.APIKeys {
		c.Identity.APIKeys[i].Key.resolvePath(dir)
	}
	for i := range c.Identity.Relays {
		c.Identity.Relays[i].Key.resolvePath(dir)
	}
	abs(&c.AI.Budget.Store.Path)
	for i := range c.AI.GRPC.DescriptorSets {
		abs(&c.AI.GRPC.DescriptorSets[i])
	}
	for name, b := range c.AI.Backends {
		abs(&b.TLS.CAFile)
		abs(&b.TLS.CertFile)
		abs(&b.TLS.KeyFile)
		abs(&b.Auth.Path)
		b.Auth.Secret.resolvePath(dir)
		b.resolveCredentialPaths(dir)
		c.AI.Backends[name] = b
	}
	if c.Audit.Path != "-" {
		abs(&c.Audit.Path)
	}
	c.Audit.HashKey.resolvePath(dir)
	for i := range c.AI.Policies {
		c.AI.Policies[i].resolvePaths(abs)
	}
}
