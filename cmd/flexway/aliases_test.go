package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// modelEcho is an openai upstream answering with the model it was sent,
// or status when the model is fail.
func modelEcho(t *testing.T) *fakeUpstream {
	return newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Model string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		if body.Model == "fail" {
			jsonHandler(503, `{"error":{"message":"down"}}`)(w, r)
			return
		}
		jsonHandler(200, strings.Replace(completion, `"model":"m-large"`, `"model":"`+body.Model+`"`, 1))(w, r)
	})
}

// aliasGateway starts a gateway with backends main and spare (each a
// modelEcho, m-large and m-small listed) and the aliases in yaml (lines
// under ai.aliases, four spaces in); tenant globex is routed to spare.
func aliasGateway(t *testing.T, aliases string) (*testGW, *fakeUpstream, *fakeUpstream, string) {
	main, spare := modelEcho(t), modelEcho(t)
	c := baseTestConfig(main.URL)
	c.Backends = append(c.Backends, baseBackend("spare", spare.URL))
	c.Keys = append(c.Keys, testKey{Name: "globex", Env: "FLEXWAY_TEST_GLOBEX_KEY", Tenant: "globex"})
	t.Setenv("FLEXWAY_TEST_GLOBEX_KEY", "sk-test-globex")
	c.Tenants = []testTenant{{Name: "acme", Agents: []testAgent{{Name: "bot"}}}, {Name: "globex", Backend: "spare"}}
	c.AI = "  aliases:\n" + aliases
	c.AuditPath = filepath.Join(t.TempDir(), "audit.jsonl")
	return startGateway(t, c.yaml()), main, spare, c.AuditPath
}

// modelSent is the model the upstream u was last sent.
func modelSent(u *fakeUpstream) any {
	r := u.requests()
	if len(r) == 0 {
		return nil
	}
	return r[len(r)-1].Body["model"]
}

// TestFailoverAlias: model "fast" is a failover alias; its first target
// fails, the second serves with its model id sent as is (no models
// mapping), and the answer, the audit line and Flexway-Route say which
// target served.
func TestFailoverAlias(t *testing.T) {
	g, main, spare, audit := aliasGateway(t, "    fast:\n      strategy: failover\n      targets:\n        - {backend: main, model: fail}\n        - {backend: spare, model: tiny-1}\n")
	resp := post(t, g, "/v1/chat/completions", `{"model":"fast","messages":[{"role":"user","content":"hi"}]}`)
	out := readJSON(t, resp)
	if resp.StatusCode != 200 || resp.Header.Get("Flexway-Route") != "fast/1" || resp.Header.Get("Flexway-Degraded") != "backend-fallback" {
		t.Fatalf("%d route %q degraded %q: %v", resp.StatusCode, resp.Header.Get("Flexway-Route"), resp.Header.Get("Flexway-Degraded"), out)
	}
	if modelSent(main) != "fail" || modelSent(spare) != "tiny-1" || out["model"] != "tiny-1" {
		t.Errorf("models sent %v, %v; served %v", modelSent(main), modelSent(spare), out["model"])
	}
	// A model that names no alias is routed as before.
	resp = post(t, g, "/v1/chat/completions", `{"model":"m-large","messages":[{"role":"user","content":"hi"}]}`)
	io.Copy(io.Discard, resp.Body)
	if resp.Header.Get("Flexway-Route") != "" || modelSent(main) != "m-large" {
		t.Errorf("no alias: route %q, model %v", resp.Header.Get("Flexway-Route"), modelSent(main))
	}
	// Calls reach the metrics with their audit line, batched: wait.
	var metrics []byte
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		metrics, _ = io.ReadAll(send(t, g, "GET", "/metrics", nil, nil).Body)
		if strings.Contains(string(metrics), `alias="fast"`) {
			break
		}
	}
	if !strings.Contains(string(metrics), `alias="fast"`) || !strings.Contains(string(metrics), `arm="1"`) {
		t.Errorf("no alias and arm labels in /metrics")
	}
	g.stop()
	g.wait(t, 10*time.Second)
	l := auditLines(t, audit)[0]
	if l["alias"] != "fast" || l["arm"] != "1" || l["backend"] != "spare" || l["model_requested"] != "fast" {
		t.Errorf("audit line %v", l)
	}
}

// TestAliasArms: a canary target of weight 0 is never drawn; an A/B
// alias sticky on the agent gives the same arm to every call; a tenant's
// backend override replaces the alias's route; /v1/models lists aliases.
func TestAliasArms(t *testing.T) {
	g, _, spare, _ := aliasGateway(t, "    smart:\n      strategy: canary\n      targets:\n        - {backend: main, model: big-1, weight: 100, arm: stable}\n        - {backend: spare, model: new-1, weight: 0, arm: off}\n"+
		"    rev:\n      strategy: ab\n      sticky: agent\n      targets:\n        - {backend: main, model: a-1, weight: 50, arm: control}\n        - {backend: spare, model: b-1, weight: 50, arm: candidate}\n")
	for range 20 {
		resp := post(t, g, "/v1/chat/completions", `{"model":"smart","messages":[{"role":"user","content":"hi"}]}`)
		io.Copy(io.Discard, resp.Body)
		if r := resp.Header.Get("Flexway-Route"); r != "smart/stable" {
			t.Fatalf("route %q: a weight-0 arm was drawn", r)
		}
	}
	if len(spare.requests()) != 0 {
		t.Fatalf("the weight-0 target got %d calls", len(spare.requests()))
	}
	first := ""
	for range 10 {
		resp := post(t, g, "/v1/chat/completions", `{"model":"rev","messages":[{"role":"user","content":"hi"}]}`)
		io.Copy(io.Discard, resp.Body)
		r := resp.Header.Get("Flexway-Route")
		if first == "" {
			first = r
		}
		if r != first || !strings.HasPrefix(r, "rev/") {
			t.Fatalf("A/B arm moved: %q then %q", first, r)
		}
	}
	resp := send(t, g, "POST", "/v1/chat/completions", strings.NewReader(`{"model":"smart","messages":[{"role":"user","content":"hi"}]}`),
		map[string]string{"Authorization": "Bearer sk-test-globex", "Content-Type": "application/json"})
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Flexway-Route") != "" || modelSent(spare) != "m-small" {
		t.Errorf("override: %d route %q model %v; the tenant's backend maps the name by its own models", resp.StatusCode, resp.Header.Get("Flexway-Route"), modelSent(spare))
	}
	models := readJSON(t, send(t, g, "GET", "/v1/models", nil, nil))
	var ids []string
	for _, m := range models["data"].([]any) {
		ids = append(ids, m.(map[string]any)["id"].(string))
	}
	if got := strings.Join(ids, ","); !strings.Contains(got, "rev") || !strings.Contains(got, "smart") {
		t.Errorf("models %s: aliases must be listed", got)
	}
}

// TestClassifierAlias: a low score takes the below target; a scorer
// that hangs costs at most its timeout and the call goes above.
func TestClassifierAlias(t *testing.T) {
	var hang atomic.Bool
	scorer := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			time.Sleep(800 * time.Millisecond)
		}
		jsonHandler(200, `{"score":0.1}`)(w, r)
	})
	g, main, spare, _ := aliasGateway(t, "    triage:\n      strategy: classifier\n      classifier: {url: "+scorer.URL+"/score, external: false, timeout: 200ms, threshold: 0.5}\n"+
		"      below: {backend: spare, model: small-1}\n      above: {backend: main, model: large-1}\n")
	resp := post(t, g, "/v1/chat/completions", `{"model":"triage","messages":[{"role":"user","content":"easy question"}]}`)
	io.Copy(io.Discard, resp.Body)
	if resp.Header.Get("Flexway-Route") != "triage/below" || modelSent(spare) != "small-1" {
		t.Fatalf("route %q, model %v", resp.Header.Get("Flexway-Route"), modelSent(spare))
	}
	if b := scorer.requests()[0].Body; b["text"] != "easy question" {
		t.Errorf("scorer got %v", b)
	}
	hang.Store(true)
	start := time.Now()
	resp = post(t, g, "/v1/chat/completions", `{"model":"triage","messages":[{"role":"user","content":"hard question"}]}`)
	io.Copy(io.Discard, resp.Body)
	if took := time.Since(start); resp.Header.Get("Flexway-Route") != "triage/above" || modelSent(main) != "large-1" || took > 1500*time.Millisecond {
		t.Errorf("route %q, model %v, took %v", resp.Header.Get("Flexway-Route"), modelSent(main), took)
	}
}
