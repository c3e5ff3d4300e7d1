package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

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

// waitPage reads the rendered page until ok accepts it, for at most 15 s;
// a read that fails while the page navigates (the sign-in form's submit
// loads the console: "Inspected target navigated or closed") is retried.
func (b *browser) waitPage(t *testing.T, ok func(renderedPage) bool) renderedPage {
	t.Helper()
	var p renderedPage
	var last string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var s string
		raw := b.tryEval(t, `document.body && document.getElementById('state') ? `+readPageJS+` : ""`)
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
