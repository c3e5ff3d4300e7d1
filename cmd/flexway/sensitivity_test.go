package main

import (
	"strings"
	"testing"
)

// sensitiveConfig has an external default backend and an internal one
// pinned for sensitive calls; tenant "globex" is sensitive by
// configuration, agent "acme/vault" too.
func sensitiveConfig(t *testing.T, external, internal string, pin bool) string {
	c := testConfig{
		Keys: []testKey{acmeBot,
			{Name: "acme-vault", Env: "FLEXWAY_TEST_KEY_2", Tenant: "acme", Agent: "vault"},
			{Name: "globex", Env: "FLEXWAY_TEST_KEY_3", Tenant: "globex"}},
		Backend: "external",
		Tenants: []testTenant{{Name: "globex", Sensitive: true},
			{Name: "acme", Agents: []testAgent{{Name: "vault", Sensitive: true}}}},
		Backends: []testBackend{
			{Name: "external", URL: external + "/v1", Models: []string{"m-large"}, DefaultModel: "m-large"},
			{Name: "internal", URL: internal + "/v1", Internal: true, Models: []string{"m-local"}, DefaultModel: "m-local"},
		},
		AuditPath: "audit.jsonl",
	}
	if pin {
		c.SensitiveBackend = "internal"
	}
	return c.yaml()
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
