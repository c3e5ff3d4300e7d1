package upstream

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/clienttls"
)

// Defaults of [Options].
const (
	// DefaultTimeout is Options.Timeout when zero: the wait for response
	// headers.
	DefaultTimeout = 60 * time.Second
	// DefaultIdleTimeout is Options.IdleTimeout when zero: the longest
	// silence while reading an answer.
	DefaultIdleTimeout = 30 * time.Second
)

// The values of [Auth.Type].
const (
	// AuthNone sends no credentials. The empty type means AuthNone.
	AuthNone = "none"
	// AuthBearer sends "Authorization: Bearer <Secret>".
	AuthBearer = "bearer"
	// AuthHeader sends "<Header>: <Secret>".
	AuthHeader = "header"
	// AuthTokenFile sends "Authorization: Bearer <token>", the token being
	// the content of TokenFile, whitespace-trimmed, read again at every
	// call (a rotated token is used at once).
	AuthTokenFile = "token_file"
)

// Pool and connection settings of the transport [New] builds.
const (
	maxIdleConnsPerHost = 256
	maxIdleConns        = 1024
	idleConnTimeout     = 90 * time.Second
	dialTimeout         = 10 * time.Second
	keepAlive           = 30 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
	maxHeaderBytes      = 1 << 20
	h2SendPingTimeout   = 30 * time.Second
	h2PingTimeout       = 15 * time.Second
)

// Options configures a [Backend]; it mirrors ai.backends.<name> of a
// `kind: openai` or `kind: relay` backend (a relay is another Flexway: the
// same API, plus IdentityHeaders), secrets already resolved.
type Options struct {
	// Name is the backend's key in ai.backends. Required; it appears in
	// error messages and in [backends.Served].
	Name string
	// URL is the base URL, http or https, e.g. http://127.0.0.1:8000/v1;
	// the paths /chat/completions and /embeddings are appended to its
	// path, and its query, if any, is kept. Required; user info and
	// fragments are refused.
	URL string
	// Auth is how the backend authenticates Flexway to the upstream.
	// Refused with Credentials.
	Auth Auth
	// Credentials, optional, is a pool of credentials used instead of
	// Auth (ai.backends.<name>.credentials): each call picks one key, a
	// key answered 429 rests and one answered 401, 402 or 403 is set
	// aside, and the call moves to the next key at once. See
	// [Credentials].
	Credentials *Credentials
	// CredentialUse, optional, is told the outcome of each attempt on a
	// pool's key, for metrics: credential is the key's name, outcome one
	// of [CredentialServed], [CredentialRateLimited],
	// [CredentialRefused] or [CredentialFailed]. Called on the call's
	// goroutine; it must be fast.
	CredentialUse func(credential, outcome string)
	// TLS configures the client side of https connections; it is refused
	// with an http URL.
	TLS TLS
	// Models are the model names the upstream serves: a requested model in
	// Models is sent as is, any other is replaced by DefaultModel. Empty
	// means every requested model is sent as is.
	Models []string
	// DefaultModel is sent when the requested model is not in Models (or,
	// with Models empty, when none was requested). Required when Models is
	// set.
	DefaultModel string
	// Timeout bounds the wait for the upstream's response headers, from
	// the start of the call (dial, TLS handshake and request included).
	// Zero means [DefaultTimeout]; negative is refused.
	Timeout time.Duration
	// IdleTimeout bounds each wait for bytes of an answer body (an SSE
	// stream's events, a completion's JSON): when nothing arrives for that
	// long the upstream request is canceled. Zero means
	// [DefaultIdleTimeout]; negative is refused.
	IdleTimeout time.Duration
	// IdentityHeaders, set only for a `kind: relay` backend (another
	// Flexway), names the headers under which each call's identity, read
	// from its call state (package server/call), is sent; zero sends none.
	// See [IdentityHeaders].
	IdentityHeaders IdentityHeaders
	// MeteredBy is who meters and bills the backend's calls:
	// [MeteredLocal] (the default when empty) or [MeteredUpstream] (a
	// relay whose peer meters; the local caps still hold). The backend
	// only records it, for audit lines and metrics ([Backend.MeteredBy]).
	MeteredBy string
	// Transport, optional and meant for tests, replaces the pooled
	// transport New builds; TLS is then validated but not applied.
	Transport http.RoundTripper
	// Wire, set for kinds anthropic, gemini and a2a, is the backend's
	// wire format: requests are translated by it and posted to URL plus
	// its path, answers and errors decoded by it. Nil is OpenAI's own
	// format, sent to URL/chat/completions and URL/embeddings.
	Wire backends.Wire
	// Header, optional, is sent with every request (anthropic-version for
	// kind anthropic). Names the backend sets itself are refused, as for
	// Auth.Header; values must be valid header values.
	Header http.Header
	// Log receives the once-per-field-name notice of request fields a
	// Wire dropped; nil is slog.Default().
	Log *slog.Logger
}

// The values of [Options.MeteredBy].
const (
	// MeteredLocal: this gateway meters and bills the backend's calls.
	MeteredLocal = "local"
	// MeteredUpstream: the upstream (a relay's peer) meters and bills
	// them; this gateway still holds its own caps.
	MeteredUpstream = "upstream"
)

// IdentityHeaders names the headers under which a relay backend sends the
// caller's identity to the peer Flexway (ai.backends.<name>.identity_headers).
// An empty name sends nothing for that part. The values come from the
// call's state (server/call.FromContext), never from the caller's request
// headers: Tenant and Agent are sent when not empty, Sensitive is
// sent as "true" only for a sensitive call. A call without a state sends
// none.
type IdentityHeaders struct {
	// Tenant is the header of the caller's tenant, e.g. Flexway-Tenant.
	Tenant string
	// Agent is the header of the caller's agent, e.g. Flexway-Agent.
	Agent string
	// Sensitive is the header flagging a sensitive call, e.g.
	// Flexway-Sensitive.
	Sensitive string
}

func (h IdentityHeaders) isZero() bool { return h == IdentityHeaders{} }

// Auth is how a backend authenticates Flexway (ai.backends.<name>.auth).
type Auth struct {
	// Type is one of [AuthNone] (or empty), [AuthBearer], [AuthHeader],
	// [AuthTokenFile].
	Type string
	// Secret is the resolved credential of bearer and header; it must be a
	// valid header value (no control character). Never logged.
	Secret string
	// Header is the header name of type header, e.g. api-key. Headers the
	// backend sets itself (Content-Type, Accept, User-Agent, Host,
	// Content-Length, ...) are refused.
	Header string
	// TokenFile is the path of type token_file; the file is read at every
	// call, never by [New].
	TokenFile string
}

// TLS is the client TLS of a backend (ai.backends.<name>.tls); each field
// is a path to a PEM file, read by [New].
type TLS struct {
	// CAFile, optional, is a PEM bundle trusted instead of the system
	// roots.
	CAFile string
	// CertFile, with KeyFile, is the client certificate chain for mutual
	// TLS.
	CertFile string
	// KeyFile is the private key of CertFile.
	KeyFile string
}

func (t TLS) isZero() bool { return t == TLS{} }

// reservedHeaders are set by the backend or the transport; an auth header
// may not be one of them.
var reservedHeaders = map[string]bool{
	"Accept": true, "Accept-Encoding": true, "Connection": true, "Content-Length": true,
	"Content-Type": true, "Host": true, "Te": true, "Trailer": true, "Transfer-Encoding": true,
	"Upgrade": true, "User-Agent": true, "Traceparent": true, "Tracestate": true,
}

// New validates o, loads its TLS files and returns the backend with its own
// connection pool. Errors name the offending option (and file), never a
// secret.
func New(o Options) (*Backend, error) {
	if o.Name == "" {
		return nil, errors.New("upstream backend: name is required")
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("backend %q: "+format, append([]any{o.Name}, args...)...)
	}
	base, err := parseBaseURL(o.URL)
	if err != nil {
		return nil, fail("url: %w", err)
	}
	if o.Timeout < 0 {
		return nil, fail("timeout must not be negative")
	}
	if o.IdleTimeout < 0 {
		return nil, fail("idle_timeout must not be negative")
	}
	if len(o.Models) > 0 && o.DefaultModel == "" {
		return nil, fail("default_model is required when models is set")
	}
	b := &Backend{
		name:          o.Name,
		chatURL:       base.JoinPath("chat/completions").String(),
		embeddingsURL: base.JoinPath("embeddings").String(),
		defaultModel:  o.DefaultModel,
		timeout:       o.Timeout,
		idleTimeout:   o.IdleTimeout,
		userAgent:     userAgent(),
	}
	if b.timeout == 0 {
		b.timeout = DefaultTimeout
	}
	if b.idleTimeout == 0 {
		b.idleTimeout = DefaultIdleTimeout
	}
	if len(o.Models) > 0 {
		b.models = make(map[string]struct{}, len(o.Models))
		for _, m := range o.Models {
			b.models[m] = struct{}{}
		}
	}
	if err := b.setCredentials(o); err != nil {
		return nil, fail("%w", err)
	}
	if o.Wire != nil {
		log := o.Log
		if log == nil {
			log = slog.Default()
		}
		b.wire = &translated{wire: o.Wire, base: base, log: log}
	}
	for k, vs := range o.Header {
		ck := http.CanonicalHeaderKey(k)
		if !validHeaderName(k) || reservedHeaders[ck] {
			return nil, fail("header %q cannot be set", k)
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				return nil, fail("header %s: a value contains a character not allowed in a header", ck)
			}
		}
		if b.header == nil {
			b.header = http.Header{}
		}
		b.header[ck] = append([]string(nil), vs...)
	}
	if err := b.setIdentityHeaders(o.IdentityHeaders); err != nil {
		return nil, fail("identity_headers: %w", err)
	}
	switch o.MeteredBy {
	case "", MeteredLocal:
		b.meteredBy = MeteredLocal
	case MeteredUpstream:
		b.meteredBy = MeteredUpstream
	default:
		return nil, fail("metering: unknown value %q (want local or upstream)", o.MeteredBy)
	}
	if !o.TLS.isZero() && base.Scheme != "https" {
		return nil, fail("tls is set but url is not https")
	}
	tlsConf, err := loadTLS(o.TLS)
	if err != nil {
		return nil, fail("tls: %w", err)
	}
	rt := o.Transport
	switch {
	case rt != nil:
	case base.Scheme == "https":
		t := newTransport(tlsConf, true, b.timeout)
		b.transport = t
		rt = t
	default:
		rt = newH1Transport(hostPort(base))
	}
	b.client = &http.Client{
		Transport: rt,
		// A redirect is answered as the upstream's status: following it
		// would resend the body and credentials elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return b, nil
}

// hostPort is u's host and port, the scheme's default port if none.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// parseBaseURL checks a backend's base URL.
func parseBaseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("scheme %q, want http or https", u.Scheme)
	case u.Host == "":
		return nil, errors.New("no host")
	case u.User != nil:
		return nil, errors.New("user info is not allowed; use auth")
	case u.Fragment != "":
		return nil, errors.New("fragment is not allowed")
	}
	return u, nil
}

// setIdentityHeaders validates h and stores its canonical names: each must
// be a valid header name, none a header the backend sets itself or its
// auth header, and no two the same.
func (b *Backend) setIdentityHeaders(h IdentityHeaders) error {
	seen := map[string]string{}
	for _, f := range []struct{ field, name string }{{"tenant", h.Tenant}, {"agent", h.Agent}, {"sensitive", h.Sensitive}} {
		if f.name == "" {
			continue
		}
		name := http.CanonicalHeaderKey(f.name)
		switch {
		case !validHeaderName(f.name):
			return fmt.Errorf("%s: %q is not a valid header name", f.field, f.name)
		case reservedHeaders[name]:
			return fmt.Errorf("%s: header %q is set by the backend itself", f.field, f.name)
		case name == "Authorization" || b.authHeader(name):
			return fmt.Errorf("%s: header %q carries the backend's credentials", f.field, f.name)
		case seen[name] != "":
			return fmt.Errorf("%s: header %q is also %s", f.field, f.name, seen[name])
		}
		seen[name] = f.field
	}
	b.identity = IdentityHeaders{
		Tenant:    canonicalOrEmpty(h.Tenant),
		Agent:     canonicalOrEmpty(h.Agent),
		Sensitive: canonicalOrEmpty(h.Sensitive),
	}
	return nil
}

func canonicalOrEmpty(name string) string {
	if name == "" {
		return ""
	}
	return http.CanonicalHeaderKey(name)
}

// loadTLS reads the CA bundle and client key pair of t; nil when t is zero.
func loadTLS(t TLS) (*tls.Config, error) {
	if t.isZero() {
		return nil, nil
	}
	return clienttls.Files{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile}.Config()
}

// newTransport returns the backend's one pooled transport. The
// environment's proxy settings are not used: a backend's traffic goes where
// its URL says.
func newTransport(tlsConf *tls.Config, https bool, timeout time.Duration) *http.Transport {
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive}
	t := &http.Transport{
		DialContext:            dialer.DialContext,
		TLSClientConfig:        tlsConf,
		TLSHandshakeTimeout:    tlsHandshakeTimeout,
		MaxIdleConns:           maxIdleConns,
		MaxIdleConnsPerHost:    maxIdleConnsPerHost,
		IdleConnTimeout:        idleConnTimeout,
		ResponseHeaderTimeout:  timeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxHeaderBytes,
		ForceAttemptHTTP2:      https,
	}
	if https {
		t.HTTP2 = &http.HTTP2Config{SendPingTimeout: h2SendPingTimeout, PingTimeout: h2PingTimeout}
	}
	return t
}

// validHeaderName reports whether s is an RFC 9110 token
// ([httpguts.ValidHeaderFieldName]).
func validHeaderName(s string) bool { return httpguts.ValidHeaderFieldName(s) }

// validHeaderValue reports whether s may be sent as a header value as it
// is: not empty, no leading or trailing whitespace, and no control
// character but tab ([httpguts.ValidHeaderFieldValue]).
func validHeaderValue(s string) bool {
	return s != "" && s == strings.TrimSpace(s) && httpguts.ValidHeaderFieldValue(s)
}
