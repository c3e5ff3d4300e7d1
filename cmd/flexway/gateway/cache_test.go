package gateway_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexway/flexway/cmd/flexway/gateway"
	"github.com/flexway/flexway/server/auditlog"
)

// cacheConfig is minimalConfig's spare alone (the fake upstream) with two
// tenants, acme and globex, and the policy faq caching every call to
// model m, exact mode, hit_price 0.0001 euros.
func cacheConfig(spareURL string) string {
	return `identity:
  api_keys:
    - {name: acme, key: env:GATEWAY_TEST_KEY, tenant: acme}
    - {name: globex, key: env:GATEWAY_TEST_UPSTREAM_TOKEN, tenant: globex}
ai:
  backend: spare
  backends:
    spare:
      url: ` + spareURL + `/v1
      models: [m]
      default_model: m
      price: {input: 1, output: 2}
  cache: {max_bytes: 1MiB}
  policies:
    - name: faq
      match: {model: m}
      cache: {mode: exact, ttl: 1m, hit_price: 0.0001}
audit:
  path: audit.jsonl
`
}

// cachePost posts a chat body with key and the extra headers, and
// returns the answer's status, Flexway-Cache header and body.
func cachePost(t *testing.T, url, key, body string, headers ...string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Flexway-Cache"), string(b)
}

// TestResponseCacheThroughGateway: under a policy's exact cache, the
// second identical question of a tenant answers from the cache (the
// upstream counts one call) with a fresh id; another tenant's same bytes
// miss and go upstream; Cache-Control: no-cache skips the lookup; the
// audit says cache hit with the filling call's usage saved and the hit
// charged its hit_price, 0 tokens.
func TestResponseCacheThroughGateway(t *testing.T) {
	up := newUpstream(t)
	cfg := load(t, cacheConfig(up.URL))
	g, err := gateway.New(gateway.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	const q = `{"model":"m","messages":[{"role":"user","content":"What are your opening hours?"}]}`

	status, verdict, first := cachePost(t, srv.URL, testKey, q)
	if status != 200 || verdict != "miss" || !strings.Contains(first, "Hello from upstream") {
		t.Fatalf("first call: %d %q %s", status, verdict, first)
	}
	// The store is asynchronous (ristretto's buffer): ask without storing
	// until the entry is there; each miss goes upstream.
	misses := 0
	var hit string
	for deadline := time.Now().Add(5 * time.Second); ; misses++ {
		status, verdict, hit = cachePost(t, srv.URL, testKey, q, "Cache-Control", "no-store")
		if status != 200 {
			t.Fatalf("status %d: %s", status, hit)
		}
		if verdict == "hit" || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if verdict != "hit" {
		t.Fatal("the second identical question never hit")
	}
	var a, b struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal([]byte(first), &a) != nil || json.Unmarshal([]byte(hit), &b) != nil {
		t.Fatalf("answers do not decode: %s / %s", first, hit)
	}
	if b.ID == a.ID || b.Model != a.Model || len(b.Choices) != 1 || b.Choices[0].Message.Content != "Hello from upstream" {
		t.Errorf("hit = %+v; want the stored answer with a fresh id (first %+v)", b, a)
	}
	if n := len(up.calls()); n != 1+misses {
		t.Errorf("upstream calls = %d, want %d", n, 1+misses)
	}
	// Another tenant, the same bytes: a miss, and an upstream call.
	if _, verdict, _ := cachePost(t, srv.URL, upstreamToken, q); verdict != "miss" {
		t.Errorf("globex: Flexway-Cache %q, want miss", verdict)
	}
	// no-cache: looked up never, so upstream again.
	if _, verdict, _ := cachePost(t, srv.URL, testKey, q, "Cache-Control", "no-cache"); verdict != "miss" {
		t.Errorf("no-cache: Flexway-Cache %q, want miss", verdict)
	}
	if n := len(up.calls()); n != 3+misses {
		t.Errorf("upstream calls = %d, want %d", n, 3+misses)
	}
	srv.Close()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	lines := auditLines(t, filepath.Join(filepath.Dir(cfg.Audit.Path), "audit.jsonl"))
	var hits []auditlog.Line
	for _, l := range lines {
		if l.Cache == "" {
			t.Errorf("line without a cache verdict: %+v", l)
		}
		if l.Cache == "hit" {
			hits = append(hits, l)
		}
	}
	if len(hits) != 1 {
		t.Fatalf("%d hit lines, want 1: %+v", len(hits), lines)
	}
	h := hits[0]
	if h.Outcome != "ok" || h.InputTokens != 0 || h.OutputTokens != 0 || h.CacheSavedTokens != 15 || h.CostEUR != "0.000100000" ||
		h.ModelRequested != "m" || h.Backend != "spare" {
		t.Errorf("hit line = %+v; want ok, 0 tokens, 15 saved, 0.0001 EUR, model m on spare", h)
	}
}

func auditLines(t *testing.T, path string) []auditlog.Line {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ls []auditlog.Line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l auditlog.Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		ls = append(ls, l)
	}
	return ls
}
