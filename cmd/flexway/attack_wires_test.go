package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Regression tests from the hostile pass over the anthropic, gemini and
// a2a kinds (issue 14). Each fails on the code as built; none is fixed
// here.

// attackAnswer is a handler answering every request with status,
// Content-Type ctype and body.
func attackAnswer(status int, ctype, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// attackA2A answers a JSON-RPC call with result, echoing the request's id.
func attackA2A(result string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, result)
	}
}

// attackBudgeted starts a gateway in front of one backend w of kind at
// url serving model, priced price (YAML flow), with a budget and the
// audit; it returns the gateway, the audit path and serve's log.
func attackBudgeted(t *testing.T, kind, url, model, price string) (*testGW, string, *syncBuffer) {
	t.Helper()
	b := wireBackend("w", kind, url, model)
	b.Extra = "      price: " + price
	return attackBudgetedBackend(t, b)
}

// attackBudgetedBackend is attackBudgeted in front of the backend b.
func attackBudgetedBackend(t *testing.T, b testBackend) (*testGW, string, *syncBuffer) {
	t.Helper()
	c := baseTestConfig("")
	c.Backends, c.Backend = []testBackend{b}, "w"
	c.Budget = "    default: {tokens_per_day: 1000000, eur_per_month: 5}"
	c.AdminKey = true
	t.Setenv("FLEXWAY_TEST_ADMIN_KEY", testAdminKey)
	c.AuditPath = filepath.Join(t.TempDir(), "audit.jsonl")
	log := &syncBuffer{}
	return startGatewayLog(t, c.yaml(), log), c.AuditPath, log
}

// attackEstimatedCharge posts body to path on g (which must answer 200),
// stops g and fails t unless the call committed tokens and euros and its
// audit line says usage_estimated.
func attackEstimatedCharge(t *testing.T, g *testGW, audit, path, body string) {
	t.Helper()
	resp := post(t, g, path, body)
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	u := usageOf(t, g, "")
	g.stop()
	_ = g.wait(t, 10*time.Second)
	line := auditLines(t, audit)[0]
	if u["tokens_per_day"].Committed == 0 || u["eur_per_month"].Committed == 0 || line["usage_estimated"] != true {
		t.Errorf("committed %d tokens, %d nano-euros; audit usage_estimated %v; want an estimate, marked",
			u["tokens_per_day"].Committed, u["eur_per_month"].Committed, line["usage_estimated"])
	}
}

// TestAttackAnswerWithoutUsageIsEstimated: an Anthropic answer that
// carries no usage (a proxy stripped it, a provider bug), unary or
// streamed, must be charged by estimate and audited usage_estimated, as
// an openai or gemini backend's is. Found: it is committed as 0 tokens
// (only per_call, when set), usage_estimated false, so such a backend
// serves past every token cap for free, and the client is shown a
// fabricated usage of zeros.
func TestAttackAnswerWithoutUsageIsEstimated(t *testing.T) {
	const stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[]}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello there, how are you today?\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	for _, tc := range []struct{ name, ctype, body, stream string }{
		{"unary", "application/json", `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello there, how are you today?"}],"stop_reason":"end_turn"}`, ""},
		{"stream", "text/event-stream", stream, `"stream":true,`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, attackAnswer(200, tc.ctype, tc.body))
			g, audit, _ := attackBudgeted(t, "anthropic", up.URL, "claude-sonnet-4-5", "{input: 3.00, output: 15.00}")
			attackEstimatedCharge(t, g, audit, "/v1/chat/completions", `{"model":"claude-sonnet-4-5",`+tc.stream+`"max_tokens":50,"messages":[{"role":"user","content":"Hello, a question for you please"}]}`)
		})
	}
}

// TestAttackDroppedFieldLogIsBounded: "logged once per field name" must
// not let a client grow the log and the gateway's memory without bound
// by sending new names: every distinct unknown name is stored for the
// backend's life (translated.dropped, a sync.Map) and logged. Found: 2000
// names of 200 bytes per request give 2000 log lines (~780 KB) per
// request, for ever; here 2 such requests must log at most 200 lines.
func TestAttackDroppedFieldLogIsBounded(t *testing.T) {
	up := newUpstream(t, attackAnswer(200, "application/json", `{"id":"m","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"x"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`))
	cfg, _ := wireConfig(t, wireBackend("w", "anthropic", up.URL, "claude-sonnet-4-5"))
	log := &syncBuffer{}
	g := startGatewayLog(t, cfg, log)
	for round := 0; round < 2; round++ {
		var b strings.Builder
		b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"hi"}]`)
		for i := 0; i < 2000; i++ {
			fmt.Fprintf(&b, `,"f%d_%d_%s":1`, round, i, strings.Repeat("x", 200))
		}
		b.WriteString("}")
		resp := post(t, g, "/v1/chat/completions", b.String())
		if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	if n := strings.Count(log.String(), "request field dropped"); n > 200 {
		t.Errorf("%d dropped-field log lines (%d log bytes) for 2 requests", n, len(log.String()))
	}
}

// TestAttackA2AResponseIDMustMatch: a JSON-RPC 2.0 response is the answer
// to the request with the same id (https://www.jsonrpc.org/specification,
// section 5); one with another id, or null (a parse error's), answers
// something else and must not be served and charged as this call's
// answer. Found: the id is never read; both are served as 200.
func TestAttackA2AResponseIDMustMatch(t *testing.T) {
	for _, id := range []string{`"not-yours"`, `null`} {
		up := newUpstream(t, attackAnswer(200, "application/json",
			`{"jsonrpc":"2.0","id":`+id+`,"result":{"kind":"message","role":"agent","messageId":"m1","parts":[{"kind":"text","text":"someone else's answer"}]}}`))
		cfg, _ := wireConfig(t, wireBackend("w", "a2a", up.URL+"/a2a", "agentx"))
		g := startGateway(t, cfg)
		resp := post(t, g, "/v1/chat/completions", `{"model":"agentx","messages":[{"role":"user","content":"hi"}]}`)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("id %s: %d %s; want 502", id, resp.StatusCode, body)
		}
	}
}

// TestAttackA2AAuthRequiredIsNoEmptySuccess: a Task in state
// auth-required (A2A TaskState; the agent needs credentials the gateway
// did not give) has no answer; with no status message it must not become
// a 200 with empty content, charged per call. Found: 200, content "",
// per_call charged.
func TestAttackA2AAuthRequiredIsNoEmptySuccess(t *testing.T) {
	up := newUpstream(t, attackA2A(`{"kind":"task","id":"t1","contextId":"c1","status":{"state":"auth-required"}}`))
	g, _, _ := attackBudgeted(t, "a2a", up.URL+"/a2a", "agentx", "{per_call: 0.002}")
	resp := post(t, g, "/v1/chat/completions", `{"model":"agentx","messages":[{"role":"user","content":"hi"}]}`)
	body, _ := io.ReadAll(resp.Body)
	u := usageOf(t, g, "")
	if resp.StatusCode == 200 || u["eur_per_month"].Committed != 0 {
		t.Errorf("auth-required: %d %s, %d nano-euros charged; want a 502, nothing charged", resp.StatusCode, body, u["eur_per_month"].Committed)
	}
}

// TestAttackA2ARPCErrorMessageNotLogged: a JSON-RPC error's message is
// the agent's text (it may quote the prompt); the anthropic and gemini
// kinds log an upstream error's type and size only. Found: the a2a kind
// logs the message verbatim in "cause", unary and streamed.
func TestAttackA2ARPCErrorMessageNotLogged(t *testing.T) {
	const quoted = "cannot plan a trip to ATTACK-PROMPT-TEXT"
	for _, stream := range []bool{false, true} {
		h := attackAnswer(200, "application/json", `{"jsonrpc":"2.0","id":"x","error":{"code":-32603,"message":"`+quoted+`"}}`)
		if stream {
			h = attackAnswer(200, "text/event-stream", `data: {"jsonrpc":"2.0","id":"x","error":{"code":-32603,"message":"`+quoted+`"}}`+"\n\n")
		}
		up := newUpstream(t, h)
		cfg, _ := wireConfig(t, wireBackend("w", "a2a", up.URL+"/a2a", "agentx"))
		log := &syncBuffer{}
		g := startGatewayLog(t, cfg, log)
		resp := post(t, g, "/v1/chat/completions", fmt.Sprintf(`{"model":"agentx","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream))
		_, _ = io.ReadAll(resp.Body)
		if strings.Contains(log.String(), "ATTACK-PROMPT-TEXT") {
			t.Errorf("stream %v: the agent's error message reached the log", stream)
		}
	}
}

// TestAttackTranslatedUsageIsConsistent: the usage a translated kind
// shows the client keeps OpenAI's invariants, as the ledger already
// does (openaiwire.CacheTokens clamps): cached_tokens ≤ prompt_tokens,
// no negative count, total = prompt + completion. Found: Gemini's
// cachedContentTokenCount 100000 over promptTokenCount 10 is shown as is;
// Anthropic's negative counts reach the client and the audit line
// (input_tokens -50000); counts near 2^63 wrap total_tokens to -2.
func TestAttackTranslatedUsageIsConsistent(t *testing.T) {
	for _, tc := range []struct{ name, kind, path, model, body string }{
		{"gemini cached over prompt", "gemini", "/v1beta", "gemini-2.5-flash", `{"candidates":[{"content":{"role":"model","parts":[{"text":"x"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":10,"cachedContentTokenCount":100000,"candidatesTokenCount":1}}`},
		{"anthropic negative", "anthropic", "", "claude-sonnet-4-5", `{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"x"}],"stop_reason":"end_turn","usage":{"input_tokens":-50000,"output_tokens":-3}}`},
		{"anthropic huge", "anthropic", "", "claude-sonnet-4-5", `{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"x"}],"stop_reason":"end_turn","usage":{"input_tokens":9223372036854775807,"output_tokens":9223372036854775807}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, attackAnswer(200, "application/json", tc.body))
			cfg, _ := wireConfig(t, wireBackend("w", tc.kind, up.URL+tc.path, tc.model))
			g := startGateway(t, cfg)
			resp := post(t, g, "/v1/chat/completions", `{"model":"`+tc.model+`","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
			var out struct {
				Usage struct {
					Prompt, Completion, Total int64
					Details                   struct{ Cached int64 } `json:"prompt_tokens_details"`
				}
			}
			raw, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal([]byte(strings.NewReplacer(`"prompt_tokens"`, `"Prompt"`, `"completion_tokens"`, `"Completion"`, `"total_tokens"`, `"Total"`, `"cached_tokens"`, `"Cached"`).Replace(string(raw))), &out); err != nil {
				t.Fatalf("%d %s: %v", resp.StatusCode, raw, err)
			}
			u := out.Usage
			if u.Prompt < 0 || u.Completion < 0 || u.Details.Cached < 0 || u.Details.Cached > u.Prompt || u.Total < u.Prompt || u.Total < u.Completion {
				t.Errorf("usage shown: %s", raw)
			}
		})
	}
}

// TestAttackAnthropicAnswerKeepsModel: an Anthropic Message without a
// model member (the field is optional to a proxy, absent in some
// recorded errors-then-retries) must still name the model served, as the
// Gemini kind does. Found: "model": "" reaches the client.
func TestAttackAnthropicAnswerKeepsModel(t *testing.T) {
	up := newUpstream(t, attackAnswer(200, "application/json", `{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"x"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`))
	cfg, _ := wireConfig(t, wireBackend("w", "anthropic", up.URL, "claude-sonnet-4-5"))
	g := startGateway(t, cfg)
	out := readJSON(t, post(t, g, "/v1/chat/completions", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`))
	if out["model"] != "claude-sonnet-4-5" {
		t.Errorf("model %q, want claude-sonnet-4-5", out["model"])
	}
}

// TestAttackGeminiEmbeddingsAreCharged: batchEmbedContents reports no
// token count (gemini.DecodeEmbeddings: "usage is zero, for the gateway
// to estimate"), so every Gemini embeddings call must be charged by
// estimate, usage_estimated. Found: the zero usage is a non-nil
// EmbeddingUsage, taken as reported: every call commits 0 tokens and
// 0 €, whatever the price, past every cap.
func TestAttackGeminiEmbeddingsAreCharged(t *testing.T) {
	up := newUpstream(t, attackAnswer(200, "application/json", `{"embeddings":[{"values":[0.1,0.2]},{"values":[0.3,0.4]}]}`))
	b := wireBackend("w", "gemini", up.URL+"/v1beta", "gemini-embedding-001")
	b.Capabilities = []string{"embeddings"}
	b.Extra = "      price: {input: 1000.00, output: 0}"
	g, audit, _ := attackBudgetedBackend(t, b)
	attackEstimatedCharge(t, g, audit, "/v1/embeddings", `{"model":"gemini-embedding-001","input":["a long sentence to embed, with many words in it","another long sentence to embed, with words"]}`)
}

// TestAttackReservationCoversMaxOutputTokens: a request without
// max_tokens is sent to an anthropic backend with max_tokens = the
// backend's max_output_tokens (64000 in the reference), a bound the
// gateway itself sets; the reservation must cover it, as it covers
// ai.budget.max_output_tokens (metering.Meter.prepare). Found: only
// reserve_output_tokens (1024) is reserved, so near a cap each call may
// overshoot it by 63k output tokens (0.95 € at 15 € per million).
func TestAttackReservationCoversMaxOutputTokens(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-release
		attackAnswer(200, "application/json", `{"id":"m","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"x"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}}`)(w, r)
	})
	b := wireBackend("w", "anthropic", up.URL, "claude-sonnet-4-5")
	b.Extra = "      price: {input: 3.00, output: 15.00}\n      max_output_tokens: 64000"
	c := baseTestConfig("")
	c.Backends, c.Backend = []testBackend{b}, "w"
	c.Budget = "    default: {tokens_per_day: 1000000, eur_per_month: 5}"
	c.AdminKey, c.AuditPath = true, ""
	t.Setenv("FLEXWAY_TEST_ADMIN_KEY", testAdminKey)
	g := startGateway(t, c.yaml())
	done := make(chan int)
	go func() {
		req, _ := http.NewRequest("POST", g.HTTP+"/v1/chat/completions", strings.NewReader(`{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+demoKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(up.requests()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	reserved := usageOf(t, g, "")["tokens_per_day"].Reserved
	close(release)
	<-done
	if sent := up.requests()[0].Body["max_tokens"]; sent != float64(64000) || reserved < 64000 {
		t.Errorf("max_tokens %v sent upstream, %d tokens reserved", sent, reserved)
	}
}

// TestAttackUpstreamSecretNeverRelayed: a translated kind relays an
// upstream 4xx's message (issue 14: "keeps its status and its
// message"); a message that quotes the gateway's own credential for the
// backend (a provider echoing the key it refused, a proxy's debug text)
// must not hand that credential to the caller. Found: relayed verbatim
// by the anthropic, gemini and a2a kinds (the openai kind too, before
// issue 14).
func TestAttackUpstreamSecretNeverRelayed(t *testing.T) {
	for _, tc := range []struct{ kind, path, model, body string }{
		{"anthropic", "", "claude-sonnet-4-5", `{"type":"error","error":{"type":"invalid_request_error","message":"bad key upstream-secret-token"}}`},
		{"gemini", "/v1beta", "gemini-2.5-flash", `{"error":{"code":400,"message":"API key upstream-secret-token not valid","status":"INVALID_ARGUMENT"}}`},
	} {
		up := newUpstream(t, attackAnswer(400, "application/json", tc.body))
		cfg, _ := wireConfig(t, wireBackend("w", tc.kind, up.URL+tc.path, tc.model))
		g := startGateway(t, cfg)
		resp := post(t, g, "/v1/chat/completions", `{"model":"`+tc.model+`","messages":[{"role":"user","content":"hi"}]}`)
		body, _ := io.ReadAll(resp.Body)
		if strings.Contains(string(body), "upstream-secret-token") {
			t.Errorf("%s: the backend's credential reached the caller: %d %s", tc.kind, resp.StatusCode, body)
		}
	}
}
