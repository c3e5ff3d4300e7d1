package main

import (
	"encoding/json"
	"errors"
	"io"
	stdmaps "maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// Keys of the governance tests' tenants, beside demoKey (acme, bot).
const (
	govGlobexKey  = "sk-test-globex"
	govInitechKey = "sk-test-initech"
	govHooliKey   = "sk-test-hooli"
)

// govPolicies are the governance tests' ai.policies: everyone may call
// every model; acme only fast and m-small, on cheap and onprem; globex's
// allowlist is a dry run; initech may call nothing over gRPC; hooli may
// only be served by spare, which none of its plans holds; globex's
// backend allowlist (spare) is a dry run too.
const govPolicies = `  aliases:
    fast:
      strategy: failover
      targets:
        - {backend: main, model: m-large}
        - {backend: onprem, model: m-small}
  policies:
    - name: everyone
      governance: {models: ["*"]}
    - name: acme-governed
      match: {tenant: acme}
      governance:
        models: [fast, m-small]
        backends: [cheap, onprem]
    - name: globex-dry-run
      match: {tenant: globex}
      governance: {models: [m-small], mode: shadow}
    - name: globex-spare-dry-run
      match: {tenant: globex}
      governance: {backends: [spare], mode: shadow}
    - name: initech-grpc-none
      match: {listener: grpc, tenant: initech}
      governance: {models: []}
    - name: hooli-spare-only
      match: {tenant: hooli}
      governance: {backends: [spare]}
`

// govGateway is a gateway over four backends, each its own fake upstream
// answering with usage: main (external, falling back to cheap then
// onprem), cheap (external), onprem (internal) and spare; a ledger with a
// daily cap, the admin key, the audit at the returned path, and
// govPolicies.
func govGateway(t *testing.T, cheap http.HandlerFunc) (g *testGW, ups map[string]*fakeUpstream, audit string) {
	t.Helper()
	t.Setenv("FLEXWAY_TEST_ADMIN_KEY", testAdminKey)
	for env, key := range map[string]string{"FLEXWAY_TEST_KEY_GLOBEX": govGlobexKey, "FLEXWAY_TEST_KEY_INITECH": govInitechKey, "FLEXWAY_TEST_KEY_HOOLI": govHooliKey} {
		t.Setenv(env, key)
	}
	if cheap == nil {
		cheap = usageUpstream(7, 3)
	}
	ups = map[string]*fakeUpstream{
		"main": newUpstream(t, usageUpstream(7, 3)), "cheap": newUpstream(t, cheap),
		"onprem": newUpstream(t, usageUpstream(7, 3)), "spare": newUpstream(t, usageUpstream(7, 3)),
	}
	audit = filepath.Join(t.TempDir(), "audit.jsonl")
	c := baseTestConfig(ups["main"].URL)
	c.AdminKey, c.AuditPath = true, audit
	c.Budget = "    default: {tokens_per_day: 100000}"
	c.Keys = append(c.Keys,
		testKey{Name: "globex-app", Env: "FLEXWAY_TEST_KEY_GLOBEX", Tenant: "globex"},
		testKey{Name: "initech-app", Env: "FLEXWAY_TEST_KEY_INITECH", Tenant: "initech"},
		testKey{Name: "hooli-app", Env: "FLEXWAY_TEST_KEY_HOOLI", Tenant: "hooli"})
	c.Tenants = []testTenant{{Name: "acme", Agents: []testAgent{{Name: "bot"}}}, {Name: "globex"}, {Name: "initech"}, {Name: "hooli"}}
	backend := func(name string, internal bool, fallback string) testBackend {
		b := baseBackend(name, ups[name].URL)
		b.Internal, b.Fallback, b.Price = internal, fallback, &[2]float64{1, 2}
		return b
	}
	c.Backends = []testBackend{backend("main", false, "[cheap, onprem]"), backend("cheap", false, ""), backend("onprem", true, ""), backend("spare", false, "")}
	c.AI = govPolicies
	return startGateway(t, c.yaml()), ups, audit
}

// chatAs posts a chat call naming model with key.
func chatAs(t *testing.T, g *testGW, key, model string) (int, map[string]any) {
	t.Helper()
	resp := send(t, g, "POST", "/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`),
		map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json"})
	return resp.StatusCode, readJSON(t, resp)
}

// openaiError is the error object of an OpenAI envelope.
func openaiError(body map[string]any) map[string]any {
	e, _ := body["error"].(map[string]any)
	return e
}

// grpcReason is a gRPC error's code, ErrorInfo reason and param.
func grpcReason(err error) (codes.Code, string, string, string) {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if d, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), d.GetReason(), d.GetMetadata()["param"], st.Message()
		}
	}
	return st.Code(), "", "", st.Message()
}

// tenantUsage is the committed and reserved tokens of a tenant's daily cap
// (admin usage endpoint).
func tenantUsage(t *testing.T, g *testGW, tenant string) (committed, reserved string) {
	t.Helper()
	resp := send(t, g, "GET", "/flexway/v1/tenants/"+tenant+"/usage", nil, map[string]string{"Authorization": "Bearer " + testAdminKey})
	raw, _ := io.ReadAll(resp.Body)
	var body struct {
		Caps []struct{ Cap, Committed, Reserved string }
	}
	if err := json.Unmarshal(raw, &body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("usage of %s: %d %s", tenant, resp.StatusCode, raw)
	}
	for _, c := range body.Caps {
		if c.Cap == "tokens_per_day" {
			return c.Committed, c.Reserved
		}
	}
	t.Fatalf("usage of %s has no tokens_per_day: %s", tenant, raw)
	return "", ""
}

// served is how many requests each upstream received.
func served(ups map[string]*fakeUpstream) map[string]int {
	out := map[string]int{}
	for n, u := range ups {
		out[n] = len(u.requests())
	}
	return out
}

// TestGovernanceModelNotAllowed: a model acme's policy does not list is
// refused with 403 model_not_allowed in the OpenAI envelope (param model,
// the policy named), over curl-like HTTP, the official SDK and gRPC
// (PERMISSION_DENIED with the ErrorInfo reason); nothing reaches an
// upstream, nothing is reserved or committed, and the refusal is
// audited.
func TestGovernanceModelNotAllowed(t *testing.T) {
	g, ups, audit := govGateway(t, nil)

	code, body := chatAs(t, g, demoKey, "m-large")
	e := openaiError(body)
	if code != 403 || e["code"] != "model_not_allowed" || e["param"] != "model" || e["type"] != "permission_error" ||
		e["message"] != `model "m-large" is not allowed for this caller by policy "acme-governed"` {
		t.Fatalf("HTTP: %d %v", code, body)
	}

	sdk := sdkClient(g, demoKey)
	_, err := sdk.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model: "m-large", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 403 || oe.Code != "model_not_allowed" || oe.Param != "model" || !strings.Contains(oe.Message, `"acme-governed"`) {
		t.Fatalf("SDK: %v", err)
	}

	client := flexwayv1.NewChatServiceClient(grpcConn(t, g))
	_, err = client.CreateChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{Model: "m-large", Messages: []*flexwayv1.ChatMessage{userMessage("hi")}})
	if c, reason, param, msg := grpcReason(err); c != codes.PermissionDenied || reason != "model_not_allowed" || param != "model" || !strings.Contains(msg, `"acme-governed"`) {
		t.Fatalf("gRPC: %v (%s %s %s)", err, c, reason, param)
	}
	stream, err := client.StreamChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{Model: "m-large", Messages: []*flexwayv1.ChatMessage{userMessage("hi")}})
	if err == nil {
		_, err = stream.Recv()
	}
	if c, reason, _, _ := grpcReason(err); c != codes.PermissionDenied || reason != "model_not_allowed" {
		t.Fatalf("gRPC stream: %v", err)
	}

	if n := served(ups); n["main"]+n["cheap"]+n["onprem"]+n["spare"] != 0 {
		t.Fatalf("a refused call reached an upstream: %v", n)
	}
	if committed, reserved := tenantUsage(t, g, "acme"); committed != "0" || reserved != "0" {
		t.Fatalf("a refused call changed the usage: committed %s reserved %s", committed, reserved)
	}
	g.stop()
	_ = g.wait(t, 10*time.Second)
	lines := auditLines(t, audit)
	if len(lines) != 4 {
		t.Fatalf("%d audit lines, want 4", len(lines))
	}
	for _, l := range lines {
		if l["outcome"] != "refused" || l["status"] != 403.0 || l["would_deny"] != nil {
			t.Errorf("audit line %v", l)
		}
	}
}

// TestGovernanceShadow: globex's dry-run allowlists refuse nothing: the
// calls are served (200) on main, their audit lines say would_deny with
// the policy and the reason (the model rule's first, then the backend
// rule's for a listed model), and flexway_policy_would_deny_total counts
// each.
func TestGovernanceShadow(t *testing.T) {
	g, ups, audit := govGateway(t, nil)
	if code, body := chatAs(t, g, govGlobexKey, "m-large"); code != 200 {
		t.Fatalf("shadow refused: %d %v", code, body)
	}
	if code, body := chatAs(t, g, govGlobexKey, "m-small"); code != 200 {
		t.Fatalf("%d %v", code, body)
	}
	if n := served(ups); n["main"] != 2 {
		t.Fatalf("served %v, want both calls on main", n)
	}
	wantMetrics(t, g,
		`flexway_policy_would_deny_total{policy="globex-dry-run",reason="model_not_allowed"} 1`,
		`flexway_policy_would_deny_total{policy="globex-spare-dry-run",reason="backend_not_allowed"} 1`)
	lines := stoppedAudit(t, g, audit)
	if len(lines) != 2 {
		t.Fatalf("%d audit lines", len(lines))
	}
	wd, _ := lines[0]["would_deny"].(map[string]any)
	if lines[0]["outcome"] != "ok" || wd["policy"] != "globex-dry-run" || wd["reason"] != "model_not_allowed" || len(wd) != 2 {
		t.Errorf("shadowed call's line: %v", lines[0])
	}
	wd, _ = lines[1]["would_deny"].(map[string]any)
	if lines[1]["outcome"] != "ok" || wd["policy"] != "globex-spare-dry-run" || wd["reason"] != "backend_not_allowed" {
		t.Errorf("backend-shadowed call's line: %v", lines[1])
	}
}

// TestGovernanceBackends: acme's backend allowlist keeps its calls on
// cheap and onprem: main, its default, leaves the plan and its fallbacks
// serve (cheap, then onprem when cheap fails); the alias fast's target on
// main leaves too, its onprem target serves with its model. hooli's
// allowlist leaves nothing: 403 backend_not_allowed naming the policy,
// nothing sent or reserved.
func TestGovernanceBackends(t *testing.T) {
	var failCheap atomic.Bool
	g, ups, _ := govGateway(t, func(w http.ResponseWriter, r *http.Request) {
		if failCheap.Load() {
			jsonHandler(503, `{"error":{"message":"down"}}`)(w, r)
			return
		}
		usageUpstream(7, 3)(w, r)
	})
	if code, body := chatAs(t, g, demoKey, "m-small"); code != 200 {
		t.Fatalf("%d %v", code, body)
	}
	if n := served(ups); n["main"] != 0 || n["cheap"] != 1 {
		t.Fatalf("served %v, want cheap (main is not allowed)", n)
	}
	failCheap.Store(true)
	if code, body := chatAs(t, g, demoKey, "m-small"); code != 200 {
		t.Fatalf("%d %v", code, body)
	}
	if n := served(ups); n["main"] != 0 || n["cheap"] != 2 || n["onprem"] != 1 {
		t.Fatalf("served %v, want cheap then its fallback onprem", n)
	}
	if code, body := chatAs(t, g, demoKey, "fast"); code != 200 {
		t.Fatalf("alias: %d %v", code, body)
	}
	reqs := ups["onprem"].requests()
	if n := served(ups); n["main"] != 0 || n["onprem"] != 2 || reqs[1].Body["model"] != "m-small" {
		t.Fatalf("alias served %v, model %v; want onprem with the target's model", n, reqs[len(reqs)-1].Body["model"])
	}

	before := served(ups)
	code, body := chatAs(t, g, govHooliKey, "m-small")
	e := openaiError(body)
	if code != 403 || e["code"] != "backend_not_allowed" || !strings.Contains(e["message"].(string), `"hooli-spare-only"`) {
		t.Fatalf("hooli: %d %v", code, body)
	}
	if after := served(ups); !stdmaps.Equal(before, after) {
		t.Fatalf("a refused call reached an upstream: %v then %v", before, after)
	}
	if committed, reserved := tenantUsage(t, g, "hooli"); committed != "0" || reserved != "0" {
		t.Fatalf("a refused call changed the usage: committed %s reserved %s", committed, reserved)
	}
	_, err := flexwayv1.NewEmbeddingsServiceClient(grpcConn(t, g)).CreateEmbedding(withKey(t, govHooliKey),
		&flexwayv1.CreateEmbeddingRequest{Model: "m-small", Input: &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Texts{Texts: &flexwayv1.Texts{Values: []string{"x"}}}}})
	if c, reason, _, _ := grpcReason(err); c != codes.PermissionDenied || reason != "backend_not_allowed" {
		t.Fatalf("gRPC embeddings: %v", err)
	}
}

// TestGovernanceListener: a policy matched on listener grpc refuses
// initech's gRPC calls and lists it no model there, while its HTTP calls
// and listing are untouched.
func TestGovernanceListener(t *testing.T) {
	g, _, _ := govGateway(t, nil)
	if code, body := chatAs(t, g, govInitechKey, "m-small"); code != 200 {
		t.Fatalf("HTTP refused by a grpc-only policy: %d %v", code, body)
	}
	_, err := flexwayv1.NewChatServiceClient(grpcConn(t, g)).CreateChatCompletion(withKey(t, govInitechKey),
		&flexwayv1.CreateChatCompletionRequest{Model: "m-small", Messages: []*flexwayv1.ChatMessage{userMessage("hi")}})
	if c, reason, _, msg := grpcReason(err); c != codes.PermissionDenied || reason != "model_not_allowed" || !strings.Contains(msg, `"initech-grpc-none"`) {
		t.Fatalf("gRPC: %v", err)
	}
	if got := httpModels(t, g, govInitechKey); !slices.Equal(got, []string{"fast", "m-large", "m-small"}) {
		t.Errorf("HTTP /v1/models %v", got)
	}
	if got := grpcModels(t, g, govInitechKey); len(got) != 0 {
		t.Errorf("gRPC ListModels %v, want none", got)
	}
}

// TestGovernanceListModels: /v1/models lists exactly what the caller's
// policies allow; a shadow policy hides nothing.
func TestGovernanceListModels(t *testing.T) {
	g, _, _ := govGateway(t, nil)
	for key, want := range map[string][]string{
		demoKey:      {"fast", "m-small"},
		govGlobexKey: {"fast", "m-large", "m-small"},
	} {
		if got := httpModels(t, g, key); !slices.Equal(got, want) {
			t.Errorf("%s: /v1/models %v, want %v", key, got, want)
		}
		if got := grpcModels(t, g, key); !slices.Equal(got, want) {
			t.Errorf("%s: ListModels %v, want %v", key, got, want)
		}
	}
}

// httpModels is GET /v1/models' ids for key, in order.
func httpModels(t *testing.T, g *testGW, key string) []string {
	t.Helper()
	resp := send(t, g, "GET", "/v1/models", nil, map[string]string{"Authorization": "Bearer " + key})
	body := readJSON(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("/v1/models: %d %v", resp.StatusCode, body)
	}
	var ids []string
	data, _ := body["data"].([]any)
	for _, m := range data {
		ids = append(ids, m.(map[string]any)["id"].(string))
	}
	return ids
}

// grpcModels is ListModels' ids for key, in order.
func grpcModels(t *testing.T, g *testGW, key string) []string {
	t.Helper()
	resp, err := flexwayv1.NewModelsServiceClient(grpcConn(t, g)).ListModels(withKey(t, key), &flexwayv1.ListModelsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range resp.GetData() {
		ids = append(ids, m.GetId())
	}
	return ids
}
