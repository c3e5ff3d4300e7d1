package main

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestAnthropicPoolRestsAKeyAfter429: an anthropic backend's pool of two
// x-api-key keys, weighted 1:1; the upstream answers key a with
// Anthropic's 429 rate_limit_error: the call is served at once by key b,
// and the next calls all go to b while a rests.
func TestAnthropicPoolRestsAKeyAfter429(t *testing.T) {
	t.Setenv("FLEXWAY_TEST_POOL_A", "anthropic-key-a")
	t.Setenv("FLEXWAY_TEST_POOL_B", "anthropic-key-b")
	var mu sync.Mutex
	var seen []string
	answer := wireFixture(t, "anthropic", "decode/text.json")
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Api-Key")
		mu.Lock()
		seen = append(seen, key)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if key == "anthropic-key-a" {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(429)
			_, _ = io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`)
			return
		}
		_, _ = io.WriteString(w, answer)
	})
	b := wireBackend("w", "anthropic", up.URL, "claude-sonnet-4-5")
	b.Auth = ""
	b.Extra = `      credentials:
        strategy: weighted
        keys:
          - {name: a, weight: 1, auth: {type: header, name: x-api-key, secret: env:FLEXWAY_TEST_POOL_A}}
          - {name: b, weight: 1, auth: {type: header, name: x-api-key, secret: env:FLEXWAY_TEST_POOL_B}}`
	cfg, _ := wireConfig(t, b)
	g := startGateway(t, cfg)
	for i := range 4 {
		resp := post(t, g, "/v1/chat/completions", `{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(seen, ","); strings.Count(got, "anthropic-key-a") != 1 || strings.Count(got, "anthropic-key-b") != 4 {
		t.Errorf("keys sent %s: key a must rest after its 429", got)
	}
}
