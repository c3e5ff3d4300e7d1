package config

import (
	"cmp"
	"net"
	"slices"
	"strconv"
)

// Validate checks the whole configuration and returns every warning, and
// every error as [Problems] (nil when there is none), each with its key path.
// It does not stop at the first error. Validate reads nothing but the time
// zone database; a Config built in code needs [Config.ApplyDefaults] first,
// else its zero timeouts and limits are reported.
//
// Errors: a reference to a backend (ai.backend, ai.capabilities,
// sensitive_backend, soft_backend, tenant and agent backends, fallback) that
// does not exist or is kind grpc; a sensitive_backend that is external; an
// ai.grpc.services entry that does not name a kind: grpc backend; a URL that
// does not parse; a backend URL with user info or with a query parameter
// named like a credential (key, token, secret, password, sig); a backend
// tls block with an http URL; an auth type without its fields, or with
// another type's; a negative price or cap; soft outside (0, 1); an unknown
// time zone; API keys and relays without exactly one of key_sha256 (64 hex
// digits) and key, with duplicate names or keys, or without a tenant; a
// store without its path or url; unknown enum values; non-positive
// timeouts and limits; server.max_inflight_body_bytes below
// ai.vision.max_body_bytes.
//
// Aliases (ai.aliases): targets naming an inference backend and a model,
// weights, arms, sticky subjects and classifiers as [Alias] documents
// them; an alias named like a listed model, or none of whose backends
// serves chat or embeddings, is a warning.
//
// Policies (ai.policies): a name empty, not printable UTF-8, above
// [MaxPolicyNameBytes] or used twice; an unknown match.listener,
// match.operation (neither ai.chatCompletions, ai.embeddings,
// ai.listModels nor a service of ai.grpc.services), governance.mode or
// budget.per; a governance.backends entry not in ai.backends. Warnings: a
// match.tenant that neither ai.tenants nor an API key names, a match.agent
// that neither its tenant's agents nor an API key of it names; an empty
// models or backends list (every call refused); a models entry neither
// "*", an alias nor a listed model; an entry listed twice; a policy,
// governance or budget that sets nothing. The cache: see
// validateCache (ai.cache and the policies' cache sections).
//
// Relay backends: identity_headers only on a kind: relay backend, and with
// agent or sensitive named, tenant too.
//
// Kinds: a capability the kind cannot serve (embeddings on anthropic or
// a2a); api_version, betas or max_output_tokens on a kind other than
// anthropic; on anthropic, an empty or non-header api_version, an empty,
// non-token or duplicate beta, a max_output_tokens not positive. A
// fallback may cross wire formats (openai, relay, anthropic, gemini, a2a),
// never to or from grpc.
//
// Warnings: a default_model not in models; a cache_write price on gemini
// or a2a, a cache_read price on a2a (never reported, never applied); an
// anthropic api_version that is not a date; a relay metered locally
// (consumption is counted by both gateways); max_image_bytes above max_body_bytes; a redis URL with
// an inline password; a tenant or agent sensitive by configuration whose
// calls route to an external backend while ai.sensitive_backend is not set
// (every such call is refused). [Load] also warns about a token_file it
// cannot open.
func (c *Config) Validate() (warnings Problems, err error) {
	var col collector
	c.validate(&col)
	return col.problems.split()
}

func (c *Config) validate(col *collector) {
	if c.Version != 1 {
		col.errorf("version", "unsupported version %d: this release reads version 1", c.Version)
	}
	c.Server.validate(col)
	c.Identity.validate(col)
	c.AI.validate(col)
	c.AI.validatePolicies(col, c.Identity)
	c.AI.validateCache(col)
	c.checkPromptLogPaths(col)
	if m := c.Server.MaxInflightBodyBytes; m <= 0 {
		col.errorf("server.max_inflight_body_bytes", "must be positive")
	} else if m < c.AI.Vision.MaxBodyBytes {
		col.errorf("server.max_inflight_body_bytes", "%v is below ai.vision.max_body_bytes (%v): a body of the largest size allowed would always be refused", m, c.AI.Vision.MaxBodyBytes)
	}
	if c.Audit.Path == "" {
		col.errorf("audit.path", "required: a file, or - for stdout")
	}
}

func (s Server) validate(col *collector) {
	checkListen(col, "server.http", s.HTTP)
	checkListen(col, "server.grpc", s.GRPC)
	if s.HTTP != "" && s.HTTP == s.GRPC {
		col.errorf("server.grpc", "same address as server.http")
	}
	t := s.TLS
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		col.errorf("server.tls.key_file", "required with cert_file")
	case t.CertFile == "" && t.KeyFile != "":
		col.errorf("server.tls.cert_file", "required with key_file")
	}
	if t.ClientCAFile != "" && t.CertFile == "" {
		col.errorf("server.tls.client_ca_file", "needs cert_file and key_file: client certificates need TLS")
	}
}

func checkListen(col *collector, path, addr string) {
	if addr == "" {
		col.errorf(path, "required: host:port")
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		col.errorf(path, "%q is not a host:port", addr)
	}
}

// sortedKeys returns m's keys in order, so that problems come out the same
// every run.
func sortedKeys[M ~map[K]V, K cmp.Ordered, V any](m M) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
