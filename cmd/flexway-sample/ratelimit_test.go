package main

import (
	"net/http"
	"testing"
)

// --rate-limit-key answers 429 with Retry-After to the key it names, on
// any wire and in any of its headers, and serves every other key.
func TestRateLimitKey(t *testing.T) {
	t.Parallel()
	opts := fastOptions()
	opts.rateLimitKey, opts.rateLimitRetryAfter = "sk-busy", 7
	srv := newTestServer(t, opts)
	body := `{"model":"sample-small","messages":[{"role":"user","content":"hi"}]}`
	for _, h := range []map[string]string{{"Authorization": "Bearer sk-busy"}, {"x-api-key": "sk-busy"}, {"x-goog-api-key": "sk-busy"}} {
		resp, b := do(t, srv, http.MethodPost, "/v1/chat/completions", body, h)
		checkError(t, resp, b, 429, "requests", "", "rate_limit_exceeded")
		if resp.Header.Get("Retry-After") != "7" {
			t.Errorf("%v: Retry-After %q, want 7", h, resp.Header.Get("Retry-After"))
		}
	}
	for _, h := range []map[string]string{{"Authorization": "Bearer sk-free"}, {}} {
		if resp, b := do(t, srv, http.MethodPost, "/v1/chat/completions", body, h); resp.StatusCode != 200 {
			t.Errorf("%v: status %d %s, want 200", h, resp.StatusCode, b)
		}
	}
}

func TestRateLimitFlags(t *testing.T) {
	t.Parallel()
	_, opts, err := parseFlags([]string{"--rate-limit-key", "sk-busy"}, discard{})
	if err != nil || opts.rateLimitKey != "sk-busy" || opts.rateLimitRetryAfter != 30 {
		t.Fatalf("%+v %v", opts, err)
	}
	if _, _, err := parseFlags([]string{"--rate-limit-retry-after", "0"}, discard{}); err == nil {
		t.Fatal("--rate-limit-retry-after 0 accepted")
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
