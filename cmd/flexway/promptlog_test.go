package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// promptLogMarker is in every prompt of the prompt-log tests: it must
// reach the prompt log and nothing else.
const promptLogMarker = "PLOG-MARKER-5521"

// promptLogUpstream answers chat calls with "one two three" (streamed
// as "one", " two", " three" when asked to stream) and embeddings with a
// vector.
func promptLogUpstream(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/embeddings") {
		jsonHandler(200, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.25,0.5]}],"model":"m-large","usage":{"prompt_tokens":3,"total_tokens":3}}`)(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	if strings.Contains(string(body), `"stream":true`) {
		sseUpstream(
			chunk(`[{"index":0,"delta":{"role":"assistant","content":"one"}}]`, ""),
			chunk(`[{"index":0,"delta":{"content":" two"}}]`, ""),
			chunk(`[{"index":0,"delta":{"content":" three"},"finish_reason":"stop"}]`, ""),
			chunk(`[]`, `{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}`),
		)(w, r)
		return
	}
	usageUpstream(5, 3)(w, r)
}

// promptLogGateway runs a gateway whose policies log acme's calls to
// dir/acme.jsonl, turn it off for acme/quiet, log the sensitive
// acme/vault (include_sensitive) to dir/vault.jsonl, and govern globex
// without logging; acme/secret is sensitive and only acme-log applies.
// It returns the audit path and the gateway's log.
func promptLogGateway(t *testing.T, dir string) (*testGW, string, *syncBuffer) {
	t.Helper()
	up := newUpstream(t, promptLogUpstream)
	for env, key := range map[string]string{"FLEXWAY_TEST_KEY_VAULT": "sk-test-vault", "FLEXWAY_TEST_KEY_QUIET": "sk-test-quiet",
		"FLEXWAY_TEST_KEY_SECRET": "sk-test-secret", "FLEXWAY_TEST_KEY_GLOBEX": "sk-test-globex"} {
		t.Setenv(env, key)
	}
	c := baseTestConfig(up.URL)
	c.AuditPath = filepath.Join(dir, "audit.jsonl")
	c.Backends[0].Internal = true // sensitive calls are served too
	c.Keys = append(c.Keys,
		testKey{Name: "acme-vault", Env: "FLEXWAY_TEST_KEY_VAULT", Tenant: "acme", Agent: "vault"},
		testKey{Name: "acme-quiet", Env: "FLEXWAY_TEST_KEY_QUIET", Tenant: "acme", Agent: "quiet"},
		testKey{Name: "acme-secret", Env: "FLEXWAY_TEST_KEY_SECRET", Tenant: "acme", Agent: "secret"},
		testKey{Name: "globex", Env: "FLEXWAY_TEST_KEY_GLOBEX", Tenant: "globex"})
	c.Tenants = []testTenant{{Name: "acme", Agents: []testAgent{{Name: "bot"}, {Name: "vault", Sensitive: true}, {Name: "quiet"},
		{Name: "secret", Sensitive: true}}}, {Name: "globex"}}
	c.AI = fmt.Sprintf(`  policies:
    - name: acme-log
      match: {tenant: acme}
      prompt_logging: {enabled: true, path: %s}
    - name: quiet-off
      match: {tenant: acme, agent: quiet}
      prompt_logging: {enabled: false}
    - name: vault-log
      match: {tenant: acme, agent: vault}
      prompt_logging: {enabled: true, path: %s, include_sensitive: true}
    - name: globex-governed
      match: {tenant: globex}
      governance: {models: ["*"]}
`, filepath.Join(dir, "acme.jsonl"), filepath.Join(dir, "vault.jsonl"))
	var stderr syncBuffer
	return startGatewayLog(t, c.yaml(), &stderr), c.AuditPath, &stderr
}

// promptLogLines reads a prompt log file, by request id.
func promptLogLines(t *testing.T, path string) map[string]map[string]json.RawMessage {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]json.RawMessage{}
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("prompt log line %q: %v", l, err)
		}
		var id string
		_ = json.Unmarshal(m["request_id"], &id)
		out[id] = m
	}
	return out
}

// TestPromptLogOnlyWherePolicyTurnsItOn: the policy with prompt_logging
// gets its file (0600), with one line per logged call holding the exact
// fields: a unary call's messages as sent upstream and answer, a
// stream's concatenated content, an embeddings call's input and a null
// answer. A sensitive call is logged only under include_sensitive; a
// more specific policy with enabled: false turns it off; the policy
// without prompt_logging logs nothing anywhere; the audit line holds no
// prompt text, nor does the gateway's log; /metrics has the dropped and
// failed counters of each file, labelled by policy.
func TestPromptLogOnlyWherePolicyTurnsItOn(t *testing.T) {
	dir := t.TempDir()
	g, auditPath, stderr := promptLogGateway(t, dir)
	before := time.Now().UTC()
	chat := `{"model":"m-large","max_tokens":10,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"say three words ` + promptLogMarker + `"}]}`
	streamed := `{"model":"m-large","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"stream ` + promptLogMarker + `"}]}`
	calls := []struct {
		id, key, path, body string
		header              map[string]string
	}{
		{id: "req-unary", key: demoKey, path: "/v1/chat/completions", body: chat},
		{id: "req-stream", key: demoKey, path: "/v1/chat/completions", body: streamed},
		{id: "req-embed", key: demoKey, path: "/v1/embeddings", body: `{"model":"m-large","input":"embed ` + promptLogMarker + `"}`},
		{id: "req-secret", key: "sk-test-secret", path: "/v1/chat/completions", body: chat},
		{id: "req-quiet", key: "sk-test-quiet", path: "/v1/chat/completions", body: chat},
		{id: "req-vault", key: "sk-test-vault", path: "/v1/chat/completions", body: chat},
		{id: "req-globex", key: "sk-test-globex", path: "/v1/chat/completions", body: chat},
	}
	for _, c := range calls {
		resp := send(t, g, "POST", c.path, strings.NewReader(c.body), map[string]string{"Authorization": "Bearer " + c.key, "X-Request-Id": c.id})
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.id, resp.StatusCode, raw)
		}
		if c.id == "req-stream" && !strings.Contains(string(raw), "[DONE]") {
			t.Fatalf("stream did not end: %s", raw)
		}
	}
	metrics, _ := io.ReadAll(send(t, g, "GET", "/metrics", nil, map[string]string{"Authorization": ""}).Body)
	for _, want := range []string{
		`flexway_prompt_log_dropped_total{policy="acme-log"} 0`, `flexway_prompt_log_failed_total{policy="acme-log"} 0`,
		`flexway_prompt_log_dropped_total{policy="vault-log"} 0`, `flexway_prompt_log_failed_total{policy="vault-log"} 0`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(metrics), promptLogMarker) {
		t.Error("/metrics holds prompt text")
	}
	g.stop()
	g.wait(t, 10*time.Second)

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, ","); got != "acme.jsonl,audit.jsonl,vault.jsonl" {
		t.Errorf("files = %s, want the two logging policies' and the audit", got)
	}
	for _, f := range []string{"acme.jsonl", "vault.jsonl"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %v, want 0600", f, st.Mode().Perm())
		}
	}

	acme := promptLogLines(t, filepath.Join(dir, "acme.jsonl"))
	if len(acme) != 3 {
		t.Errorf("acme.jsonl has %d lines (%v), want the unary, stream and embeddings calls of acme/bot", len(acme), keys(acme))
	}
	wantMessages := `[{"role":"system","content":"be brief"},{"role":"user","content":"say three words ` + promptLogMarker + `"}]`
	want := map[string]map[string]string{
		"req-unary": {"request_id": `"req-unary"`, "tenant": `"acme"`, "agent": `"bot"`, "model": `"m-large"`,
			"messages": wantMessages, "answer": `"one two three"`},
		"req-stream": {"request_id": `"req-stream"`, "tenant": `"acme"`, "agent": `"bot"`, "model": `"m-large"`,
			"messages": `[{"role":"user","content":"stream ` + promptLogMarker + `"}]`, "answer": `"one two three"`},
		"req-embed": {"request_id": `"req-embed"`, "tenant": `"acme"`, "agent": `"bot"`, "model": `"m-large"`,
			"messages": `["embed ` + promptLogMarker + `"]`, "answer": `null`},
	}
	for id, fields := range want {
		line, ok := acme[id]
		if !ok {
			t.Errorf("%s not in acme.jsonl", id)
			continue
		}
		if len(line) != 7 {
			t.Errorf("%s has fields %v, want time, request_id, tenant, agent, model, messages, answer", id, keys(line))
		}
		for k, v := range fields {
			if string(line[k]) != v {
				t.Errorf("%s: %s = %s, want %s", id, k, line[k], v)
			}
		}
		var at time.Time
		if err := json.Unmarshal(line["time"], &at); err != nil || at.Before(before.Add(-time.Second)) || at.After(time.Now()) || at.Location() != time.UTC {
			t.Errorf("%s: time = %s (%v), want the call's start, in UTC", id, line["time"], err)
		}
	}
	vault := promptLogLines(t, filepath.Join(dir, "vault.jsonl"))
	if v, ok := vault["req-vault"]; len(vault) != 1 || !ok || string(v["agent"]) != `"vault"` || string(v["messages"]) != wantMessages {
		t.Errorf("vault.jsonl = %v, want the sensitive vault call alone (include_sensitive)", vault)
	}

	audit, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(audit), "\n"); n != len(calls) {
		t.Errorf("%d audit lines, want %d", n, len(calls))
	}
	if strings.Contains(string(audit), promptLogMarker) || strings.Contains(string(audit), "one two three") {
		t.Errorf("the audit holds prompt or answer text:\n%s", audit)
	}
	if strings.Contains(stderr.String(), promptLogMarker) {
		t.Errorf("the log holds prompt text:\n%s", stderr)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestPromptLogGRPC: calls on the gRPC listener are logged the same way:
// a unary call's answer and a stream's concatenated content, with the
// request id the caller sent.
func TestPromptLogGRPC(t *testing.T) {
	dir := t.TempDir()
	g, _, _ := promptLogGateway(t, dir)
	client := flexwayv1.NewChatServiceClient(grpcConn(t, g))
	req := &flexwayv1.CreateChatCompletionRequest{Model: "m-large", Messages: []*flexwayv1.ChatMessage{userMessage("grpc " + promptLogMarker)}}
	ctx := metadata.AppendToOutgoingContext(withKey(t, demoKey), "x-request-id", "grpc-unary")
	if _, err := client.CreateChatCompletion(ctx, req); err != nil {
		t.Fatal(err)
	}
	ctx = metadata.AppendToOutgoingContext(withKey(t, demoKey), "x-request-id", "grpc-stream")
	s, err := client.StreamChatCompletion(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	g.stop()
	g.wait(t, 10*time.Second)
	lines := promptLogLines(t, filepath.Join(dir, "acme.jsonl"))
	for _, id := range []string{"grpc-unary", "grpc-stream"} {
		l := lines[id]
		if string(l["answer"]) != `"one two three"` || string(l["messages"]) != `[{"role":"user","content":"grpc `+promptLogMarker+`"}]` {
			t.Errorf("%s: %v", id, l)
		}
	}
	if len(lines) != 2 {
		t.Errorf("%d lines, want 2: %v", len(lines), keys(lines))
	}
}
