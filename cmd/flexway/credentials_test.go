package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
)

// poolUpstream answers by the request's bearer key: a key in status is
// answered that status (with Retry-After from retry), any other is served
// a completion with usage.
type poolUpstream struct {
	mu     sync.Mutex
	status map[string]int
	retry  map[string]string
	seen   []string
}

func (p *poolUpstream) set(key string, status int, retry string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status[key], p.retry[key] = status, retry
}

func (p *poolUpstream) keys() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.seen, ",")
}

func (p *poolUpstream) handle(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	p.mu.Lock()
	p.seen = append(p.seen, key)
	status, retry := p.status[key], p.retry[key]
	p.mu.Unlock()
	if status == 0 {
		usageUpstream(10, 5)(w, r)
		return
	}
	if retry != "" {
		w.Header().Set("Retry-After", retry)
	}
	jsonHandler(status, `{"error":{"message":"upstream says no to `+key+`","type":"rate_limit_error","code":"upstream_own_code"}}`)(w, r)
}

// poolGateway starts the budget configuration (main falling back to
// cheap) with main's auth replaced by a two-key pool, a and b, whose
// secrets are pool-secret-a and pool-secret-b.
func poolGateway(t *testing.T) (*testGW, *poolUpstream, *countingUpstream, *syncBuffer) {
	t.Helper()
	t.Setenv("FLEXWAY_TEST_POOL_A", "pool-secret-a")
	t.Setenv("FLEXWAY_TEST_POOL_B", "pool-secret-b")
	pu := &poolUpstream{status: map[string]int{}, retry: map[string]string{}}
	main := newUpstream(t, pu.handle)
	cheap := newCounting(t, usageUpstream(10, 5))
	c := budgetTestConfig(t, main.URL, cheap.URL, "    default: {tokens_per_day: 100000}")
	c.Backends[0].Extra = `      credentials:
        keys:
          - {name: a, auth: {type: bearer, secret: env:FLEXWAY_TEST_POOL_A}}
          - {name: b, auth: {type: bearer, secret: env:FLEXWAY_TEST_POOL_B}}`
	log := &syncBuffer{}
	return startGatewayLog(t, c.yaml(), log), pu, cheap, log
}

// poolStates is main's credentials as GET /flexway/v1/backends shows them,
// "name=state" joined by spaces.
func poolStates(t *testing.T, g *testGW) string {
	t.Helper()
	resp := send(t, g, "GET", "/flexway/v1/backends", nil, map[string]string{"Authorization": "Bearer " + testAdminKey})
	defer resp.Body.Close()
	var body struct {
		Backends []struct {
			Name        string
			Credentials []struct{ Name, State string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("backends: %d %v", resp.StatusCode, err)
	}
	var out []string
	for _, b := range body.Backends {
		if b.Name == "cheap" && len(b.Credentials) != 0 {
			t.Fatalf("cheap, with no pool, lists credentials %v", b.Credentials)
		}
		if b.Name == "main" {
			for _, k := range b.Credentials {
				out = append(out, k.Name+"="+k.State)
			}
		}
	}
	return strings.Join(out, " ")
}

// committedTokens is the acme tenant's committed tokens_per_day.
func committedTokens(t *testing.T, g *testGW) string {
	t.Helper()
	resp := send(t, g, "GET", "/flexway/v1/usage", nil, map[string]string{"Authorization": "Bearer " + testAdminKey})
	defer resp.Body.Close()
	var body struct {
		Accounts []struct {
			Tenant, Agent string
			Caps          []struct{ Cap, Committed, Reserved string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	for _, a := range body.Accounts {
		if a.Tenant == "acme" && a.Agent == "" {
			for _, c := range a.Caps {
				if c.Cap == "tokens_per_day" {
					return c.Committed + "/" + c.Reserved
				}
			}
		}
	}
	t.Fatalf("no acme tokens_per_day in %+v", body)
	return ""
}

func sdkChat(g *testGW) (*openai.ChatCompletion, error) {
	client := sdkClient(g, demoKey)
	return client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
}

// A key answered 429 rests and the call is served at once by the other
// key, not by the fallback backend; the admin API shows the key resting.
// When both rest, the caller gets Flexway's own 429 rate_limited with the
// earliest Retry-After, not the upstream's body, no fallback, and no
// budget spent.
func TestCredentialPool429(t *testing.T) {
	g, pu, cheap, log := poolGateway(t)
	pu.set("pool-secret-a", 429, "30")
	resp, err := sdkChat(g)
	if err != nil || resp.Choices[0].Message.Content != "one two three" {
		t.Fatalf("%v %v", resp, err)
	}
	if pu.keys() != "pool-secret-a,pool-secret-b" || cheap.calls.Load() != 0 {
		t.Fatalf("keys %s, cheap %d calls; want a then b, no fallback", pu.keys(), cheap.calls.Load())
	}
	if st := poolStates(t, g); !strings.HasPrefix(st, "a=resting until 20") || !strings.HasSuffix(st, " b=ok") {
		t.Fatalf("states %q", st)
	}
	spent := committedTokens(t, g)
	if strings.HasPrefix(spent, "0/") {
		t.Fatalf("a served call committed %s", spent)
	}

	pu.set("pool-secret-b", 429, "9")
	_, err = sdkChat(g)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err %v, want *openai.Error", err)
	}
	if apiErr.StatusCode != 429 || apiErr.Code != "rate_limited" || apiErr.Response.Header.Get("Retry-After") != "9" ||
		strings.Contains(apiErr.Message, "upstream says no") || strings.Contains(apiErr.RawJSON(), "upstream_own_code") {
		t.Fatalf("status %d code %q Retry-After %q: %s", apiErr.StatusCode, apiErr.Code, apiErr.Response.Header.Get("Retry-After"), apiErr.RawJSON())
	}
	if cheap.calls.Load() != 0 {
		t.Fatalf("a rate-limited pool fell back to cheap (%d calls)", cheap.calls.Load())
	}
	if got := committedTokens(t, g); got != spent {
		t.Fatalf("budget %s after the refusal, want %s (unchanged, nothing reserved)", got, spent)
	}
	for _, s := range []string{"pool-secret-a", "pool-secret-b"} {
		if strings.Contains(log.String(), s) {
			t.Fatalf("the log holds a key's value %s", s)
		}
	}
	// Attempts per key: a refused twice (429), b served once then refused.
	mresp := send(t, g, "GET", "/metrics", nil, map[string]string{"Authorization": ""})
	metrics, _ := io.ReadAll(mresp.Body)
	for _, want := range []string{
		`flexway_upstream_credential_calls_total{backend="main",credential="a",outcome="rate_limited"} 1`,
		`flexway_upstream_credential_calls_total{backend="main",credential="b",outcome="served"} 1`,
		`flexway_upstream_credential_calls_total{backend="main",credential="b",outcome="rate_limited"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(metrics), "pool-secret") {
		t.Error("a key's value reached /metrics")
	}
}

// Keys answered 401 and 402 are set aside, logged once by name, never by
// value; then the caller gets 502 upstream_credentials_exhausted, with no
// fallback and no budget spent.
func TestCredentialPoolSetAside(t *testing.T) {
	g, pu, cheap, log := poolGateway(t)
	pu.set("pool-secret-a", 401, "")
	pu.set("pool-secret-b", 402, "")
	before := committedTokens(t, g)
	for range 2 {
		_, err := sdkChat(g)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 502 || apiErr.Code != "upstream_credentials_exhausted" {
			t.Fatalf("err %v, want 502 upstream_credentials_exhausted", err)
		}
	}
	if pu.keys() != "pool-secret-a,pool-secret-b" || cheap.calls.Load() != 0 {
		t.Fatalf("keys %s, cheap %d calls; want each key once, no fallback", pu.keys(), cheap.calls.Load())
	}
	if st := poolStates(t, g); st != "a=set aside: 401 b=set aside: 402" {
		t.Fatalf("states %q", st)
	}
	if got := committedTokens(t, g); got != before {
		t.Fatalf("budget %s, want %s", got, before)
	}
	out := log.String()
	if strings.Count(out, "credential set aside") != 2 || strings.Contains(out, "pool-secret-") {
		t.Fatalf("log: want two set-aside lines and no key value:\n%s", out)
	}
}
