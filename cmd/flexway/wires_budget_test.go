package main

import (
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// TestWireLedgerAtTheRightPrice: an Anthropic answer (12 uncached input
// tokens, 2000 read from the cache, 100 written to it, 6 output) is
// charged each tier at the backend's price, its token cap counting every
// input token; the audit line says the tiers. An A2A agent reporting no
// tokens is charged its per-call price plus its estimated tokens.
func TestWireLedgerAtTheRightPrice(t *testing.T) {
	claude := wireUpstream(t, "anthropic", wireFixture(t, "anthropic", "decode/text.json"), "")
	agent := wireUpstream(t, "a2a", wireFixture(t, "a2a", "send_message.json"), "")
	a := wireBackend("claude", "anthropic", claude.URL, "claude-sonnet-4-5")
	a.Extra = "      price: {input: 3.00, output: 15.00, cache_read: 0.30, cache_write: 3.75}\n      max_output_tokens: 64000"
	x := wireBackend("agentx", "a2a", agent.URL+"/a2a", "agentx")
	x.Extra = "      price: {per_call: 0.002}"
	c := baseTestConfig("")
	c.Backends, c.Backend = []testBackend{a, x}, "claude"
	c.Tenants = []testTenant{{Name: "acme", Agents: []testAgent{{Name: "bot"}}}, {Name: "agents", Backend: "agentx"}}
	c.Keys = append(c.Keys, testKey{Name: "agents-key", Env: "FLEXWAY_TEST_AGENTS_KEY", Tenant: "agents"})
	t.Setenv("FLEXWAY_TEST_AGENTS_KEY", "sk-test-agents")
	c.Budget = "    default: {tokens_per_day: 1000000, eur_per_month: 5}"
	c.AdminKey = true
	t.Setenv("FLEXWAY_TEST_ADMIN_KEY", testAdminKey)
	c.AuditPath = filepath.Join(t.TempDir(), "audit.jsonl")
	g := startGateway(t, c.yaml())

	resp := post(t, g, "/v1/chat/completions", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`)
	out := readJSON(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, out)
	}
	// 12 × 3 + 2000 × 0.30 + 100 × 3.75 + 6 × 15 = 1101 € per million
	// tokens of this call's mix, 1,101,000 nano-euros.
	u := usageOf(t, g, "")
	if u["eur_per_month"].Committed != 1_101_000 || u["tokens_per_day"].Committed != 2118 {
		t.Fatalf("committed %d nano-euros, %d tokens; want 1101000, 2118", u["eur_per_month"].Committed, u["tokens_per_day"].Committed)
	}
	if claude.requests()[0].Body["max_tokens"] != float64(64000) {
		t.Errorf("max_output_tokens not sent as max_tokens: %v", claude.requests()[0].Body)
	}

	resp = send(t, g, "POST", "/v1/chat/completions", strings.NewReader(`{"model":"agentx","messages":[{"role":"user","content":"Weather in Paris?"}]}`),
		map[string]string{"Authorization": "Bearer sk-test-agents", "Content-Type": "application/json"})
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "sunny in Paris") {
		t.Fatalf("agent: %d %s", resp.StatusCode, body)
	}
	g.stop()
	g.wait(t, 10*time.Second)
	lines := auditLines(t, c.AuditPath)
	if l := lines[0]; l["input_tokens"] != 2112.0 || l["cache_read_tokens"] != 2000.0 || l["cache_write_tokens"] != 100.0 || l["output_tokens"] != 6.0 {
		t.Errorf("anthropic audit line %v", l)
	}
	if l := lines[1]; l["backend"] != "agentx" || l["usage_estimated"] != true || !strings.HasPrefix(l["cost_eur"].(string), "0.0020") {
		t.Errorf("agent audit line %v: per_call 0.002 € plus estimated tokens at no token price", l)
	}
}

// TestInexpressibleRequestSkipsToAnotherKind: n = 2 cannot be sent to an
// Anthropic backend; with an openai fallback the plan skips to it before
// anything is sent, without one the caller gets 400 naming n and nothing
// is sent or reserved.
func TestInexpressibleRequestSkipsToAnotherKind(t *testing.T) {
	claude := wireUpstream(t, "anthropic", wireFixture(t, "anthropic", "decode/text.json"), "")
	plain := statusUpstream(t, 200, completion)
	a := wireBackend("claude", "anthropic", claude.URL, "m-large")
	a.Fallback = "[main]"
	cfg, _ := wireConfig(t, a, baseBackend("main", plain.URL))
	g := startGateway(t, cfg)
	resp := post(t, g, "/v1/chat/completions", `{"model":"m-large","n":2,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	out := readJSON(t, resp)
	if resp.StatusCode != 200 || len(claude.requests()) != 0 || len(plain.requests()) != 1 {
		t.Fatalf("%d %v; anthropic saw %d, openai %d", resp.StatusCode, out, len(claude.requests()), len(plain.requests()))
	}

	cfg, _ = wireConfig(t, wireBackend("claude", "anthropic", claude.URL, "m-large"))
	g = startGateway(t, cfg)
	resp = post(t, g, "/v1/chat/completions", `{"model":"m-large","n":2,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	out = readJSON(t, resp)
	e, _ := out["error"].(map[string]any)
	if resp.StatusCode != 400 || e["param"] != "n" || len(claude.requests()) != 0 {
		t.Fatalf("%d %v; anthropic saw %d", resp.StatusCode, out, len(claude.requests()))
	}
}

// TestGRPCStreamToAnthropic: a gRPC flexway.v1 caller, whose request says
// nothing of stream, streams from an Anthropic backend: the Messages call
// is sent with stream: true and the events come back as chunks, the usage
// counting cached input.
func TestGRPCStreamToAnthropic(t *testing.T) {
	up := wireUpstream(t, "anthropic", "", wireFixture(t, "anthropic", "stream/text.sse"))
	cfg, _ := wireConfig(t, wireBackend("w", "anthropic", up.URL, "claude-sonnet-4-5"))
	g := startGateway(t, cfg)
	include := true
	stream, err := flexwayv1.NewChatServiceClient(grpcConn(t, g)).StreamChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
		Model: "claude-sonnet-4-5", Messages: []*flexwayv1.ChatMessage{userMessage("hi")}, StreamOptions: &flexwayv1.StreamOptions{IncludeUsage: &include}})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	var prompt int64
	for {
		ch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %q: %v", text.String(), err)
		}
		prompt = max(prompt, ch.GetUsage().GetPromptTokens())
		for _, c := range ch.GetChoices() {
			text.WriteString(c.GetDelta().GetText())
		}
	}
	if text.String() != "Hello!\n\"é\"" || prompt != 335 {
		t.Errorf("text %q prompt_tokens %d", text.String(), prompt)
	}
	if up.requests()[0].Body["stream"] != true {
		t.Errorf("the Messages call must stream: %v", up.requests()[0].Body)
	}
}
