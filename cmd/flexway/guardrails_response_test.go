package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// answerPolicies are the response-guardrail tests' ai.policies: one
// policy for everyone redacting card numbers, denying secrets and
// checking the request's response_format schema.
const answerPolicies = `  policies:
    - name: answers
      guardrails:
        response:
          - {type: pii, action: redact, entities: [credit_card]}
          - {type: secrets, action: deny}
          - {type: json_schema}
`

// streamContent is what a client concatenates of a stream's content
// deltas, and whether the stream ended with [DONE].
func streamContent(t testing.TB, raw []byte) (string, bool) {
	t.Helper()
	var b strings.Builder
	done := false
	for _, ev := range sseEvents(raw) {
		if ev == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct{ Content string }
			}
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
		}
	}
	return b.String(), done
}

// TestResponseGuardCardAcrossChunks: a card number split across two
// stream chunks reaches the client redacted whole, through the HTTP front,
// from an OpenAI upstream and from an Anthropic one.
func TestResponseGuardCardAcrossChunks(t *testing.T) {
	openaiUp := newUpstream(t, sseUpstream(
		chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"content":"card 4111 1111 "},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"content":"1111 1111 ok"},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""),
	))
	sse := strings.NewReplacer(`"text":"Hello"`, `"text":"card 4111 1111 "`, `"text":"!\n\"é\""`, `"text":"1111 1111 ok"`).
		Replace(wireFixture(t, "anthropic", "stream/text.sse"))
	anthropicUp := wireUpstream(t, "anthropic", "{}", sse)
	for _, tc := range []struct{ name, cfg, model string }{
		{"openai", baseConfig(t, openaiUp.URL, answerPolicies), "m-large"},
		{"anthropic", func() string {
			c := baseTestConfig("")
			c.Backends = []testBackend{wireBackend("w", "anthropic", anthropicUp.URL, "claude-sonnet-4-5")}
			c.Backend, c.AI = "w", answerPolicies
			return c.yaml()
		}(), "claude-sonnet-4-5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := startGateway(t, tc.cfg)
			resp := post(t, g, "/v1/chat/completions", `{"model":"`+tc.model+`","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, raw)
			}
			got, done := streamContent(t, raw)
			if got != "card [REDACTED:credit_card] ok" || !done {
				t.Fatalf("content %q, done %v:\n%s", got, done, raw)
			}
			if strings.Contains(string(raw), "1111") {
				t.Fatalf("a digit group reached the client:\n%s", raw)
			}
		})
	}
}

// TestResponseGuardDenyMidStream: a secret in the answer after content
// was sent ends the stream with the guardrail's error event, exactly, and
// no [DONE]; none of the key reaches the client.
func TestResponseGuardDenyMidStream(t *testing.T) {
	up := newUpstream(t, sseUpstream(
		chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"content":"Here is what you asked for, in full. "},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"content":"The key: AKIAIOSF"},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"content":"ODNN7EXAMPLE and more"},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""),
	))
	g := startGateway(t, baseConfig(t, up.URL, answerPolicies))
	resp := post(t, g, "/v1/chat/completions", `{"model":"m-large","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	want := `data: {"error":{"message":"policy \"answers\" refuses the answer: guardrail secrets","type":"content_filter","param":null,"code":"guardrail_violation"}}` + "\n\n"
	if !strings.HasSuffix(string(raw), want) {
		t.Fatalf("stream does not end with the error event:\n%s", raw)
	}
	if strings.Contains(string(raw), "[DONE]") || strings.Contains(string(raw), "AKIA") || strings.Contains(string(raw), `"finish_reason":"stop"`) {
		t.Fatalf("stream:\n%s", raw)
	}
	if got, _ := streamContent(t, []byte(strings.TrimSuffix(string(raw), want))); !strings.HasPrefix(got, "Here is what you asked for") {
		t.Fatalf("content before the denial %q", got)
	}
}

// schemaFormat is a response_format asking for {"id": <integer>}.
const schemaFormat = `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","required":["id"],"properties":{"id":{"type":"integer"}}}}}`

// TestResponseGuardJSONSchema: an answer that does not validate against
// the request's response_format schema is a 403 guardrail_violation, as a
// JSON answer and as a stream (buffered whole, so nothing was sent);
// a valid one passes.
func TestResponseGuardJSONSchema(t *testing.T) {
	answer := `{"id":"x"}`
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		a := answer
		if strings.Contains(string(body), "valid please") {
			a = `{"id":7}`
		}
		q, _ := json.Marshal(a)
		if strings.Contains(string(body), `"stream":true`) {
			half := len(a) / 2
			q1, _ := json.Marshal(a[:half])
			q2, _ := json.Marshal(a[half:])
			sseUpstream(
				chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, ""),
				chunk(`[{"index":0,"delta":{"content":`+string(q1)+`},"finish_reason":null}]`, ""),
				chunk(`[{"index":0,"delta":{"content":`+string(q2)+`},"finish_reason":null}]`, ""),
				chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""),
			)(w, r)
			return
		}
		jsonHandler(200, `{"id":"c1","object":"chat.completion","created":1,"model":"m-large","choices":[{"index":0,"message":{"role":"assistant","content":`+string(q)+`},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`)(w, r)
	})
	g := startGateway(t, baseConfig(t, up.URL, answerPolicies))
	for _, stream := range []bool{false, true} {
		s := `"stream":false`
		if stream {
			s = `"stream":true`
		}
		resp := post(t, g, "/v1/chat/completions", `{"model":"m-large",`+s+`,`+schemaFormat+`,"messages":[{"role":"user","content":"hi"}]}`)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(raw), `"code":"guardrail_violation"`) || !strings.Contains(string(raw), `policy \"answers\" refuses the answer: guardrail json_schema`) {
			t.Fatalf("stream %v: %d %s", stream, resp.StatusCode, raw)
		}
		resp = post(t, g, "/v1/chat/completions", `{"model":"m-large",`+s+`,`+schemaFormat+`,"messages":[{"role":"user","content":"valid please"}]}`)
		raw, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || (!stream && !strings.Contains(string(raw), `"content":"{\"id\":7}"`)) {
			t.Fatalf("valid, stream %v: %d %s", stream, resp.StatusCode, raw)
		}
		if stream {
			if got, done := streamContent(t, raw); got != `{"id":7}` || !done {
				t.Fatalf("valid stream %q %v", got, done)
			}
		}
	}
}

// TestResponseGuardToolArguments: a card number in a tool call's
// arguments (as \u escapes, decoded) is redacted, every other byte of the
// tool call kept.
func TestResponseGuardToolArguments(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, `{"id":"c1","object":"chat.completion","created":1,"model":"m-large","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"pay","arguments":"{\"card\":\"4111\u00201111 1111 1111\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`))
	g := startGateway(t, baseConfig(t, up.URL, answerPolicies))
	resp := post(t, g, "/v1/chat/completions", `{"model":"m-large","messages":[{"role":"user","content":"pay"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `"tool_calls":[{"id":"call_1","type":"function","function":{"name":"pay","arguments":"{\"card\":\"[REDACTED:credit_card]\"}"}}]`
	if resp.StatusCode != 200 || !strings.Contains(string(raw), want) {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
}

// TestResponseGuardStreamedToolArguments: a card number split across a
// streamed tool call's argument deltas is redacted whole; the call's id
// and name go out as sent.
func TestResponseGuardStreamedToolArguments(t *testing.T) {
	up := newUpstream(t, sseUpstream(
		chunk(`[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"pay","arguments":""}}]},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"card\":\"4111 1111 "}}]},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1111 1111\"}"}}]},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`, ""),
	))
	g := startGateway(t, baseConfig(t, up.URL, answerPolicies))
	resp := post(t, g, "/v1/chat/completions", `{"model":"m-large","stream":true,"messages":[{"role":"user","content":"pay"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var args strings.Builder
	for _, ev := range sseEvents(raw) {
		if ev == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						Function struct{ Arguments string }
					} `json:"tool_calls"`
				}
			}
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		for _, ch := range c.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				args.WriteString(tc.Function.Arguments)
			}
		}
	}
	if got := args.String(); got != `{"card":"[REDACTED:credit_card]"}` || strings.Contains(string(raw), "1111") {
		t.Fatalf("arguments %q:\n%s", got, raw)
	}
	if !strings.Contains(string(raw), `"id":"call_1","type":"function","function":{"name":"pay","arguments":""}`) || !strings.HasSuffix(string(raw), "data: [DONE]\n\n") {
		t.Fatalf("stream:\n%s", raw)
	}
}

// TestResponseGuardFallbackKeepsNoHeldText: a stream cut while all its
// text was still held sent nothing, so the spare is tried, with holders
// of its own: the client gets the spare's answer only.
func TestResponseGuardFallbackKeepsNoHeldText(t *testing.T) {
	main := newCounting(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\n", chunk(`[{"index":0,"delta":{"role":"assistant","content":"4111 1111 "}}]`, ""))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	spare := newCounting(t, sseUpstream(
		chunk(`[{"index":0,"delta":{"role":"assistant","content":"1111 1111 fine"},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""),
	))
	c := baseTestConfig(main.URL)
	c.AuditPath = ""
	c.Backends = []testBackend{
		{Name: "main", URL: main.URL + "/v1", Models: []string{"m"}, DefaultModel: "m", Fallback: "[spare]", Timeout: "300ms", IdleTimeout: "2s"},
		{Name: "spare", URL: spare.URL + "/v1", Models: []string{"m"}, DefaultModel: "m", Fallback: "[]", Timeout: "300ms", IdleTimeout: "2s"},
	}
	c.AI = answerPolicies
	g := startGateway(t, c.yaml())
	resp := post(t, g, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got, done := streamContent(t, raw)
	if resp.StatusCode != 200 || got != "1111 1111 fine" || !done || spare.calls.Load() != 1 {
		t.Fatalf("status %d, content %q, done %v, spare calls %d:\n%s", resp.StatusCode, got, done, spare.calls.Load(), raw)
	}
	if resp.Header.Get("Flexway-Degraded") != "backend-fallback" {
		t.Fatalf("Flexway-Degraded %q", resp.Header.Get("Flexway-Degraded"))
	}
}

// TestResponseGuardBadSchemaBeforeTheCall: a request whose response_format
// schema does not compile, under a response json_schema rule, is a 400
// before anything is sent upstream (it was sent, paid for, then refused),
// in both modes, and is charged nothing.
func TestResponseGuardBadSchemaBeforeTheCall(t *testing.T) {
	var calls atomic.Int32
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		jsonHandler(200, `{"id":"c1","object":"chat.completion","created":1,"model":"m-large","choices":[{"index":0,"message":{"role":"assistant","content":"{}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`)(w, r)
	})
	g := startGateway(t, baseConfig(t, up.URL, answerPolicies))
	bad := `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":12}}}`
	for _, s := range []string{`"stream":false`, `"stream":true`} {
		resp := post(t, g, "/v1/chat/completions", `{"model":"m-large",`+s+`,`+bad+`,"messages":[{"role":"user","content":"hi"}]}`)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(raw), `"code":"invalid_request"`) || !strings.Contains(string(raw), "does not compile") {
			t.Errorf("%s: %d %s", s, resp.StatusCode, raw)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d upstream calls, want 0", n)
	}
}

// TestResponseGuardDeniedStreamCharged: a stream denied mid-way is
// charged the input and the output the upstream had sent when Flexway
// stopped reading (the upstream request is cancelled there, so nothing
// after it is generated for the tenant), never nothing and never the
// whole reservation; the reservation is released, and the audit line
// says what was charged.
func TestResponseGuardDeniedStreamCharged(t *testing.T) {
	text := strings.Repeat("All of this was generated and is charged. ", 20)
	up := newUpstream(t, sseUpstream(
		chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"content":"`+text+`"},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"content":"The key: AKIAIOSFODNN7EXAMPLE. "},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"content":"`+strings.Repeat("never read ", 200)+`"},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, `{"prompt_tokens":9,"completion_tokens":4000,"total_tokens":4009}`),
	))
	c := budgetTestConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 100000, eur_per_month: 5}")
	c.AuditPath = filepath.Join(t.TempDir(), "audit.jsonl")
	c.AI = answerPolicies
	g := startGateway(t, c.yaml())
	resp := post(t, g, "/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":2000,"messages":[{"role":"user","content":"hi"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(raw), `"code":"guardrail_violation"`) || strings.Contains(string(raw), "AKIA") {
		t.Fatalf("stream:\n%s", raw)
	}
	u := usageOf(t, g, "")
	g.stop()
	g.wait(t, 10*time.Second)
	lines := auditLines(t, c.AuditPath)
	if len(lines) != 1 {
		t.Fatalf("audit lines %v", lines)
	}
	l := lines[0]
	in, out := int64(l["input_tokens"].(float64)), int64(l["output_tokens"].(float64))
	// What was read: the text (~850 bytes, about 210 tokens at 4 bytes a
	// token) and the chunk with the key; not the 2,200 bytes never read,
	// not the upstream's final usage, not max_tokens.
	if out < 150 || out > 400 || in == 0 {
		t.Fatalf("charged %d input and %d output tokens; want the input and about 220 output tokens:\n%v", in, out, l)
	}
	if got := u["tokens_per_day"]; got.Committed != in+out || got.Reserved != 0 {
		t.Fatalf("ledger %+v; want %d committed, nothing reserved", got, in+out)
	}
	if l["usage_estimated"] != true || l["outcome"] == "ok" {
		t.Fatalf("audit line %v: want estimated usage and a refusal outcome", l)
	}
}
