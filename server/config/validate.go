package config

import (
	"cmp"
	"encoding/hex"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
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
// Relay backends: identity_headers only on a kind: relay backend, and with
// agent or sensitive named, tenant too.
//
// Warnings: a default_model not in models; a relay metered locally
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

func (id Identity) validate(col *collector) {
	names := map[string]string{}    // api key name → its path
	hashes := map[[32]byte]string{} // key hash → its path, across keys and relays
	checkHash := func(path string, sum [32]byte) {
		if sum == ([32]byte{}) {
			return
		}
		if first, dup := hashes[sum]; dup {
			col.errorf(path, "same key as %s", first)
			return
		}
		hashes[sum] = path
	}
	for i, k := range id.APIKeys {
		path := indexPath("identity.api_keys", i)
		checkName(col, path, k.Name, names)
		checkKey(col, path, k.KeySHA256, k.Key)
		if k.Tenant == "" {
			col.errorf(path+".tenant", "required: the tenant this key's calls are billed to")
		}
		checkHash(path, k.Hash())
	}
	relayNames := map[string]string{}
	for i, r := range id.Relays {
		path := indexPath("identity.relays", i)
		checkName(col, path, r.Name, relayNames)
		checkKey(col, path, r.KeySHA256, r.Key)
		checkHeaders(col, path+".identity_headers", r.IdentityHeaders)
		if r.IdentityHeaders.Tenant == "" {
			col.errorf(path+".identity_headers.tenant", "required: the header carrying the caller's tenant")
		}
		checkHash(path, r.Hash())
	}
}

func checkName(col *collector, path, name string, seen map[string]string) {
	if name == "" {
		col.errorf(path+".name", "required")
		return
	}
	if first, dup := seen[name]; dup {
		col.errorf(path+".name", "duplicate name %q (also %s)", name, first)
		return
	}
	seen[name] = path
}

func checkKey(col *collector, path, sum string, key Secret) {
	switch {
	case sum != "" && !key.IsZero():
		col.errorf(path, "set key_sha256 or key, not both")
	case sum == "" && key.IsZero():
		col.errorf(path, "one of key_sha256 or key is required")
	case sum != "":
		if b, err := hex.DecodeString(sum); err != nil || len(b) != 32 {
			col.errorf(path+".key_sha256", "want 64 hex digits (a SHA-256), got %d characters", len(sum))
		}
	}
}

// checkHeaders checks that every header name given is an HTTP token.
func checkHeaders(col *collector, path string, h IdentityHeaders) {
	checkHeader(col, path+".tenant", h.Tenant)
	checkHeader(col, path+".agent", h.Agent)
	checkHeader(col, path+".sensitive", h.Sensitive)
}

func checkHeader(col *collector, path, name string) {
	if name != "" && !isToken(name) {
		col.errorf(path, "%q is not a valid header name", name)
	}
}

// isToken reports whether s is an RFC 9110 token, as header names are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	return true
}

func (ai AI) validate(col *collector) {
	// ref checks that name (at path) is a backend that serves inference.
	ref := func(path, name string) (Backend, bool) {
		b, ok := ai.Backends[name]
		switch {
		case !ok:
			col.errorf(path, "no backend %q in ai.backends", name)
		case b.Kind == KindGRPC:
			col.errorf(path, "backend %q is kind grpc: it serves no chat, vision or embeddings", name)
			ok = false
		}
		return b, ok
	}

	switch {
	case len(ai.Backends) == 0:
		col.errorf("ai.backends", "at least one backend is required")
	case ai.Backend == "":
		col.errorf("ai.backend", "required: the default backend, one of %s", strings.Join(sortedKeys(ai.Backends), ", "))
	default:
		ref("ai.backend", ai.Backend)
	}
	if ai.SensitiveHeader == "" {
		col.errorf("ai.sensitive_header", "required")
	}
	checkHeader(col, "ai.sensitive_header", ai.SensitiveHeader)
	if ai.SensitiveBackend != "" {
		if b, ok := ref("ai.sensitive_backend", ai.SensitiveBackend); ok && b.IsExternal() {
			col.errorf("ai.sensitive_backend", "backend %q is external: sensitive calls stay inside; set external: false on it or name an internal backend", ai.SensitiveBackend)
		}
	}
	for _, capa := range sortedKeys(ai.Capabilities) {
		path, name := keyPath("ai.capabilities", string(capa)), ai.Capabilities[capa]
		if !capa.Valid() {
			col.errorf(path, "unknown capability %q: want chat, vision or embeddings", capa)
			continue
		}
		if b, ok := ref(path, name); ok && !b.Can(capa) {
			col.errorf(path, "backend %q does not list capability %s", name, capa)
		}
	}
	ai.Budget.validate(col, ref)
	for _, tname := range sortedKeys(ai.Tenants) {
		t, path := ai.Tenants[tname], keyPath("ai.tenants", tname)
		if tname == "" {
			col.errorf(path, "a tenant needs a name")
		}
		if t.Backend != "" {
			ref(path+".backend", t.Backend)
		}
		t.Budget.validate(col, path+".budget")
		for _, aname := range sortedKeys(t.Agents) {
			a, apath := t.Agents[aname], keyPath(path+".agents", aname)
			if aname == "" {
				col.errorf(apath, "an agent needs a name")
			}
			if a.Backend != "" {
				ref(apath+".backend", a.Backend)
			}
			a.Budget.validate(col, apath+".budget")
		}
	}
	ai.checkSensitiveRoutes(col)
	ai.Vision.validate(col)
	for _, name := range sortedKeys(ai.Backends) {
		ai.Backends[name].validate(col, name, ai.Backends)
	}
	for i, p := range ai.GRPC.DescriptorSets {
		if p == "" {
			col.errorf(indexPath("ai.grpc.descriptor_sets", i), "empty path")
		}
	}
	for _, svc := range sortedKeys(ai.GRPC.Services) {
		path, name := keyPath("ai.grpc.services", svc), ai.GRPC.Services[svc]
		b, ok := ai.Backends[name]
		switch {
		case svc == "":
			col.errorf(path, "a service needs its full name, e.g. acme.ocr.v1.OcrService")
		case !ok:
			col.errorf(path, "no backend %q in ai.backends", name)
		case b.Kind != KindGRPC:
			col.errorf(path, "backend %q is kind %s: a gRPC service must name a kind: grpc backend", name, b.Kind)
		}
	}
}

// checkSensitiveRoutes warns, when ai.sensitive_backend is not set, about a
// tenant or agent that is sensitive by configuration while its calls route
// (agent backend, else tenant backend, else ai.backend) to an external
// backend: routing refuses every such call. An agent of a sensitive tenant
// is reported only when it routes elsewhere than its tenant.
func (ai AI) checkSensitiveRoutes(col *collector) {
	if ai.SensitiveBackend != "" {
		return
	}
	// external reports whether backend name is an external inference
	// backend; a missing or grpc one is an error reported apart.
	external := func(name string) bool {
		b, ok := ai.Backends[name]
		return ok && b.Kind != KindGRPC && b.IsExternal()
	}
	warn := func(path, who, name string) {
		col.warnf(path, "every call of this %s is sensitive but routes to external backend %s and ai.sensitive_backend is not set: its calls will be refused (403)", who, name)
	}
	for _, tname := range sortedKeys(ai.Tenants) {
		t, path := ai.Tenants[tname], keyPath("ai.tenants", tname)
		route := cmp.Or(t.Backend, ai.Backend)
		if t.Sensitive && external(route) {
			warn(path+".sensitive", "tenant", route)
		}
		for _, aname := range sortedKeys(t.Agents) {
			a, apath := t.Agents[aname], keyPath(path+".agents", aname)
			aroute := cmp.Or(a.Backend, route)
			switch {
			case !external(aroute):
			case a.Sensitive && !(t.Sensitive && aroute == route):
				warn(apath+".sensitive", "agent", aroute)
			case t.Sensitive && aroute != route:
				// Sensitive through its tenant, routed apart from it.
				warn(apath+".backend", "agent (its tenant is sensitive)", aroute)
			}
		}
	}
}

func (b Budget) validate(col *collector, ref func(path, name string) (Backend, bool)) {
	if !(b.Soft > 0 && b.Soft < 1) {
		col.errorf("ai.budget.soft", "%v is not in (0, 1): it is a fraction of every cap, below the cap itself", b.Soft)
	}
	if b.SoftBackend != "" {
		ref("ai.budget.soft_backend", b.SoftBackend)
	}
	if b.ReserveOutputTokens < 0 {
		col.errorf("ai.budget.reserve_output_tokens", "must not be negative")
	}
	if b.MaxOutputTokens < 0 {
		col.errorf("ai.budget.max_output_tokens", "must not be negative (leave it out for none)")
	}
	if _, err := b.Location(); err != nil {
		col.errorf("ai.budget.timezone", "unknown time zone %q: want an IANA name such as UTC or Europe/Paris", b.Timezone)
	}
	s := b.Store
	switch s.Type {
	case StoreEmbedded:
		if s.Path == "" {
			col.errorf("ai.budget.store.path", "required for store type embedded")
		}
	case StoreRedis:
		u, err := url.Parse(s.URL)
		switch {
		case s.URL == "":
			col.errorf("ai.budget.store.url", "required for store type redis, e.g. redis://127.0.0.1:6379/0")
		case err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "":
			col.errorf("ai.budget.store.url", "want redis://host:port/db or rediss://host:port/db")
		default:
			if _, hasPassword := u.User.Password(); hasPassword {
				col.warnf("ai.budget.store.url", "holds an inline password; prefer a redis ACL user without one, or a socket reachable only from this host")
			}
		}
	default:
		col.errorf("ai.budget.store.type", "unknown store type %q: want embedded or redis", s.Type)
	}
	b.Default.validate(col, "ai.budget.default")
}

func (c Caps) validate(col *collector, path string) {
	if c.TokensPerDay != nil && *c.TokensPerDay < 0 {
		col.errorf(path+".tokens_per_day", "must not be negative")
	}
	if c.TokensPerMonth != nil && *c.TokensPerMonth < 0 {
		col.errorf(path+".tokens_per_month", "must not be negative")
	}
	if c.EURPerMonth != nil {
		checkEUR(col, path+".eur_per_month", *c.EURPerMonth)
	}
}

// checkEUR checks a euro amount: not negative, and convertible to nano-euros.
func checkEUR(col *collector, path string, eur float64) {
	switch {
	case math.IsNaN(eur) || math.IsInf(eur, 0):
		col.errorf(path, "not a number")
	case eur < 0:
		col.errorf(path, "must not be negative")
	case eur > MaxEUR:
		col.errorf(path, "too large: at most %d euros", MaxEUR)
	}
}

func (v Vision) validate(col *collector) {
	if v.MaxImageBytes <= 0 {
		col.errorf("ai.vision.max_image_bytes", "must be positive")
	}
	if v.MaxBodyBytes <= 0 {
		col.errorf("ai.vision.max_body_bytes", "must be positive")
	}
	if v.MaxBodyBytes > 0 && v.MaxImageBytes > v.MaxBodyBytes {
		col.warnf("ai.vision.max_image_bytes", "%v exceeds max_body_bytes (%v): images are bounded by the body limit", v.MaxImageBytes, v.MaxBodyBytes)
	}
	if v.ReserveTokensPerImage < 0 {
		col.errorf("ai.vision.reserve_tokens_per_image", "must not be negative")
	}
	for i, o := range v.AllowedOrigins {
		u, err := url.Parse(o)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil ||
			u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "?") {
			col.errorf(indexPath("ai.vision.allowed_origins", i), "%q is not an https origin: want https://host or https://host:port", o)
		}
	}
}

func (b Backend) validate(col *collector, name string, all map[string]Backend) {
	path := keyPath("ai.backends", name)
	if name == "" {
		col.errorf(path, "a backend needs a name")
	}
	inference := b.Kind == KindOpenAI || b.Kind == KindRelay
	if !b.Kind.Valid() {
		col.errorf(path+".kind", "unknown kind %q: want openai, relay or grpc", b.Kind)
	}
	b.checkURL(col, path)
	b.Auth.validate(col, path+".auth")
	switch t := b.TLS; {
	case t.CertFile != "" && t.KeyFile == "":
		col.errorf(path+".tls.key_file", "required with cert_file")
	case t.CertFile == "" && t.KeyFile != "":
		col.errorf(path+".tls.cert_file", "required with key_file")
	}

	models := map[string]bool{}
	for i, m := range b.Models {
		mpath := indexPath(path+".models", i)
		switch {
		case m == "":
			col.errorf(mpath, "empty model name")
		case models[m]:
			col.errorf(mpath, "duplicate model %q", m)
		}
		models[m] = true
	}
	if b.DefaultModel != "" && len(b.Models) > 0 && !models[b.DefaultModel] {
		col.warnf(path+".default_model", "%q is not in models: requests for other models will ask the backend for a model it does not list", b.DefaultModel)
	}

	checkEUR(col, path+".price.input", b.Price.Input)
	checkEUR(col, path+".price.output", b.Price.Output)

	if b.Kind == KindGRPC {
		// The proxy applies neither: say so rather than let them mislead.
		if len(b.Fallback) > 0 {
			col.warnf(path+".fallback", "not applied to a kind: grpc backend: a proxied call is not fallen back from")
		}
		if b.Price != (Price{}) {
			col.warnf(path+".price", "not applied to a kind: grpc backend: its methods are priced by their (flexway.v1.operation).ai option")
		}
	}
	switch {
	case b.Kind == KindGRPC && len(b.Capabilities) > 0:
		col.errorf(path+".capabilities", "kind grpc serves no chat, vision or embeddings: remove capabilities")
	case inference && len(b.Capabilities) == 0:
		col.errorf(path+".capabilities", "at least one of chat, vision or embeddings is required")
	}
	seenCap := map[Capability]bool{}
	for i, c := range b.Capabilities {
		cpath := indexPath(path+".capabilities", i)
		switch {
		case !c.Valid():
			col.errorf(cpath, "unknown capability %q: want chat, vision or embeddings", c)
		case seenCap[c]:
			col.errorf(cpath, "duplicate capability %s", c)
		}
		seenCap[c] = true
	}

	seenFallback := map[string]bool{}
	for i, f := range b.Fallback {
		fpath := indexPath(path+".fallback", i)
		fb, ok := all[f]
		switch {
		case f == name:
			col.errorf(fpath, "a backend cannot fall back to itself")
		case seenFallback[f]:
			col.errorf(fpath, "duplicate fallback %q: each backend is tried at most once", f)
		case !ok:
			col.errorf(fpath, "no backend %q in ai.backends", f)
		case (fb.Kind == KindGRPC) != (b.Kind == KindGRPC):
			col.errorf(fpath, "backend %q is kind %s: a kind %s backend cannot fall back to it", f, fb.Kind, b.Kind)
		}
		seenFallback[f] = true
	}

	if b.Timeout <= 0 {
		col.errorf(path+".timeout", "must be positive")
	}
	if b.IdleTimeout <= 0 {
		col.errorf(path+".idle_timeout", "must be positive")
	}
	if b.CircuitBreaker.Failures <= 0 {
		col.errorf(path+".circuit_breaker.failures", "must be positive")
	}
	if b.CircuitBreaker.OpenFor <= 0 {
		col.errorf(path+".circuit_breaker.open_for", "must be positive")
	}
	if b.PromptOverheadTokens < 0 {
		col.errorf(path+".prompt_overhead_tokens", "must not be negative")
	}

	switch {
	case !b.Metering.Valid():
		col.errorf(path+".metering", "unknown metering %q: want local or upstream", b.Metering)
	case b.Kind == KindRelay && b.Metering == MeteringLocal:
		col.warnf(path+".metering", "relay metered locally: consumption is counted by both gateways, this one and the peer; set metering: upstream if the peer meters and bills")
	}
	switch h := b.IdentityHeaders; {
	case !h.IsZero() && b.Kind != KindRelay && b.Kind != KindGRPC:
		col.errorf(path+".identity_headers", "only a kind: relay or kind: grpc backend receives the caller's identity")
	case !h.IsZero() && h.Tenant == "":
		// The peer refuses a relay's call that passes no tenant.
		col.errorf(path+".identity_headers.tenant", "required with agent or sensitive: the peer needs the header carrying the caller's tenant")
	case b.Kind == KindRelay && h.IsZero():
		col.warnf(path+".identity_headers", "not set: the peer gets no tenant and refuses every call; declare at least tenant (and sensitive)")
	}
	if b.Kind == KindRelay && !b.IsExternal() && b.IdentityHeaders.Sensitive == "" {
		col.warnf(path+".identity_headers.sensitive", "not set: the peer cannot know a call is sensitive, so sensitive calls are never sent to this relay although it is declared external: false")
	}
	checkHeaders(col, path+".identity_headers", b.IdentityHeaders)
}

// checkURL checks the backend's URL: http(s) for openai and relay, a gRPC
// target (scheme:///name or host:port) for grpc; bpath is the backend's key
// path. An http(s) URL carries no credential (no user info, no query
// parameter named like one), and a tls block needs it to be https. The
// backend checks the URL again when built; here every problem gets its
// line. Messages never repeat user info or a query.
func (b Backend) checkURL(col *collector, bpath string) {
	path := bpath + ".url"
	if b.URL == "" {
		col.errorf(path, "required")
		return
	}
	u, err := url.Parse(b.URL)
	switch b.Kind {
	case KindOpenAI, KindRelay:
		switch {
		case err != nil:
			col.errorf(path, "the value is not an http or https URL: it does not parse")
			return
		case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			col.errorf(path, "%q is not an http or https URL", shownURL(u))
		}
		if u.User != nil {
			col.errorf(path, "user info is not allowed in a URL; use auth")
		}
		if names := credentialParams(u.RawQuery); len(names) > 0 {
			col.errorf(path, "query parameter %s: credentials may not be written in a URL query; use auth (type header or bearer) with a secret reference",
				strings.Join(names, ", "))
		}
		if u.Scheme == "http" && b.TLS != (BackendTLS{}) {
			col.errorf(bpath+".tls", "tls needs an https url")
		}
	case KindGRPC:
		if _, _, hpErr := net.SplitHostPort(b.URL); hpErr == nil {
			return
		}
		if err != nil || u.Scheme == "" || (u.Host == "" && u.Path == "" && u.Opaque == "") {
			col.errorf(path, "%q is not a gRPC target: want dns:///host:port or host:port", b.URL)
		}
	}
}

// shownURL is u as a message may show it: scheme, host and path, without
// user info, query or fragment, which may hold a credential.
func shownURL(u *url.URL) string {
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// credentialWords are the parts of a query parameter name (compared
// without case) that mark it as a credential.
var credentialWords = []string{"key", "token", "secret", "password", "sig"}

// credentialParams returns, quoted and in order, the names of the query
// parameters of rawQuery that look like credentials (api-key, access_token,
// sig, ...); never their values.
func credentialParams(rawQuery string) []string {
	var names []string
	seen := map[string]bool{}
	for _, part := range strings.FieldsFunc(rawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		name, _, _ := strings.Cut(part, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		lower := strings.ToLower(name)
		if seen[lower] || !slices.ContainsFunc(credentialWords, func(w string) bool { return strings.Contains(lower, w) }) {
			continue
		}
		seen[lower] = true
		names = append(names, strconv.Quote(name))
	}
	return names
}

func (a Auth) validate(col *collector, path string) {
	need := map[AuthType][]string{
		AuthNone:      nil,
		AuthBearer:    {"secret"},
		AuthHeader:    {"secret", "name"},
		AuthTokenFile: {"path"},
	}
	fields, ok := need[a.Type]
	if !ok {
		col.errorf(path+".type", "unknown auth type %q: want none, bearer, header or token_file", a.Type)
		return
	}
	set := map[string]bool{"secret": !a.Secret.IsZero(), "name": a.Name != "", "path": a.Path != ""}
	for _, f := range []string{"secret", "name", "path"} {
		switch {
		case slices.Contains(fields, f) && !set[f]:
			col.errorf(path+"."+f, "required for auth type %s", a.Type)
		case !slices.Contains(fields, f) && set[f]:
			col.errorf(path+"."+f, "not used by auth type %s", a.Type)
		}
	}
	checkHeader(col, path+".name", a.Name)
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
