// Package console serves Flexway's console: a page at /console that shows,
// per tenant and agent, a gauge for each budget cap (used, reserved, the
// soft mark and the limit) and, per backend, its calls, euros, errors and
// circuit state, refreshed live.
//
// The page, its script and its style sheet are embedded in the binary:
// plain HTML, JavaScript and CSS with no build step, no CDN and no external
// font, so that it works offline. Every answer carries a
// Content-Security-Policy of default-src 'self' and the page runs no
// inline script.
//
// The console is behind server.admin_key. A browser signs in with the key
// on the login form (POST /console/login), which sets the flexway_console
// cookie (HttpOnly, SameSite=Strict, Secure over TLS); a script may send
// the key as "Authorization: Bearer" instead. The page's script reads the
// admin API through a same-origin proxy, /console/api/{usage,backends,
// metrics}, which checks the cookie and calls the gateway's own handler
// in-process with the key as a bearer token: the admin API's
// authentication is unchanged, and the key never reaches the page's
// script or a URL.
package console

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flexway/flexway/server/bearer"
	"github.com/flexway/flexway/transcoder"
)

// CookieName is the console's session cookie: a random token naming a
// session held by this process (never the admin key), scoped to Path.
const CookieName = "flexway_console"

// SessionTTL is how long a console session lasts after its login.
const SessionTTL = 12 * time.Hour

// DefaultRefresh is how often the page reads the gauges when
// Options.Refresh is 0.
const DefaultRefresh = 2 * time.Second

// Path is where the console is served; mount [Handler] on both Path and
// Path + "/".
const Path = "/console"

// Options configures the console.
type Options struct {
	// AdminKeySum is the SHA-256 of server.admin_key; nil turns the
	// console off (every path answers 404).
	AdminKeySum *[sha256.Size]byte
	// Soft is ai.budget.soft, the fraction of every cap at which the soft
	// mark is drawn; outside (0, 1) no mark is drawn (an account's soft
	// state is still shown, from the admin API).
	Soft float64
	// Refresh is how often the page reads the gauges; default 2 s.
	Refresh time.Duration
	// Upstream serves the admin API (/flexway/v1/usage,
	// /flexway/v1/backends) and /metrics: the gateway's own HTTP handler,
	// called in-process by the console's proxy with the admin key as a
	// bearer token.
	Upstream http.Handler
}

//go:embed assets
var assets embed.FS

var (
	pageTmpl  = template.Must(template.ParseFS(assets, "assets/index.html"))
	loginTmpl = template.Must(template.ParseFS(assets, "assets/login.html"))
)

// static are the embedded files served as they are, by path.
var static = map[string]struct{ file, contentType string }{
	Path + "/console.js":  {"assets/console.js", "text/javascript; charset=utf-8"},
	Path + "/console.css": {"assets/console.css", "text/css; charset=utf-8"},
}

// proxied maps the console's API paths to the gateway's.
var proxied = map[string]string{
	Path + "/api/usage":    "/flexway/v1/usage",
	Path + "/api/backends": "/flexway/v1/backends",
	Path + "/api/metrics":  "/metrics",
}

// contentSecurityPolicy is set on every answer: the page loads only its
// own script and style sheet, runs no inline script, posts forms only to
// itself and cannot be framed.
const contentSecurityPolicy = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// maxLoginBody bounds the login form.
const maxLoginBody = 8 << 10

type handler struct {
	sum       *[sha256.Size]byte
	soft      float64
	refreshMS int64
	upstream  http.Handler
	// crossOrigin guards the forms that change state: see login.
	crossOrigin *http.CrossOriginProtection

	mu       sync.Mutex
	sessions map[string]consoleSession // by token
}

// consoleSession is a signed-in browser: the key it signed in with, until when.
type consoleSession struct {
	key     string
	expires time.Time
}

// Handler returns the console's handler, for Path and everything under
// it. It is safe for concurrent use.
//
//   - GET /console: the console when the request carries the admin key
//     (the cookie, or Authorization: Bearer), else the login form, which
//     shows no data.
//   - POST /console/login (form field "key"): sets the cookie and
//     redirects to /console; a wrong key gets 401.
//   - GET or POST /console/logout: clears the cookie, redirects to
//     /console.
//   - GET /console/console.js, /console/console.css: the page's assets
//     (the style sheet is public: the login form uses it).
//   - GET /console/api/usage, /console/api/backends, /console/api/metrics:
//     GET /flexway/v1/usage, GET /flexway/v1/backends and GET /metrics of
//     Upstream, with the key; 401 without it.
//
// Errors are RFC 9457 problem details.
func Handler(o Options) http.Handler {
	h := &handler{sum: o.AdminKeySum, soft: o.Soft, upstream: o.Upstream, crossOrigin: http.NewCrossOriginProtection(), sessions: map[string]consoleSession{}}
	if h.soft <= 0 || h.soft >= 1 {
		h.soft = 0
	}
	refresh := o.Refresh
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	h.refreshMS = refresh.Milliseconds()
	if h.refreshMS < 100 {
		h.refreshMS = 100
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	if h.sum == nil {
		transcoder.WriteProblem(w, r, http.StatusNotFound, "the console needs server.admin_key")
		return
	}
	p := r.URL.Path
	switch {
	case p == Path || p == Path+"/":
		if !allow(w, r, http.MethodGet) {
			return
		}
		h.page(w, r)
	case p == Path+"/login":
		if !allow(w, r, http.MethodPost) {
			return
		}
		h.login(w, r)
	case p == Path+"/logout":
		if !allow(w, r, http.MethodGet, http.MethodPost) {
			return
		}
		h.logout(w, r)
	case static[p].file != "":
		if !allow(w, r, http.MethodGet) {
			return
		}
		if strings.HasSuffix(p, ".js") {
			if _, ok := h.key(r); !ok {
				transcoder.WriteProblem(w, r, http.StatusUnauthorized, "sign in to the console with server.admin_key")
				return
			}
		}
		s := static[p]
		b, err := assets.ReadFile(s.file)
		if err != nil {
			transcoder.WriteProblem(w, r, http.StatusInternalServerError, "the console's assets are missing")
			return
		}
		hd.Set("Content-Type", s.contentType)
		_, _ = w.Write(b)
	case proxied[p] != "":
		if !allow(w, r, http.MethodGet) {
			return
		}
		h.proxy(w, r, proxied[p])
	default:
		transcoder.WriteProblem(w, r, http.StatusNotFound, "no route for "+r.Method+" "+p)
	}
}

// allow answers 405 with Allow when r's method is not one of methods (GET
// allows HEAD).
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m || (m == http.MethodGet && r.Method == http.MethodHead) {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	transcoder.WriteProblem(w, r, http.StatusMethodNotAllowed, "method "+r.Method+" is not allowed on "+r.URL.Path)
	return false
}

// key returns the admin key r carries, in its Authorization header or its
// cookie, when it is server.admin_key.
func (h *handler) key(r *http.Request) (string, bool) {
	if v, ok := bearer.Token(r.Header.Get("Authorization")); ok && h.matches(v) {
		return v, true
	}
	c, err := r.Cookie(CookieName)
	if err != nil {
		return "", false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.sessions[c.Value]
	if !ok || time.Now().After(s.expires) {
		delete(h.sessions, c.Value)
		return "", false
	}
	return s.key, true
}

// newSession starts a session for key and returns its token; expired
// sessions are dropped on the way.
func (h *handler) newSession(key string) string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	token := base64.RawURLEncoding.EncodeToString(b[:])
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for t, s := range h.sessions {
		if now.After(s.expires) {
			delete(h.sessions, t)
		}
	}
	h.sessions[token] = consoleSession{key: key, expires: now.Add(SessionTTL)}
	return token
}

// matches compares key's SHA-256 with server.admin_key's in constant time.
func (h *handler) matches(key string) bool {
	if key == "" {
		return false
	}
	sum := sha256.Sum256([]byte(key))
	return subtle.ConstantTimeCompare(sum[:], h.sum[:]) == 1
}

// page serves the console to a signed-in caller, the login form to
// anyone else.
func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Cookie, Authorization")
	if _, ok := h.key(r); !ok {
		h.loginForm(w, http.StatusOK, "")
		return
	}
	soft := ""
	if h.soft > 0 {
		soft = strconv.FormatFloat(h.soft, 'f', -1, 64)
	}
	var b bytes.Buffer
	if err := pageTmpl.Execute(&b, struct {
		Soft      string
		RefreshMS int64
	}{soft, h.refreshMS}); err != nil {
		transcoder.WriteProblem(w, r, http.StatusInternalServerError, "the console page failed to render")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

func (h *handler) loginForm(w http.ResponseWriter, status int, msg string) {
	var b bytes.Buffer
	_ = loginTmpl.Execute(&b, struct{ Error string }{msg})
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// login signs a browser in. Like logout, it is guarded against
// cross-site request forgery by the standard library's
// [http.CrossOriginProtection] (Go 1.25+): a browser's Sec-Fetch-Site must be same-origin or none, or, from a
// browser that does not send it, the Origin's host must be the request's
// Host; a request with neither header (curl, a script) passes. The
// console's pages send Referrer-Policy: no-referrer, so a browser posts
// their forms with "Origin: null", which only Sec-Fetch-Site can tell
// from a cross-site post.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if h.crossOrigin.Check(r) != nil {
		transcoder.WriteProblem(w, r, http.StatusForbidden, "the console's login form posts from the console only")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		transcoder.WriteProblem(w, r, http.StatusBadRequest, "the login form could not be read: send key as application/x-www-form-urlencoded, at most 8 KiB")
		return
	}
	key := r.PostForm.Get("key")
	if !h.matches(key) {
		if wantsHTML(r) {
			h.loginForm(w, http.StatusUnauthorized, "That is not server.admin_key.")
			return
		}
		transcoder.WriteProblem(w, r, http.StatusUnauthorized, "the key is not server.admin_key")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name:     CookieName,
		Value:    h.newSession(key),
		Path:     Path,
		MaxAge:   int(SessionTTL.Seconds()),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, Path, http.StatusSeeOther)
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if h.crossOrigin.Check(r) != nil {
		transcoder.WriteProblem(w, r, http.StatusForbidden, "the console's logout form posts from the console only")
		return
	}
	if c, err := r.Cookie(CookieName); err == nil {
		h.mu.Lock()
		delete(h.sessions, c.Value)
		h.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{
		Name:     CookieName,
		Value:    "",
		Path:     Path,
		MaxAge:   -1,
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, Path, http.StatusSeeOther)
}

// wantsHTML reports whether the caller is a browser (a form post), which
// gets the login form again rather than problem details.
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// proxy answers GET target of Upstream, called in-process with the
// caller's admin key as its bearer token and nothing else of the request:
// no cookie, no query, no other header.
func (h *handler) proxy(w http.ResponseWriter, r *http.Request, target string) {
	key, ok := h.key(r)
	if !ok {
		transcoder.WriteProblem(w, r, http.StatusUnauthorized, "sign in to the console with server.admin_key")
		return
	}
	if h.upstream == nil {
		transcoder.WriteProblem(w, r, http.StatusServiceUnavailable, "the console has no upstream to read the gauges from")
		return
	}
	req := r.Clone(r.Context())
	req.Method = http.MethodGet
	req.URL = &url.URL{Path: target}
	req.RequestURI = target
	req.Header = http.Header{
		"Authorization": {"Bearer " + key},
		"Accept":        {"application/json, text/plain;q=0.9"},
	}
	if id := r.Header.Get("X-Request-Id"); id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	req.Body = http.NoBody
	req.ContentLength = 0
	req.TransferEncoding = nil
	req.Trailer = nil
	req.Form, req.PostForm, req.MultipartForm = nil, nil, nil
	rec := &capture{header: http.Header{}}
	h.upstream.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if ct := rec.header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	if ra := rec.header.Get("Retry-After"); ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	w.WriteHeader(rec.status)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, &rec.body)
	}
}

// capture is the ResponseWriter the proxy hands Upstream.
type capture struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *capture) Header() http.Header { return c.header }

func (c *capture) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(p)
}

// Flush implements http.Flusher; the answer is sent whole.
func (c *capture) Flush() {}
