package main

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The console's tests: its authentication through the real gateway, and
// the page itself in headless Chromium (Debian's chromium), driven over
// the DevTools protocol, its rendered gauges checked against the admin
// API and /metrics.

// consoleGlobexKey is the API key of tenant "globex", agent "app" in
// consoleConfig.
const consoleGlobexKey = "sk-test-globex"

// consoleConfig is budgetConfig with soft at half of every cap, main
// failing over to nothing (no fallback) and opening its circuit after 3
// failures for 10 minutes, and a second tenant, globex (agent app), routed
// to cheap.
func consoleConfig(t *testing.T, mainURL, cheapURL string) string {
	t.Helper()
	t.Setenv("FLEXWAY_TEST_KEY_GLOBEX", consoleGlobexKey)
	c := budgetTestConfig(t, mainURL, cheapURL, "    soft: 0.5\n    default: {tokens_per_day: 1000, eur_per_month: 5}")
	c.Backends[0].Fallback = ""
	c.Backends[0].CircuitBreaker = "{failures: 3, open_for: 10m}"
	c.Tenants = []testTenant{{Name: "globex", Backend: "cheap"}}
	c.Keys = append(c.Keys, testKey{Name: "globex-app", Env: "FLEXWAY_TEST_KEY_GLOBEX", Tenant: "globex", Agent: "app"})
	return c.yaml()
}

// noRedirect is a client that returns redirects as they are.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// consoleLogin posts the login form and returns the answer.
func consoleLogin(t testing.TB, g *testGW, key string) *http.Response {
	t.Helper()
	resp, err := noRedirect.PostForm(g.HTTP+"/console/login", url.Values{"key": {key}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// consoleCookie signs in with the admin key and returns the console's
// cookie.
func consoleCookie(t testing.TB, g *testGW) *http.Cookie {
	t.Helper()
	resp := consoleLogin(t, g, testAdminKey)
	if resp.StatusCode != http.StatusSeeOther {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /console/login: %d %s (is the console mounted?)", resp.StatusCode, b)
	}
	for _, c := range resp.Cookies() {
		if c.Name == "flexway_console" {
			return c
		}
	}
	t.Fatal("POST /console/login set no flexway_console cookie")
	return nil
}

func getWith(t testing.TB, g *testGW, path string, set func(*http.Request)) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", g.HTTP+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(req)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestConsoleAuth: the console is behind server.admin_key: without it the
// page is a login form with no data and its API answers 401; with the
// cookie the API answers what the admin API does; the admin API itself
// still takes only the bearer token. Without server.admin_key the console
// answers 404.
func TestConsoleAuth(t *testing.T) {
	up := newUpstream(t, usageUpstream(100, 50))
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 1000}"))
	post(t, g, "/v1/chat/completions", chatBody)

	resp, page := getWith(t, g, "/console", nil)
	if resp.StatusCode != 200 || !strings.Contains(page, `action="/console/login"`) || strings.Contains(page, "acme") || strings.Contains(page, "console.js") {
		t.Fatalf("GET /console without the key: %d\n%s", resp.StatusCode, page)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'self'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	for _, p := range []string{"/console/api/usage", "/console/api/backends", "/console/api/metrics", "/console/console.js"} {
		resp, b := getWith(t, g, p, nil)
		if resp.StatusCode != 401 || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s without the key: %d %s", p, resp.StatusCode, b)
		}
	}
	if resp := consoleLogin(t, g, "not-the-key"); resp.StatusCode != 401 || len(resp.Cookies()) != 0 {
		t.Fatalf("a wrong key: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}

	c := consoleCookie(t, g)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/console" || c.Secure || strings.Contains(c.Value, testAdminKey) {
		t.Errorf("cookie %+v, want a session token, HttpOnly, SameSite=Strict, Path=/console, not Secure over plain HTTP", c)
	}
	withCookie := func(r *http.Request) { r.AddCookie(c) }
	resp, page = getWith(t, g, "/console", withCookie)
	if resp.StatusCode != 200 || !strings.Contains(page, `<script src="/console/console.js"`) {
		t.Fatalf("GET /console signed in: %d\n%s", resp.StatusCode, page)
	}
	_, viaConsole := getWith(t, g, "/console/api/usage", withCookie)
	_, direct := getWith(t, g, "/flexway/v1/usage", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testAdminKey) })
	if viaConsole != direct || !strings.Contains(direct, `"tenant":"acme"`) {
		t.Fatalf("/console/api/usage %s\n/flexway/v1/usage %s", viaConsole, direct)
	}
	if resp, b := getWith(t, g, "/flexway/v1/usage", withCookie); resp.StatusCode != 401 {
		t.Fatalf("the admin API took the console's cookie: %d %s", resp.StatusCode, b)
	}
	resp, _ = getWith(t, g, "/console/logout", withCookie)
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("logout: %d %v", resp.StatusCode, resp.Cookies())
	}
	if resp, _ := getWith(t, g, "/console/api/usage", withCookie); resp.StatusCode != 401 {
		t.Fatalf("the session outlived its logout: %d", resp.StatusCode)
	}

	// No server.admin_key: no console.
	g2 := startGateway(t, baseConfig(t, up.URL, ""))
	resp, b := getWith(t, g2, "/console", nil)
	if resp.StatusCode != 404 || !strings.Contains(b, "the console needs server.admin_key") {
		t.Fatalf("without server.admin_key: %d %s", resp.StatusCode, b)
	}
}
