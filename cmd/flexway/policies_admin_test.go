package main

import (
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// policiesAdminConfig is the OCR proxy's configuration (an
// ai.grpc service, acme.ocr.v1.OcrService) with policies of every level.
func policiesAdminConfig(t *testing.T) string {
	t.Helper()
	return ocrConfig(t, "127.0.0.1:1", ocrDescriptorSet(t), false, "") + `  policies:
    - name: everyone
      governance: {models: ["*"]}
    - name: acme-governed
      match: {tenant: acme}
      governance: {models: [m, fast], backends: [chat], mode: enforce}
    - name: bot-shadow
      match: {tenant: acme, agent: bot}
      governance: {models: [fast], mode: shadow}
    - name: http-only
      match: {listener: http}
    - name: embed-route
      match: {operation: ai.embeddings, model: m}
    - name: globex
      match: {tenant: globex}
    - name: other-agent
      match: {tenant: acme, agent: crawler}
`
}

// appliedPolicy is one entry of the policies view, as JSON.
type appliedPolicy struct {
	Name, Level, Mode string
	Match             struct{ Listener, Model string }
	Models, Backends  *[]string
	Budget            *struct {
		Per  string
		Caps []struct{ Cap, Unit, Limit string }
	}
}

type consumerPolicies struct {
	Tenant, Agent string
	Operations    []struct {
		Operation string
		Policies  []appliedPolicy
	}
}

func getPolicies(t *testing.T, g *testGW, path string) consumerPolicies {
	t.Helper()
	resp := send(t, g, "GET", path, nil, map[string]string{"Authorization": "Bearer " + testAdminKey})
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, raw)
	}
	var out consumerPolicies
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, raw)
	}
	return out
}

// byOperation is the view's policy names per operation, in order.
func byOperation(c consumerPolicies) map[string][]string {
	out := map[string][]string{}
	var ops []string
	for _, op := range c.Operations {
		ops = append(ops, op.Operation)
		names := []string{}
		for _, p := range op.Policies {
			names = append(names, p.Name+"/"+p.Level)
		}
		out[op.Operation] = names
	}
	out["(order)"] = ops
	return out
}

// TestAdminPoliciesView: GET .../policies lists, per operation (Flexway's
// three, then the ai.grpc services), the policies that apply to the
// consumer with their level, most specific first; a listener: http
// policy does not apply to a proxied gRPC service; governance is as
// declared (a list and null told apart).
func TestAdminPoliciesView(t *testing.T) {
	g := startGateway(t, policiesAdminConfig(t))

	bot := getPolicies(t, g, "/flexway/v1/tenants/acme/agents/bot/policies")
	if bot.Tenant != "acme" || bot.Agent != "bot" {
		t.Errorf("consumer %q/%q", bot.Tenant, bot.Agent)
	}
	want := map[string][]string{
		"(order)":                {"ai.chatCompletions", "ai.embeddings", "ai.listModels", "acme.ocr.v1.OcrService"},
		"ai.chatCompletions":     {"bot-shadow/agent", "acme-governed/tenant", "http-only/listener", "everyone/global"},
		"ai.embeddings":          {"bot-shadow/agent", "acme-governed/tenant", "embed-route/route", "http-only/listener", "everyone/global"},
		"ai.listModels":          {"bot-shadow/agent", "acme-governed/tenant", "http-only/listener", "everyone/global"},
		"acme.ocr.v1.OcrService": {"bot-shadow/agent", "acme-governed/tenant", "everyone/global"},
	}
	if got := byOperation(bot); !reflect.DeepEqual(got, want) {
		t.Errorf("agent view:\n got %v\nwant %v", got, want)
	}

	tenant := getPolicies(t, g, "/flexway/v1/tenants/acme/policies")
	want = map[string][]string{
		"(order)":                {"ai.chatCompletions", "ai.embeddings", "ai.listModels", "acme.ocr.v1.OcrService"},
		"ai.chatCompletions":     {"acme-governed/tenant", "http-only/listener", "everyone/global"},
		"ai.embeddings":          {"acme-governed/tenant", "embed-route/route", "http-only/listener", "everyone/global"},
		"ai.listModels":          {"acme-governed/tenant", "http-only/listener", "everyone/global"},
		"acme.ocr.v1.OcrService": {"acme-governed/tenant", "everyone/global"},
	}
	if got := byOperation(tenant); !reflect.DeepEqual(got, want) {
		t.Errorf("tenant view:\n got %v\nwant %v", got, want)
	}

	ps := map[string]appliedPolicy{}
	for _, p := range bot.Operations[1].Policies {
		ps[p.Name] = p
	}
	gov := ps["acme-governed"]
	if gov.Mode != "enforce" || gov.Models == nil || !reflect.DeepEqual(*gov.Models, []string{"m", "fast"}) ||
		gov.Backends == nil || !reflect.DeepEqual(*gov.Backends, []string{"chat"}) {
		t.Errorf("acme-governed: %+v", gov)
	}
	// Budgets are in server/admin's tests: ai.policies' budget caps are
	// decoded by the configuration's issue 16 branch.
	if gov.Budget != nil {
		t.Errorf("acme-governed's budget: %+v, want null", gov.Budget)
	}
	if s := ps["bot-shadow"]; s.Mode != "shadow" || s.Models == nil || !reflect.DeepEqual(*s.Models, []string{"fast"}) || s.Backends != nil || s.Budget != nil {
		t.Errorf("bot-shadow: %+v", s)
	}
	if h := ps["http-only"]; h.Match.Listener != "http" || h.Models != nil || h.Backends != nil || h.Mode != "enforce" {
		t.Errorf("http-only: %+v", h)
	}
	if e := ps["embed-route"]; e.Match.Model != "m" || e.Level != "route" {
		t.Errorf("embed-route: %+v", e)
	}
}

// TestAdminPoliciesRefusals: an unknown tenant or agent is 404 not_found
// in problem details (NOT_FOUND over gRPC); no admin key, or a tenant's
// key, is 401.
func TestAdminPoliciesRefusals(t *testing.T) {
	g := startGateway(t, policiesAdminConfig(t))
	admin := map[string]string{"Authorization": "Bearer " + testAdminKey}
	for _, tc := range []struct {
		path    string
		headers map[string]string
		status  int
		code    string
	}{
		{"/flexway/v1/tenants/nobody/policies", admin, 404, "not_found"},
		{"/flexway/v1/tenants/acme/agents/nobody/policies", admin, 404, "not_found"},
		{"/flexway/v1/tenants/acme/policies", nil, 401, ""},
		{"/flexway/v1/tenants/acme/agents/bot/policies", nil, 401, ""},
		{"/flexway/v1/tenants/acme/policies", map[string]string{"Authorization": "Bearer " + demoKey}, 401, ""},
	} {
		resp := send(t, g, "GET", tc.path, nil, tc.headers)
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s %s; want %d problem details", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), raw, tc.status)
			continue
		}
		if tc.code != "" && !strings.Contains(string(raw), `"code":"`+tc.code+`"`) {
			t.Errorf("%s: %s; want code %s", tc.path, raw, tc.code)
		}
	}
}

// TestAdminPoliciesGRPC: the same view over gRPC AdminService.
func TestAdminPoliciesGRPC(t *testing.T) {
	g := startGateway(t, policiesAdminConfig(t))
	client := flexwayv1.NewAdminServiceClient(grpcConn(t, g))
	got, err := client.GetAgentPolicies(withKey(t, testAdminKey), &flexwayv1.GetAgentPoliciesRequest{Tenant: "acme", Agent: "bot"})
	if err != nil {
		t.Fatal(err)
	}
	if ops := got.GetOperations(); len(ops) != 4 || ops[3].GetOperation() != "acme.ocr.v1.OcrService" ||
		len(ops[0].GetPolicies()) != 4 || ops[0].GetPolicies()[0].GetName() != "bot-shadow" || ops[0].GetPolicies()[0].GetMode() != "shadow" {
		t.Errorf("agent view over gRPC: %v", got)
	}
	if _, err := client.GetTenantPolicies(withKey(t, testAdminKey), &flexwayv1.GetTenantPoliciesRequest{Tenant: "nobody"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown tenant over gRPC: %v, want NOT_FOUND", err)
	}
	if _, err := client.GetTenantPolicies(withKey(t, demoKey), &flexwayv1.GetTenantPoliciesRequest{Tenant: "acme"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a tenant's key over gRPC: %v, want UNAUTHENTICATED", err)
	}
}
