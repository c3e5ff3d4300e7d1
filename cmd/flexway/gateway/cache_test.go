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
	"sync/atomic"
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

// streamUpstream is a fake OpenAI that streams its answer as Server-Sent
// Events when the request says "stream": true (three content chunks, a
// finish chunk, the usage chunk Flexway asks for, [DONE]) and answers
// completion otherwise; it counts the calls.
func streamUpstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n.Add(1)
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, completion)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{
			`{"id":"s1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"We "},"finish_reason":null}]}`,
			`{"id":"s1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"ship "},"finish_reason":null}]}`,
			`{"id":"s1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"abroad."},"finish_reason":null}]}`,
			`{"id":"s1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`{"id":"s1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`,
		} {
			_, _ = io.WriteString(w, "data: "+c+"\n\n")
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// sseData returns the data payloads of an SSE body.
func sseData(body string) []string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// TestResponseCacheStreams: a streamed answer is stored through the tee
// and replayed to a streaming caller with the same chunking, one fresh
// id, [DONE] once and the usage chunk only when asked; a JSON caller of
// that entry gets one body with the content joined and the usage; an
// entry a JSON call filled streams to a streaming caller.
func TestResponseCacheStreams(t *testing.T) {
	up, calls := streamUpstream(t)
	g, err := gateway.New(gateway.Options{Config: load(t, cacheConfig(up.URL))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	const q = `"model":"m","messages":[{"role":"user","content":"Do you ship abroad?"}]`

	_, verdict, first := cachePost(t, srv.URL, testKey, `{`+q+`,"stream":true}`)
	if verdict != "miss" || len(sseData(first)) != 5 {
		t.Fatalf("first stream: %q\n%s", verdict, first)
	}
	var hit string
	misses := 0
	for deadline := time.Now().Add(5 * time.Second); ; misses++ {
		_, verdict, hit = cachePost(t, srv.URL, testKey, `{`+q+`,"stream":true}`, "Cache-Control", "no-store")
		if verdict == "hit" || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if verdict != "hit" {
		t.Fatal("the streamed answer was never stored")
	}
	if n := calls.Load(); n != int64(1+misses) {
		t.Errorf("upstream calls = %d, want %d", n, 1+misses)
	}
	data := sseData(hit)
	if len(data) != 5 || data[4] != "[DONE]" || strings.Count(hit, "[DONE]") != 1 {
		t.Fatalf("hit stream = %q; want 4 chunks and [DONE] once", data)
	}
	var content strings.Builder
	ids := map[string]bool{}
	for _, d := range data[:4] {
		var ch struct {
			ID      string `json:"id"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage any `json:"usage"`
		}
		if err := json.Unmarshal([]byte(d), &ch); err != nil || len(ch.Choices) != 1 || ch.Usage != nil {
			t.Fatalf("chunk %s: %v", d, err)
		}
		ids[ch.ID] = true
		content.WriteString(ch.Choices[0].Delta.Content)
	}
	if content.String() != "We ship abroad." || len(ids) != 1 || ids["s1"] {
		t.Errorf("content %q, ids %v; want the stored content under one fresh id", content.String(), ids)
	}
	// Asked for usage: the entry's, in a last chunk.
	_, _, withUsage := cachePost(t, srv.URL, testKey, `{`+q+`,"stream":true,"stream_options":{"include_usage":true}}`)
	if d := sseData(withUsage); len(d) != 6 || !strings.Contains(d[4], `"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}`) {
		t.Errorf("with include_usage: %q", d)
	}
	// A JSON caller of the streamed entry.
	_, verdict, body := cachePost(t, srv.URL, testKey, `{`+q+`}`)
	if verdict != "hit" || !strings.Contains(body, `"content":"We ship abroad."`) || !strings.Contains(body, `"finish_reason":"stop"`) ||
		!strings.Contains(body, `"prompt_tokens":7`) {
		t.Errorf("JSON of a streamed entry: %q %s", verdict, body)
	}
	// An entry a JSON call filled, streamed.
	const j = `{"model":"m","messages":[{"role":"user","content":"Opening hours?"}]}`
	if _, verdict, _ := cachePost(t, srv.URL, testKey, j); verdict != "miss" {
		t.Fatalf("JSON first call: %q", verdict)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		_, verdict, hit = cachePost(t, srv.URL, testKey, strings.TrimSuffix(j, "}")+`,"stream":true}`, "Cache-Control", "no-store")
		if verdict == "hit" || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := sseData(hit); verdict != "hit" || len(d) != 3 || !strings.Contains(d[0], `"content":"Hello from upstream"`) || !strings.Contains(d[1], `"finish_reason":"stop"`) {
		t.Errorf("stream of a JSON entry: %q %q", verdict, d)
	}
}
