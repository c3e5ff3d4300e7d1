package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// statusUpstream answers every request with status and body as JSON.
func statusUpstream(t *testing.T, status int, body string) *fakeUpstream {
	return newUpstream(t, jsonHandler(status, body))
}

// TestFallbackAcrossWireFormats: an anthropic backend answering 529
// (overloaded) falls back to an openai one, and an openai one answering
// 503 to an anthropic one; a stream whose Anthropic error event comes
// before any content falls back too; an Anthropic 400 is never fallen
// back from.
func TestFallbackAcrossWireFormats(t *testing.T) {
	overloaded := `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	for _, tc := range []struct {
		name            string
		first, second   func(t *testing.T) (*fakeUpstream, testBackend)
		body            string
		wantStatus      int
		wantDegraded    bool
		wantSecondCalls int
	}{
		{name: "anthropic to openai",
			first: func(t *testing.T) (*fakeUpstream, testBackend) {
				up := statusUpstream(t, 529, overloaded)
				return up, wireBackend("a", "anthropic", up.URL, "m-large")
			},
			second: func(t *testing.T) (*fakeUpstream, testBackend) {
				up := statusUpstream(t, 200, completion)
				return up, baseBackend("b", up.URL)
			},
			body: `{"model":"m-large","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, wantStatus: 200, wantDegraded: true, wantSecondCalls: 1},
		{name: "openai to anthropic",
			first: func(t *testing.T) (*fakeUpstream, testBackend) {
				up := statusUpstream(t, 503, `{"error":{"message":"down"}}`)
				return up, baseBackend("a", up.URL)
			},
			second: func(t *testing.T) (*fakeUpstream, testBackend) {
				up := wireUpstream(t, "anthropic", wireFixture(t, "anthropic", "decode/text.json"), "")
				return up, wireBackend("b", "anthropic", up.URL, "m-large")
			},
			body: `{"model":"m-large","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, wantStatus: 200, wantDegraded: true, wantSecondCalls: 1},
		{name: "anthropic stream error before content to gemini",
			first: func(t *testing.T) (*fakeUpstream, testBackend) {
				up := wireUpstream(t, "anthropic", "", wireFixture(t, "anthropic", "stream/error_before_content.sse"))
				return up, wireBackend("a", "anthropic", up.URL, "m-large")
			},
			second: func(t *testing.T) (*fakeUpstream, testBackend) {
				up := wireUpstream(t, "gemini", "", wireFixture(t, "gemini", "stream/text.sse"))
				return up, wireBackend("b", "gemini", up.URL, "m-large")
			},
			body: `{"model":"m-large","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, wantStatus: 200, wantDegraded: true, wantSecondCalls: 1},
		{name: "anthropic 400 is not fallen back from",
			first: func(t *testing.T) (*fakeUpstream, testBackend) {
				up := statusUpstream(t, 400, `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`)
				return up, wireBackend("a", "anthropic", up.URL, "m-large")
			},
			second: func(t *testing.T) (*fakeUpstream, testBackend) {
				up := statusUpstream(t, 200, completion)
				return up, baseBackend("b", up.URL)
			},
			body: `{"model":"m-large","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, wantStatus: 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a := tc.first(t)
			up2, b := tc.second(t)
			a.Fallback = "[b]"
			cfg, audit := wireConfig(t, a, b)
			g := startGateway(t, cfg)
			resp := post(t, g, "/v1/chat/completions", tc.body)
			var raw bytes.Buffer
			_, _ = raw.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus || (resp.Header.Get("Flexway-Degraded") == "backend-fallback") != tc.wantDegraded {
				t.Fatalf("status %d degraded %q: %s", resp.StatusCode, resp.Header.Get("Flexway-Degraded"), raw.String())
			}
			if n := len(up2.requests()); n != tc.wantSecondCalls {
				t.Errorf("the fallback was called %d times, want %d", n, tc.wantSecondCalls)
			}
			g.stop()
			g.wait(t, 10*time.Second)
			line := auditLines(t, audit)[0]
			if tc.wantDegraded && (line["backend"] != "b" || line["fallback"] != true) {
				t.Errorf("audit line %v", line)
			}
		})
	}
}

// TestAnthropicCutStreamChargedAsCut: an Anthropic stream that closes
// without message_stop reaches the client with the content sent, then an
// error event and no [DONE]; the call is charged (its output estimated)
// and audited as an upstream error.
func TestAnthropicCutStreamChargedAsCut(t *testing.T) {
	up := wireUpstream(t, "anthropic", "", wireFixture(t, "anthropic", "stream/cut.sse"))
	c := baseTestConfig("")
	a := wireBackend("w", "anthropic", up.URL, "m-large")
	a.Price = &[2]float64{1000, 1000}
	c.Backends, c.Backend = []testBackend{a}, "w"
	c.Budget = "    default: {tokens_per_day: 100000, eur_per_month: 5}"
	c.AuditPath = filepath.Join(t.TempDir(), "audit.jsonl")
	g := startGateway(t, c.yaml())
	resp, raw := streamBody(t, g, `{"model":"m-large","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || bytes.Contains(raw, []byte("[DONE]")) {
		t.Fatalf("status %d, a cut stream must not end with [DONE]:\n%s", resp.StatusCode, raw)
	}
	evs := sseEvents(raw)
	text, finish, _ := streamText(t, evs[:len(evs)-1])
	var last struct {
		Error *struct{ Code string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(evs[len(evs)-1]), &last); err != nil || last.Error == nil || last.Error.Code != "upstream_error" {
		t.Fatalf("last event %s", evs[len(evs)-1])
	}
	if !strings.HasPrefix(text, "Hal") || finish != "" {
		t.Errorf("text %q finish %q", text, finish)
	}
	g.stop()
	g.wait(t, 10*time.Second)
	line := auditLines(t, c.AuditPath)[0]
	if line["outcome"] != "upstream_error" || line["cost_eur"] == "0" || line["cost_eur"] == nil || line["output_tokens"] == float64(0) {
		t.Errorf("a cut stream is charged for what was sent: %v", line)
	}
}
