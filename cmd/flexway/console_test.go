package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
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
	cfg := budgetConfig(t, mainURL, cheapURL, "    soft: 0.5\n    default: {tokens_per_day: 1000, eur_per_month: 5}")
	for _, e := range []struct{ old, new string }{
		{"      fallback: [cheap]\n", ""},
		{"      idle_timeout: 2s\n", "      idle_timeout: 2s\n      circuit_breaker: {failures: 3, open_for: 10m}\n"},
		{"\n  backends:\n", "\n  tenants:\n    globex: {backend: cheap}\n  backends:\n"},
		{"      agent: bot\n", "      agent: bot\n    - name: globex-app\n      key: env:FLEXWAY_TEST_KEY_GLOBEX\n      tenant: globex\n      agent: app\n"},
	} {
		if !strings.Contains(cfg, e.old) {
			t.Fatalf("budgetConfig no longer has %q: update consoleConfig", e.old)
		}
		cfg = strings.Replace(cfg, e.old, e.new, 1)
	}
	return cfg
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

// TestConsoleInChromium: after known calls (acme served twice by main,
// then main failing three times, which opens its circuit; globex served
// four times by cheap, past the soft mark), the console in headless
// Chromium shows every cap of every account and every backend as the
// admin API and /metrics say, with the soft mark at ai.budget.soft of
// each limit; a new call shows up without a reload. With
// FLEXWAY_CONSOLE_SCREENSHOT=path it saves a 1000×700 screenshot there.
func TestConsoleInChromium(t *testing.T) {
	bin := chromiumPath(t)
	var failing atomic.Bool
	main := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			jsonHandler(500, `{"error":{"message":"boom"}}`)(w, r)
			return
		}
		usageUpstream(100, 50)(w, r)
	})
	cheap := newUpstream(t, usageUpstream(100, 50))
	g := startGateway(t, consoleConfig(t, main.URL, cheap.URL))

	call := func(key string, want int) {
		t.Helper()
		resp := send(t, g, "POST", "/v1/chat/completions", strings.NewReader(chatBody), map[string]string{"Authorization": "Bearer " + key})
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("call: status %d, want %d: %s", resp.StatusCode, want, b)
		}
	}
	for range 2 {
		call(demoKey, 200)
	}
	failing.Store(true)
	for range 3 {
		call(demoKey, 502)
	}
	for range 4 {
		call(consoleGlobexKey, 200)
	}

	// What the gateway says, and what this test made it do.
	want := readGauges(t, g)
	for _, c := range []struct {
		tenant, agent, cap string
		committed          int64
		soft               bool
	}{
		{"acme", "", "tokens_per_day", 300, false},
		{"acme", "", "eur_per_month", 2 * 200_000, false}, // 100 × 1 € + 50 × 2 € per million tokens
		{"globex", "", "tokens_per_day", 600, true},
		{"globex", "", "eur_per_month", 4 * 20_000, false}, // 100 × 0.10 € + 50 × 0.20 €
	} {
		got, ok := want.caps[c.tenant+"/"+c.agent+"/"+c.cap]
		if !ok || got.Committed != c.committed || got.Soft != c.soft || got.Reserved != 0 {
			t.Fatalf("admin API %s/%s %s: %+v (found %v), want committed %d, soft %v", c.tenant, c.agent, c.cap, got, ok, c.committed, c.soft)
		}
	}
	if b := want.backends["main"]; b != (backendGauge{Circuit: "open", Calls: 5, NanoEUR: 400_000, Errors: 3}) {
		t.Fatalf("main per the admin API and /metrics: %+v", b)
	}
	if b := want.backends["cheap"]; b != (backendGauge{Circuit: "closed", Calls: 4, NanoEUR: 80_000, Errors: 0}) {
		t.Fatalf("cheap per the admin API and /metrics: %+v", b)
	}

	// The page, signed in through its login form as a person would: the
	// key typed into the field, the form submitted (the page's
	// Referrer-Policy: no-referrer makes Chromium post it with Origin: null).
	br := startChromium(t, bin)
	br.call(t, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1000, "height": 700, "deviceScaleFactor": 1, "mobile": false}, nil)
	br.call(t, "Page.navigate", map[string]any{"url": g.HTTP + "/console"}, nil)
	br.signIn(t, testAdminKey)
	page := br.waitPage(t, func(p renderedPage) bool { return p.Updates >= 1 })
	if p := br.eval(t, `location.pathname`); p != `"/console"` {
		t.Fatalf("the browser is at %s, not the console", p)
	}
	checkPage(t, page, want, 0.5)
	if page.State != "live" || page.Updated == "" {
		t.Errorf("state %q, last updated %q; want live with a time", page.State, page.Updated)
	}

	if path := os.Getenv("FLEXWAY_CONSOLE_SCREENSHOT"); path != "" {
		var shot struct{ Data string }
		br.call(t, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot)
		png, err := base64.StdEncoding.DecodeString(shot.Data)
		if err != nil || len(png) == 0 {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot (%d bytes) saved to %s", len(png), path)
	}

	// A new call shows up without a reload: the marker set now survives.
	br.eval(t, `window.flexwayNoReload = true`)
	before := page.Updates
	call(consoleGlobexKey, 200)
	want = readGauges(t, g)
	if got := want.caps["globex//tokens_per_day"].Committed; got != 750 {
		t.Fatalf("globex tokens_per_day committed %d after the fifth call, want 750", got)
	}
	page = br.waitPage(t, func(p renderedPage) bool {
		for _, b := range p.Backends {
			if b.Name == "cheap" && b.Calls == "5" {
				return true
			}
		}
		return false
	})
	if page.Updates <= before || !page.NoReload {
		t.Fatalf("updates %d (before %d), marker kept %v: the page reloaded instead of refreshing", page.Updates, before, page.NoReload)
	}
	checkPage(t, page, want, 0.5)

	// Sign out with the page's button: back to the login form, the
	// cookie gone, and the console no longer shown on a reload.
	br.eval(t, `document.querySelector('form[action="/console/logout"] button').click()`)
	br.waitLoginForm(t, "after signing out")
	var jar struct{ Cookies []struct{ Name string } }
	br.call(t, "Network.getCookies", map[string]any{"urls": []string{g.HTTP + "/console"}}, &jar)
	for _, c := range jar.Cookies {
		if c.Name == "flexway_console" {
			t.Fatal("the console's cookie outlived signing out")
		}
	}
	br.call(t, "Page.navigate", map[string]any{"url": g.HTTP + "/console"}, nil)
	br.waitLoginForm(t, "reloading after signing out")

	// A wrong key typed in gets the form again with its message, no console.
	br.signIn(t, "not-the-key")
	br.waitFor(t, "the wrong key's message", `document.querySelector('#login .error') ? document.querySelector('#login .error').textContent : ""`,
		`"That is not server.admin_key."`)
}

// signIn types key into the login form's field (it must be on the
// page, or about to be) and submits it with its button.
func (b *browser) signIn(t *testing.T, key string) {
	t.Helper()
	b.waitLoginForm(t, "before signing in")
	b.eval(t, `(() => { const k = document.getElementById('key'); k.value = ''; k.focus(); })()`)
	b.call(t, "Input.insertText", map[string]any{"text": key}, nil)
	if got := b.eval(t, `document.getElementById('key').value.length`); got != strconv.Itoa(len(key)) {
		t.Fatalf("typed %d characters into the key field, it holds %s", len(key), got)
	}
	b.eval(t, `document.querySelector('#login button[type=submit]').click()`)
}

// waitLoginForm waits until the page shows the login form and no console.
func (b *browser) waitLoginForm(t *testing.T, when string) {
	t.Helper()
	b.waitFor(t, "the login form "+when, `!!document.getElementById('login') && !document.getElementById('state')`, `true`)
}

// waitFor evaluates expr until its JSON value is want, for at most 15 s;
// evaluations that fail while the page navigates are retried.
func (b *browser) waitFor(t *testing.T, what, expr, want string) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if last = b.tryEval(t, expr); last == want {
			return
		}
	}
	html := b.tryEval(t, `document.documentElement ? document.documentElement.outerHTML : ""`)
	t.Fatalf("%s: %s is %s, want %s, within 15 s; DOM:\n%s", what, expr, last, want, html)
}

// tryEval is eval that returns "" instead of failing when the page has no
// context to evaluate in (it is navigating) or the expression throws.
func (b *browser) tryEval(t *testing.T, expr string) string {
	t.Helper()
	raw, err := b.send(t, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true})
	if err != nil {
		return ""
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails json.RawMessage `json:"exceptionDetails"`
	}
	if json.Unmarshal(raw, &r) != nil || r.ExceptionDetails != nil {
		return ""
	}
	return string(r.Result.Value)
}

// chromiumPath finds Debian's chromium; the test is skipped without it
// unless FLEXWAY_REQUIRE_CHROMIUM=1.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("FLEXWAY_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("chromium is not installed and FLEXWAY_REQUIRE_CHROMIUM=1: apt-get install chromium")
	}
	t.Skip("chromium is not installed (apt-get install chromium): the console's browser test is skipped; FLEXWAY_REQUIRE_CHROMIUM=1 makes this a failure")
	return ""
}

// ---- what the gateway says ----

type capGauge struct {
	Limit, Committed, Reserved int64
	Soft                       bool
	Unit                       string
}

type backendGauge struct {
	Circuit                string
	Calls, NanoEUR, Errors int64
}

type gauges struct {
	caps     map[string]capGauge // by tenant/agent/cap
	backends map[string]backendGauge
}

// readGauges reads GET /flexway/v1/usage, /flexway/v1/backends and
// /metrics: per backend, the calls, the euros (each series rounded to the
// nano-euro, as the page does) and the errors (outcome upstream_error or
// error) of the per-call series.
func readGauges(t *testing.T, g *testGW) gauges {
	t.Helper()
	admin := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testAdminKey) }
	out := gauges{caps: map[string]capGauge{}, backends: map[string]backendGauge{}}

	resp, raw := getWith(t, g, "/flexway/v1/usage", admin)
	var usage struct {
		Accounts []struct {
			Tenant, Agent string
			Caps          []struct {
				Cap, Unit                  string
				Limit, Committed, Reserved string
				Soft                       bool
			}
		}
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(raw), &usage) != nil {
		t.Fatalf("/flexway/v1/usage: %d %s", resp.StatusCode, raw)
	}
	n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
	for _, a := range usage.Accounts {
		for _, c := range a.Caps {
			out.caps[a.Tenant+"/"+a.Agent+"/"+c.Cap] = capGauge{Limit: n(c.Limit), Committed: n(c.Committed), Reserved: n(c.Reserved), Soft: c.Soft, Unit: c.Unit}
		}
	}

	resp, raw = getWith(t, g, "/flexway/v1/backends", admin)
	var bs struct {
		Backends []struct{ Name, Circuit string }
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(raw), &bs) != nil {
		t.Fatalf("/flexway/v1/backends: %d %s", resp.StatusCode, raw)
	}
	for _, b := range bs.Backends {
		out.backends[b.Name] = backendGauge{Circuit: b.Circuit}
	}

	resp, raw = getWith(t, g, "/metrics", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	series := regexp.MustCompile(`(?m)^(flexway_inference_calls_total|flexway_inference_cost_EUR_total)\{([^}]*)\} (\S+)`)
	label := func(labels, name string) string {
		m := regexp.MustCompile(`(?:^|,)` + name + `="([^"]*)"`).FindStringSubmatch(labels)
		if m == nil {
			return ""
		}
		return m[1]
	}
	for _, m := range series.FindAllStringSubmatch(raw, -1) {
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", m[0], err)
		}
		name := label(m[2], "backend")
		b, ok := out.backends[name]
		if !ok {
			t.Fatalf("/metrics names backend %q, which the admin API does not list", name)
		}
		if m[1] == "flexway_inference_calls_total" {
			b.Calls += int64(math.Round(v))
			if o := label(m[2], "outcome"); o == "upstream_error" || o == "error" {
				b.Errors += int64(math.Round(v))
			}
		} else {
			b.NanoEUR += int64(math.Round(v * 1e9))
		}
		out.backends[name] = b
	}
	return out
}

// ---- what the page shows ----

type renderedCap struct {
	Tenant, Agent, Cap, Unit   string
	Limit, Committed, Reserved string
	Soft                       bool
	Text                       struct{ Committed, Reserved, Limit string }
	// Positions on the gauge, as fractions of its width: the centre of
	// each mark, the width of the used segment. The soft mark is null
	// when none is drawn.
	SoftMark, LimitMark *float64
	UsedWidth           float64
	GaugeWidth          float64
}

type renderedBackend struct {
	Name, Circuit, Calls, NanoEUR, Errors string
	Text                                  struct{ Circuit, Calls, Euros, Errors string }
	Color                                 string
}

type renderedPage struct {
	State, Updated string
	Updates        int
	NoReload       bool
	Caps           []renderedCap
	Backends       []renderedBackend
}

// readPageJS collects the rendered gauges.
const readPageJS = `JSON.stringify((() => {
  const st = document.getElementById('state');
  const up = document.getElementById('updated');
  return {
    State: st ? st.dataset.state : '',
    Updated: up ? up.dateTime : '',
    Updates: Number(document.body.dataset.updates || 0),
    NoReload: window.flexwayNoReload === true,
    Caps: [...document.querySelectorAll('.account .cap')].map(c => {
      const a = c.closest('.account');
      const g = c.querySelector('.gauge').getBoundingClientRect();
      const centre = sel => { const m = c.querySelector(sel); if (!m) return null; const r = m.getBoundingClientRect(); return (r.left + r.width / 2 - g.left) / g.width; };
      const text = sel => c.querySelector(sel).textContent;
      return {
        Tenant: a.dataset.tenant, Agent: a.dataset.agent, Cap: c.dataset.cap, Unit: c.dataset.unit,
        Limit: c.dataset.limit, Committed: c.dataset.committed, Reserved: c.dataset.reserved, Soft: c.dataset.soft === 'true',
        Text: {Committed: text('.v-committed'), Reserved: text('.v-reserved'), Limit: text('.v-limit')},
        SoftMark: centre('.mark.soft'), LimitMark: centre('.mark.limit'),
        UsedWidth: c.querySelector('.seg.used').getBoundingClientRect().width / g.width, GaugeWidth: g.width,
      };
    }),
    Backends: [...document.querySelectorAll('tr.backend')].map(r => ({
      Name: r.dataset.backend, Circuit: r.dataset.circuit, Calls: r.dataset.calls, NanoEUR: r.dataset.nanoEur, Errors: r.dataset.errors,
      Text: {Circuit: r.querySelector('.circuit').textContent, Calls: r.querySelector('.v-calls').textContent,
             Euros: r.querySelector('.v-euros').textContent, Errors: r.querySelector('.v-errors').textContent},
      Color: getComputedStyle(r.querySelector('.circuit')).color,
    })),
  };
})())`

// checkPage compares the rendered page with the gateway's gauges.
func checkPage(t *testing.T, p renderedPage, want gauges, soft float64) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range p.Caps {
		key := c.Tenant + "/" + c.Agent + "/" + c.Cap
		seen[key] = true
		w, ok := want.caps[key]
		if !ok {
			t.Errorf("the page shows %s, which the admin API does not list", key)
			continue
		}
		fmtN := groupDigits
		if w.Unit == "nano_eur" {
			fmtN = formatNanoEUR
		}
		s := strconv.FormatInt
		if c.Unit != w.Unit || c.Limit != s(w.Limit, 10) || c.Committed != s(w.Committed, 10) || c.Reserved != s(w.Reserved, 10) || c.Soft != w.Soft {
			t.Errorf("%s: the page shows %+v, the admin API %+v", key, c, w)
		}
		if c.Text.Committed != fmtN(w.Committed) || c.Text.Reserved != fmtN(w.Reserved) || c.Text.Limit != fmtN(w.Limit) {
			t.Errorf("%s: the page reads %q used, %q reserved, %q limit; want %q, %q, %q", key,
				c.Text.Committed, c.Text.Reserved, c.Text.Limit, fmtN(w.Committed), fmtN(w.Reserved), fmtN(w.Limit))
		}
		// The gauge spans the limit (or what is used and reserved, when
		// more).
		scale := float64(max(w.Limit, w.Committed+w.Reserved))
		tol := 2 / c.GaugeWidth
		near := func(got *float64, want float64) bool { return got != nil && math.Abs(*got-want) <= tol }
		if !near(c.SoftMark, soft*float64(w.Limit)/scale) {
			t.Errorf("%s: soft mark at %v of the gauge, want %v", key, deref(c.SoftMark), soft*float64(w.Limit)/scale)
		}
		if !near(c.LimitMark, float64(w.Limit)/scale) {
			t.Errorf("%s: limit mark at %v of the gauge, want %v", key, deref(c.LimitMark), float64(w.Limit)/scale)
		}
		if used := float64(w.Committed) / scale; !near(&c.UsedWidth, used) {
			t.Errorf("%s: used segment %v of the gauge, want %v", key, c.UsedWidth, used)
		}
	}
	for key := range want.caps {
		if !seen[key] {
			t.Errorf("the page lacks %s", key)
		}
	}
	if len(p.Backends) != len(want.backends) {
		t.Errorf("the page shows %d backends, the admin API lists %d", len(p.Backends), len(want.backends))
	}
	colors := map[string]string{"closed": "rgb(30, 142, 62)", "half_open": "rgb(138, 87, 0)", "open": "rgb(198, 40, 40)"}
	labels := map[string]string{"closed": "closed", "half_open": "half open", "open": "open"}
	for _, b := range p.Backends {
		w, ok := want.backends[b.Name]
		if !ok {
			t.Errorf("the page shows backend %q, which the admin API does not list", b.Name)
			continue
		}
		s := func(v int64) string { return strconv.FormatInt(v, 10) }
		if b.Circuit != w.Circuit || b.Calls != s(w.Calls) || b.NanoEUR != s(w.NanoEUR) || b.Errors != s(w.Errors) {
			t.Errorf("backend %s: the page shows %+v, the admin API and /metrics %+v", b.Name, b, w)
		}
		if b.Text.Circuit != labels[w.Circuit] || b.Text.Calls != groupDigits(w.Calls) || b.Text.Euros != formatNanoEUR(w.NanoEUR) || b.Text.Errors != groupDigits(w.Errors) {
			t.Errorf("backend %s: the page reads %+v", b.Name, b.Text)
		}
		if b.Color != colors[w.Circuit] {
			t.Errorf("backend %s: circuit %s drawn in %s, want %s", b.Name, w.Circuit, b.Color, colors[w.Circuit])
		}
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

// groupDigits writes n as the page does: groups of three digits
// separated by a narrow no-break space.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// formatNanoEUR writes nano-euros as euros, as the page does: every
// decimal needed, at least two.
func formatNanoEUR(nano int64) string {
	neg := nano < 0
	if neg {
		nano = -nano
	}
	frac := strings.TrimRight(fmt.Sprintf("%09d", nano%1_000_000_000), "0")
	for len(frac) < 2 {
		frac += "0"
	}
	s := groupDigits(nano/1_000_000_000) + "." + frac
	if neg {
		return "-" + s
	}
	return s
}

// ---- a minimal DevTools protocol client ----

// browser is a headless Chromium with one page, driven over the DevTools
// protocol on a WebSocket.
type browser struct {
	conn *websocket.Conn
	mu   sync.Mutex
	id   int64
}

// startChromium runs chromium headless with remote debugging on a free
// loopback port and connects to its page; it is stopped when the test
// ends.
func startChromium(t *testing.T, bin string) *browser {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--no-first-run", "--disable-sync", "--disable-extensions",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--window-size=1000,700",
		"--user-data-dir="+dir, "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"about:blank")
	// Stopped with SIGTERM, so that it takes its helper processes down,
	// then killed if it lingers.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	stderr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	var log syncBuffer
	wsURL := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(&log, line)
			if u, ok := strings.CutPrefix(line, "DevTools listening on "); ok {
				select {
				case wsURL <- strings.TrimSpace(u):
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr) // a line too long for the scanner
	}()
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		pw.Close()
	})
	var browserURL string
	select {
	case browserURL = <-wsURL:
	case <-time.After(30 * time.Second):
		t.Fatalf("chromium did not open its DevTools port within 30 s:\n%s", log.String())
	}
	u, err := url.Parse(browserURL)
	if err != nil {
		t.Fatal(err)
	}

	// The page target's own WebSocket.
	var pageURL string
	for deadline := time.Now().Add(10 * time.Second); pageURL == "" && time.Now().Before(deadline); {
		resp, err := http.Get("http://" + u.Host + "/json/list")
		if err == nil {
			var targets []struct{ Type, WebSocketDebuggerURL string }
			_ = json.NewDecoder(resp.Body).Decode(&targets)
			resp.Body.Close()
			for _, tg := range targets {
				if tg.Type == "page" && tg.WebSocketDebuggerURL != "" {
					pageURL = tg.WebSocketDebuggerURL
					break
				}
			}
		}
		if pageURL == "" {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if pageURL == "" {
		t.Fatalf("chromium lists no page target:\n%s", log.String())
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	conn, _, err := websocket.Dial(dctx, pageURL, nil)
	if err != nil {
		t.Fatalf("DevTools WebSocket %s: %v", pageURL, err)
	}
	conn.SetReadLimit(64 << 20) // screenshots
	t.Cleanup(func() { conn.CloseNow() })
	return &browser{conn: conn}
}

// call sends one DevTools command and decodes its result into out (nil
// discards it); events received meanwhile are dropped.
func (b *browser) call(t *testing.T, method string, params any, out any) {
	t.Helper()
	result, err := b.send(t, method, params)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(result, out); err != nil {
			t.Fatalf("%s: %v\n%s", method, err, result)
		}
	}
}

// send sends one DevTools command and returns its result, or the error
// DevTools answered; a broken connection fails the test.
func (b *browser) send(t *testing.T, method string, params any) (json.RawMessage, error) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.id++
	id := b.id
	msg, err := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.conn.Write(ctx, websocket.MessageText, msg); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	for {
		_, data, err := b.conn.Read(ctx)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		var reply struct {
			ID     int64           `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &reply); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if reply.ID != id {
			continue // an event, or an older reply
		}
		if reply.Error != nil {
			return nil, fmt.Errorf("%s: DevTools error %d: %s", method, reply.Error.Code, reply.Error.Message)
		}
		return reply.Result, nil
	}
}

// eval evaluates expr in the page and returns its value as JSON.
func (b *browser) eval(t *testing.T, expr string) string {
	t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.call(t, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r)
	if r.ExceptionDetails != nil {
		t.Fatalf("evaluate: %s %s", r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	return string(r.Result.Value)
}

// waitPage reads the rendered page until ok accepts it, for at most 15 s.
func (b *browser) waitPage(t *testing.T, ok func(renderedPage) bool) renderedPage {
	t.Helper()
	var p renderedPage
	var last string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var s string
		raw := b.eval(t, `document.body && document.getElementById('state') ? `+readPageJS+` : ""`)
		if err := json.Unmarshal([]byte(raw), &s); err != nil || s == "" {
			continue
		}
		last = s
		p = renderedPage{}
		if err := json.Unmarshal([]byte(s), &p); err != nil {
			t.Fatalf("rendered page: %v\n%s", err, s)
		}
		if ok(p) {
			return p
		}
	}
	html := b.eval(t, `document.documentElement ? document.documentElement.outerHTML : ""`)
	t.Fatal(errors.New("the page did not get there within 15 s"), "\nlast read:", last, "\nDOM:", html)
	return p
}
