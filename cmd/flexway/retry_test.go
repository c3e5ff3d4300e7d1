package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// budgetTimezone is an ai.budget.timezone whose midnight is more than ten
// minutes away, so that a day cap's Retry-After is over a minute whatever
// the time the test runs at.
func budgetTimezone(t testing.TB) string {
	t.Helper()
	for _, zone := range []string{"UTC", "Asia/Kolkata"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().In(loc)
		midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, loc)
		if midnight.Sub(now) > 10*time.Minute {
			return zone
		}
	}
	t.Fatal("no zone far from midnight")
	return ""
}

// countingProxy is a reverse proxy to the gateway's HTTP listener that
// counts the chat calls it passes: how many attempts an SDK made.
func countingProxy(t testing.TB, g *testGW) (string, *atomic.Int64) {
	t.Helper()
	target, err := url.Parse(g.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			n.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

// refusalGateway starts a gateway whose tenant has a tokens_per_day cap of
// 200 tokens. A call asking for more never fits (429 without
// Retry-After); after [exhaust], every call is refused at the cap with a
// Retry-After of hours.
func refusalGateway(t *testing.T) *testGW {
	t.Helper()
	up := newUpstream(t, usageUpstream(100, 200))
	return startGateway(t, budgetConfig(t, up.URL, up.URL,
		fmt.Sprintf("    timezone: %s\n    default: {tokens_per_day: 200}", budgetTimezone(t))))
}

// exhaust uses the cap up: one call commits 300 tokens.
func exhaust(t *testing.T, g *testGW) {
	t.Helper()
	resp := post(t, g, "/v1/chat/completions", `{"model":"m","max_tokens":20,"messages":[{"role":"user","content":"Hi"}]}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the call using the cap up: %d", resp.StatusCode)
	}
}

// TestBudgetRefusalTellsSDKsNotToRetry: every budget 429 of today's caps
// (at a day cap; a call that never fits) carries x-should-retry: false, and
// the official Go SDK, with its default two retries, returns the 429 at
// once after one attempt.
func TestBudgetRefusalTellsSDKsNotToRetry(t *testing.T) {
	g := refusalGateway(t)
	base, attempts := countingProxy(t, g)
	client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey(demoKey))
	for _, tc := range []struct {
		name      string
		maxTokens int64
		retry     bool // a Retry-After is expected
	}{
		{"never fits", 5000, false},
		{"at the day cap", 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.retry {
				exhaust(t, g)
			}
			attempts.Store(0)
			start := time.Now()
			_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model:     "m",
				MaxTokens: openai.Int(tc.maxTokens),
				Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")},
			})
			took := time.Since(start)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "budget_exceeded" {
				t.Fatalf("SDK error %v, want a 429 budget_exceeded", err)
			}
			h := apiErr.Response.Header
			if got := h.Get("X-Should-Retry"); got != "false" {
				t.Errorf("x-should-retry %q, want false", got)
			}
			if got := h.Get("Retry-After") != ""; got != tc.retry {
				t.Errorf("Retry-After %q, want one: %v", h.Get("Retry-After"), tc.retry)
			}
			if n := attempts.Load(); n != 1 || took > 900*time.Millisecond {
				t.Errorf("the SDK made %d attempts in %s, want 1 at once", n, took)
			}
		})
	}
}

// nodeSDK returns the directory of a node_modules holding the `openai`
// package (6.x), or skips: FLEXWAY_TEST_NODE_MODULES names one already
// installed; else the package is installed into a temporary directory if
// node and npm are here and the registry answers within a minute.
func nodeSDK(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
	if dir := os.Getenv("FLEXWAY_TEST_NODE_MODULES"); dir != "" {
		return dir
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not installed")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", dir, "openai@6")
	cmd.Env = append(os.Environ(), "npm_config_fetch_retries=0", "npm_config_fetch_timeout=20000", "npm_config_update_notifier=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("npm install openai@6 failed (offline?): %v\n%s", err, out)
	}
	return filepath.Join(dir, "node_modules")
}

// nodeScript calls the chat API once with the Node SDK's defaults (two
// retries) and prints the error's status and code and the milliseconds
// the call took.
const nodeScript = `
const { OpenAI } = require('openai');
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY });
const start = Date.now();
client.chat.completions.create({ model: 'm', max_tokens: Number(process.env.MAX_TOKENS), messages: [{ role: 'user', content: 'Hi' }] })
  .then(() => { console.log('served'); process.exit(1); })
  .catch((e) => { console.log(JSON.stringify({ status: e.status, code: e.code, ms: Date.now() - start })); });
`

// TestNodeSDKBudgetRefusal: the official Node `openai` SDK (6.x), which
// honours a Retry-After of any length before it retries, rejects a budget
// refusal at once: for a call that never fits (no Retry-After: it would
// back off and retry twice) and at a day cap (Retry-After of hours).
func TestNodeSDKBudgetRefusal(t *testing.T) {
	modules := nodeSDK(t)
	g := refusalGateway(t)
	base, attempts := countingProxy(t, g)
	script := filepath.Join(t.TempDir(), "call.js")
	if err := os.WriteFile(script, []byte(nodeScript), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		maxTokens string
	}{{"never fits", "5000"}, {"at the day cap", "10"}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.maxTokens == "10" {
				exhaust(t, g)
			}
			attempts.Store(0)
			// Node's start is slow on a loaded machine: the process gets
			// 30 s, the call itself (timed by the script) 3 s.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", script)
			cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "BASE_URL="+base+"/v1", "API_KEY="+demoKey, "MAX_TOKENS="+tc.maxTokens)
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("the Node SDK did not reject within 30 s (it waits for Retry-After): %d attempts", attempts.Load())
			}
			if err != nil {
				t.Fatalf("node: %v\n%s", err, out)
			}
			var got struct {
				Status int
				Code   string
				MS     int64
			}
			if err := json.Unmarshal(out, &got); err != nil || got.Status != 429 || got.Code != "budget_exceeded" || got.MS > 3000 {
				t.Fatalf("node printed %s (%v), want a 429 budget_exceeded rejected within 3 s", out, err)
			}
			if n := attempts.Load(); n != 1 {
				t.Errorf("the Node SDK made %d attempts, want 1", n)
			}
		})
	}
}
