package config

import (
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

func (b Backend) validate(col *collector, name string, all map[string]Backend) {
	path := keyPath("ai.backends", name)
	if name == "" {
		col.errorf(path, "a backend needs a name")
	}
	if !b.Kind.Valid() {
		col.errorf(path+".kind", "unknown kind %q: want openai, relay, grpc, anthropic, gemini or a2a", b.Kind)
	}
	b.checkURL(col, path)
	b.Auth.validate(col, path+".auth")
	b.validateCredentials(col, path)
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
	b.checkKindKeys(col, path)

	if b.Kind == KindGRPC {
		// The proxy applies neither: say so rather than let them mislead.
		if len(b.Fallback) > 0 {
			col.warnf(path+".fallback", "not applied to a kind: grpc backend: a proxied call is not fallen back from")
		}
		if !b.Price.IsZero() {
			col.warnf(path+".price", "not applied to a kind: grpc backend: its methods are priced by their (flexway.v1.operation).ai option")
		}
	}
	switch {
	case b.Kind == KindGRPC && len(b.Capabilities) > 0:
		col.errorf(path+".capabilities", "kind grpc serves no chat, vision or embeddings: remove capabilities")
	case b.Kind.Inference() && len(b.Capabilities) == 0:
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
		default:
			b.checkCapability(col, cpath, c)
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
		col.errorf(path+".identity_headers", "only a kind: relay or kind: grpc backend receives the caller's identity; this one is kind %s", b.Kind)
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

// checkURL checks the backend's URL: http(s) for openai, relay, anthropic,
// gemini and a2a, a gRPC target (scheme:///name or host:port) for grpc;
// bpath is the backend's key path. An http(s) URL carries no credential
// (no user info, no query parameter named like one), and a tls block needs
// it to be https. The backend checks the URL again when built; here every
// problem gets its line. Messages never repeat user info or a query.
func (b Backend) checkURL(col *collector, bpath string) {
	path := bpath + ".url"
	if b.URL == "" {
		col.errorf(path, "required")
		return
	}
	u, err := url.Parse(b.URL)
	switch b.Kind {
	case KindOpenAI, KindRelay, KindAnthropic, KindGemini, KindA2A:
		if !checkHTTPURL(col, path, u, err, "; use auth", "; use auth ("+authHint[b.Kind]+") with a secret reference") {
			return
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

// authHint is the auth a kind's upstream takes its key in, for the
// message about a credential written in a URL query: Gemini's examples
// write ?key=..., which its x-goog-api-key header replaces
// (https://ai.google.dev/gemini-api/docs/api-key), and Anthropic's is
// x-api-key (https://docs.anthropic.com/en/api/overview).
var authHint = map[BackendKind]string{
	KindOpenAI:    "type header or bearer",
	KindRelay:     "type header or bearer",
	KindA2A:       "type header or bearer",
	KindAnthropic: "type header, name x-api-key",
	KindGemini:    "type header, name x-goog-api-key",
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
