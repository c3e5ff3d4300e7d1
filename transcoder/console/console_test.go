package console

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

const testKey = "adm key; with \"odd\" bytes, é"

func sumOf(k string) *[sha256.Size]byte {
	s := sha256.Sum256([]byte(k))
	return &s
}

// upstreamRecorder answers the admin paths and records what it got.
type upstreamRecorder struct {
	got []*http.Request
}

func (u *upstreamRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.got = append(u.got, r)
	switch r.URL.Path {
	case "/flexway/v1/usage":
		if r.Header.Get("Authorization") != "Bearer "+testKey {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(401)
			io.WriteString(w, `{"status":401}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"accounts":[]}`)
	case "/metrics":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, "# HELP x\n")
	default:
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(503)
		io.WriteString(w, `{"status":503}`)
	}
}

func do(t *testing.T, h http.Handler, r *http.Request) *http.Response {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	resp := w.Result()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'self'") {
		t.Errorf("%s %s: Content-Security-Policy %q", r.Method, r.URL.Path, csp)
	}
	return resp
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// problem checks an RFC 9457 answer.
func problem(t *testing.T, resp *http.Response, status int, detail string) {
	t.Helper()
	raw := body(t, resp)
	var p struct {
		Type, Title, Detail, Instance string
		Status                        int
	}
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal([]byte(raw), &p) != nil {
		t.Fatalf("status %d, %s: %s; want %d problem details", resp.StatusCode, resp.Header.Get("Content-Type"), raw, status)
	}
	if p.Status != status || !strings.Contains(p.Detail, detail) {
		t.Fatalf("problem %+v, want status %d, detail with %q", p, status, detail)
	}
}

func login(t *testing.T, h http.Handler, key string, hdr map[string]string) *http.Response {
	t.Helper()
	r := httptest.NewRequest("POST", "http://gw.example/console/login", strings.NewReader(url.Values{"key": {key}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	return do(t, h, r)
}

// session signs in and returns the cookie.
func session(t *testing.T, h http.Handler) *http.Cookie {
	t.Helper()
	resp := login(t, h, testKey, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console" {
		t.Fatalf("login: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, c := range resp.Cookies() {
		if c.Name == CookieName {
			return c
		}
	}
	t.Fatal("login set no cookie")
	return nil
}

func TestNoAdminKey(t *testing.T) {
	h := Handler(Options{Upstream: &upstreamRecorder{}})
	for _, p := range []string{"/console", "/console/login", "/console/api/usage", "/console/console.css"} {
		problem(t, do(t, h, httptest.NewRequest("GET", p, nil)), 404, "the console needs server.admin_key")
	}
}

func TestLoginFormShowsNoData(t *testing.T) {
	up := &upstreamRecorder{}
	h := Handler(Options{AdminKeySum: sumOf(testKey), Soft: 0.5, Upstream: up})
	for _, hdr := range []map[string]string{nil, {"Authorization": "Bearer wrong"}, {"Cookie": CookieName + "=d3Jvbmc"}} {
		r := httptest.NewRequest("GET", "/console", nil)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		resp := do(t, h, r)
		b := body(t, resp)
		if resp.StatusCode != 200 || !strings.Contains(b, `action="/console/login"`) || strings.Contains(b, "data-soft") || strings.Contains(b, "console.js") {
			t.Fatalf("%v: %d\n%s", hdr, resp.StatusCode, b)
		}
	}
	if len(up.got) != 0 {
		t.Fatal("the login form read the upstream")
	}
	// Its style sheet is public; the script and the data are not.
	if resp := do(t, h, httptest.NewRequest("GET", "/console/console.css", nil)); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/css") {
		t.Fatalf("console.css: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	problem(t, do(t, h, httptest.NewRequest("GET", "/console/console.js", nil)), 401, "sign in")
	for _, p := range []string{"/console/api/usage", "/console/api/backends", "/console/api/metrics"} {
		problem(t, do(t, h, httptest.NewRequest("GET", p, nil)), 401, "sign in")
	}
	if len(up.got) != 0 {
		t.Fatal("an unauthenticated request reached the upstream")
	}
}

func TestLogin(t *testing.T) {
	h := Handler(Options{AdminKeySum: sumOf(testKey), Soft: 0.5, Refresh: 3 * time.Second, Upstream: &upstreamRecorder{}})

	// A wrong key: problem details for a script, the form again for a
	// browser; no cookie either way.
	resp := login(t, h, "wrong", nil)
	if len(resp.Cookies()) != 0 {
		t.Fatal("a wrong key got a cookie")
	}
	problem(t, resp, 401, "not server.admin_key")
	resp = login(t, h, "", map[string]string{"Accept": "text/html,application/xhtml+xml"})
	if b := body(t, resp); resp.StatusCode != 401 || !strings.Contains(b, "That is not server.admin_key.") || len(resp.Cookies()) != 0 {
		t.Fatalf("%d %v\n%s", resp.StatusCode, resp.Cookies(), b)
	}
	// A post from another site is refused before the key is looked at:
	// by its Sec-Fetch-Site, or by its Origin from a browser that sends
	// no Sec-Fetch-Site.
	problem(t, login(t, h, testKey, map[string]string{"Origin": "https://evil.example"}), 403, "from the console only")
	problem(t, login(t, h, testKey, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "null"}), 403, "from the console only")
	problem(t, login(t, h, testKey, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "https://other.example.com"}), 403, "from the console only")
	// The console's own form under Referrer-Policy: no-referrer: a
	// browser posts it with Origin: null and Sec-Fetch-Site: same-origin.
	if resp := login(t, h, testKey, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "null"}); resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("the console's own form posted with Origin: null: %d %v", resp.StatusCode, resp.Cookies())
	}
	r0 := httptest.NewRequest("POST", "/console/logout", nil)
	r0.Header.Set("Sec-Fetch-Site", "same-origin")
	r0.Header.Set("Origin", "null")
	if resp := do(t, h, r0); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the console's own sign-out form posted with Origin: null: %d", resp.StatusCode)
	}
	r0 = httptest.NewRequest("POST", "/console/logout", nil)
	r0.Header.Set("Sec-Fetch-Site", "cross-site")
	problem(t, do(t, h, r0), 403, "from the console only")

	c := session(t, h)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/console" || c.Secure || c.Value == "" || strings.Contains(c.Value, "adm") {
		t.Fatalf("cookie %+v", c)
	}
	// Over TLS it is Secure.
	r := httptest.NewRequest("POST", "https://gw.example/console/login", strings.NewReader("key="+url.QueryEscape(testKey)))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Origin", "https://gw.example")
	if cs := do(t, h, r).Cookies(); len(cs) != 1 || !cs[0].Secure {
		t.Fatalf("TLS cookies %+v", cs)
	}

	// The cookie, or the key as a bearer token, opens the console.
	for _, set := range []func(*http.Request){
		func(r *http.Request) { r.AddCookie(c) },
		func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testKey) },
	} {
		r := httptest.NewRequest("GET", "/console", nil)
		set(r)
		resp := do(t, h, r)
		b := body(t, resp)
		if resp.StatusCode != 200 || !strings.Contains(b, `data-soft="0.5"`) || !strings.Contains(b, `data-refresh-ms="3000"`) || !strings.Contains(b, `<script src="/console/console.js" defer></script>`) {
			t.Fatalf("%d\n%s", resp.StatusCode, b)
		}
		r = httptest.NewRequest("GET", "/console/console.js", nil)
		set(r)
		if resp := do(t, h, r); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
			t.Fatalf("console.js: %d", resp.StatusCode)
		}
	}

	// Logout clears the cookie.
	r = httptest.NewRequest("POST", "/console/logout", nil)
	r.AddCookie(c)
	resp = do(t, h, r)
	cs := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cs) != 1 || cs[0].Name != CookieName || cs[0].MaxAge >= 0 {
		t.Fatalf("logout: %d %+v", resp.StatusCode, cs)
	}
}

func TestProxy(t *testing.T) {
	up := &upstreamRecorder{}
	h := Handler(Options{AdminKeySum: sumOf(testKey), Upstream: up})
	c := session(t, h)

	r := httptest.NewRequest("GET", "/console/api/usage?tenant=x", nil)
	r.AddCookie(c)
	r.Header.Set("X-Other", "not forwarded")
	resp := do(t, h, r)
	if b := body(t, resp); resp.StatusCode != 200 || b != `{"accounts":[]}` || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, b)
	}
	if len(up.got) != 1 {
		t.Fatalf("%d upstream calls", len(up.got))
	}
	got := up.got[0]
	if got.Method != "GET" || got.URL.Path != "/flexway/v1/usage" || got.URL.RawQuery != "" || got.Header.Get("Cookie") != "" || got.Header.Get("X-Other") != "" {
		t.Fatalf("upstream got %s %s %v", got.Method, got.URL, got.Header)
	}

	r = httptest.NewRequest("GET", "/console/api/metrics", nil)
	r.AddCookie(c)
	if resp := do(t, h, r); resp.StatusCode != 200 || body(t, resp) != "# HELP x\n" || up.got[1].URL.Path != "/metrics" {
		t.Fatalf("metrics: %d", resp.StatusCode)
	}
	// The upstream's errors come through with their status.
	r = httptest.NewRequest("GET", "/console/api/backends", nil)
	r.AddCookie(c)
	if resp := do(t, h, r); resp.StatusCode != 503 || up.got[2].URL.Path != "/flexway/v1/backends" {
		t.Fatalf("backends: %d", resp.StatusCode)
	}

	// Methods and paths.
	r = httptest.NewRequest("POST", "/console/api/usage", nil)
	r.AddCookie(c)
	resp = do(t, h, r)
	if resp.Header.Get("Allow") != "GET" {
		t.Errorf("Allow %q", resp.Header.Get("Allow"))
	}
	problem(t, resp, 405, "not allowed")
	problem(t, do(t, h, httptest.NewRequest("GET", "/console/nope", nil)), 404, "no route")
	problem(t, do(t, h, httptest.NewRequest("GET", "/console/login", nil)), 405, "not allowed")

	// No upstream: 503.
	h = Handler(Options{AdminKeySum: sumOf(testKey)})
	r = httptest.NewRequest("GET", "/console/api/usage", nil)
	r.AddCookie(session(t, h))
	problem(t, do(t, h, r), 503, "no upstream")
}

// TestSessionIsNotTheKey: the cookie is a random token, not the key; a
// cookie made from the key opens nothing; logging out ends the session.
func TestSessionIsNotTheKey(t *testing.T) {
	h := Handler(Options{AdminKeySum: sumOf(testKey), Upstream: &upstreamRecorder{}})
	c := session(t, h)
	usage := func(c *http.Cookie) int {
		r := httptest.NewRequest("GET", "/console/api/usage", nil)
		r.AddCookie(c)
		return do(t, h, r).StatusCode
	}
	if got := usage(c); got == 401 {
		t.Fatal("a fresh session was refused")
	}
	for _, forged := range []string{testKey, base64.RawURLEncoding.EncodeToString([]byte(testKey))} {
		if got := usage(&http.Cookie{Name: CookieName, Value: forged}); got != 401 {
			t.Fatalf("a cookie made from the key got %d", got)
		}
	}
	r := httptest.NewRequest("POST", "/console/logout", nil)
	r.AddCookie(c)
	do(t, h, r)
	if got := usage(c); got != 401 {
		t.Fatalf("the session still works after logout: %d", got)
	}
}

// TestAssetsAreSelfContained: no inline script, no inline style, no
// reference to anything outside the console.
func TestAssetsAreSelfContained(t *testing.T) {
	files, err := fs.Glob(assets, "assets/*")
	if err != nil || len(files) != 4 {
		t.Fatalf("assets %v: %v", files, err)
	}
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|@font-face|url\(`)
	for _, f := range files {
		b, _ := assets.ReadFile(f)
		s := string(b)
		if m := external.FindString(s); m != "" {
			t.Errorf("%s refers outside the console: %q", f, m)
		}
		if strings.HasSuffix(f, ".html") {
			for _, bad := range []*regexp.Regexp{
				regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]`), // inline script
				regexp.MustCompile(`<script(?:(?:\s[^>]*)?)>`), // a script without src
				regexp.MustCompile(`(?i)\son[a-z]+\s*=`),       // event handler attributes
				regexp.MustCompile(`(?i)\sstyle\s*=|<style`),   // inline style
				regexp.MustCompile(`(?i)javascript:`),
			} {
				for _, m := range bad.FindAllString(s, -1) {
					if !strings.Contains(m, "src=") {
						t.Errorf("%s: %q", f, m)
					}
				}
			}
		}
	}
}
