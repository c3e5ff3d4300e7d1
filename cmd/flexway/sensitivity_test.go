package main

import (
	"fmt"
	"strings"
	"testing"
)

// sensitiveConfig has an external default backend and an internal one
// pinned for sensitive calls; tenant "globex" is sensitive by
// configuration, agent "acme/vault" too.
func sensitiveConfig(t *testing.T, external, internal string, pin bool) string {
	pinLine := ""
	if pin {
		pinLine = "  sensitive_backend: internal\n"
	}
	return fmt.Sprintf(`
server: {http: %s, grpc: %s}
identity:
  api_keys:
    - {name: acme-bot, key: env:FLEXWAY_TEST_KEY, tenant: acme, agent: bot}
    - {name: acme-vault, key: env:FLEXWAY_TEST_KEY_2, tenant: acme, agent: vault}
    - {name: globex, key: env:FLEXWAY_TEST_KEY_3, tenant: globex}
ai:
  backend: external
%s  tenants:
    globex: {sensitive: true}
    acme:
      agents:
        vault: {sensitive: true}
  backends:
    external:
      url: %s/v1
      models: [m-large]
      default_model: m-large
    internal:
      url: %s/v1
      external: false
      models: [m-local]
      default_model: m-local
audit: {path: audit.jsonl, hash_key: env:FLEXWAY_TEST_KEY}
`, "127.0.0.1:0", "localhost:0", pinLine, external, internal)
}

func TestSensitiveCallsStayInternal(t *testing.T) {
	ext := newUpstream(t, jsonHandler(200, completion))
	in := newUpstream(t, jsonHandler(200, strings.Replace(completion, "Hello from upstream", "Hello from inside", 1)))
	t.Setenv("FLEXWAY_TEST_KEY_2", "sk-test-vault")
	t.Setenv("FLEXWAY_TEST_KEY_3", "sk-test-globex")
	g := startGateway(t, sensitiveConfig(t, ext.URL, in.URL, true))
	tests := []struct {
		name, key, header string
		wantInternal      bool
	}{
		{name: "plain call goes to the default", key: demoKey},
		{name: "header true", key: demoKey, header: "true", wantInternal: true},
		{name: "header 1", key: demoKey, header: "1", wantInternal: true},
		{name: "header false is no flag", key: demoKey, header: "false"},
		{name: "sensitive tenant", key: "sk-test-globex", wantInternal: true},
		{name: "sensitive tenant cannot be unflagged", key: "sk-test-globex", header: "false", wantInternal: true},
		{name: "sensitive agent", key: "sk-test-vault", wantInternal: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, beforeIn := len(ext.requests()), len(in.requests())
			h := map[string]string{"Authorization": "Bearer " + tt.key, "Content-Type": "application/json"}
			if tt.header != "" {
				h["Flexway-Sensitive"] = tt.header
			}
			resp := send(t, g, "POST", "/v1/chat/completions", strings.NewReader(`{"model":"m-large","messages":[{"role":"user","content":"hi"}]}`), h)
			body := readJSON(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %v", resp.StatusCode, body)
			}
			gotIn := len(in.requests()) - beforeIn
			gotExt := len(ext.requests()) - before
			if tt.wantInternal && (gotIn != 1 || gotExt != 0) || !tt.wantInternal && (gotIn != 0 || gotExt != 1) {
				t.Fatalf("internal got %d calls, external %d; want internal=%v", gotIn, gotExt, tt.wantInternal)
			}
			if tt.wantInternal && in.requests()[len(in.requests())-1].Body["model"] != "m-local" {
				t.Fatalf("internal backend got model %v", in.requests()[len(in.requests())-1].Body["model"])
			}
		})
	}
}

func TestSensitiveWithoutInternalBackendRefused(t *testing.T) {
	ext := newUpstream(t, jsonHandler(200, completion))
	in := newUpstream(t, jsonHandler(200, completion))
	t.Setenv("FLEXWAY_TEST_KEY_2", "sk-test-vault")
	t.Setenv("FLEXWAY_TEST_KEY_3", "sk-test-globex")
	g := startGateway(t, sensitiveConfig(t, ext.URL, in.URL, false))
	h := map[string]string{"Authorization": "Bearer " + demoKey, "Flexway-Sensitive": "1"}
	resp := send(t, g, "POST", "/v1/chat/completions", strings.NewReader(`{"model":"m-large","messages":[{"role":"user","content":"hi"}]}`), h)
	body := readJSON(t, resp)
	e, _ := body["error"].(map[string]any)
	if resp.StatusCode != 403 || e["code"] != "sensitive_no_internal_backend" {
		t.Fatalf("status %d body %v", resp.StatusCode, body)
	}
	if len(ext.requests())+len(in.requests()) != 0 {
		t.Fatal("a refused sensitive call reached a backend")
	}
}
