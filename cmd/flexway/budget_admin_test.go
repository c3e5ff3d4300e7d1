package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// TestAdminEdgeCases: odd admin paths and methods get RFC 9457 answers,
// never a redirect; an escaped slash stays inside a name; an empty tenant
// over gRPC is INVALID_ARGUMENT.
func TestAdminEdgeCases(t *testing.T) {
	up := newUpstream(t, usageUpstream(10, 5))
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 1000}"))
	admin := map[string]string{"Authorization": "Bearer " + testAdminKey}
	for _, tc := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"GET", "/flexway/v1/tenants//usage", 404, "not_found", ""},
		{"GET", "/flexway/v1/tenants/acme/agents//usage", 404, "not_found", ""},
		{"GET", "/flexway/v1/tenants/acme%2Fagents%2Fbot/usage", 404, "not_found", ""},
		{"GET", "/flexway/v1/tenants/acme/../acme/usage", 404, "not_found", ""},
		{"POST", "/flexway/v1/tenants/acme/usage", 405, "invalid_request", "GET"},
		{"GET", "/flexway/v1/tenants/acme/agents/bot/usage", 200, "", ""},
	} {
		resp := send(t, g, tc.method, tc.path, nil, admin)
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.status || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d (Allow %q) %s; want %d", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), raw, tc.status)
			continue
		}
		if tc.code != "" && (resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(raw), `"code":"`+tc.code+`"`)) {
			t.Errorf("%s %s: %s %s; want problem details with code %s", tc.method, tc.path, resp.Header.Get("Content-Type"), raw, tc.code)
		}
	}
	resp := send(t, g, "GET", "/v1//models", nil, nil)
	if body := readJSON(t, resp); resp.StatusCode != 404 || body["error"] == nil {
		t.Errorf("/v1//models: %d %v; want 404 in the OpenAI envelope", resp.StatusCode, body)
	}
	client := flexwayv1.NewAdminServiceClient(grpcConn(t, g))
	_, err := client.GetTenantUsage(withKey(t, testAdminKey), &flexwayv1.GetTenantUsageRequest{})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty tenant over gRPC: %v, want INVALID_ARGUMENT", err)
	}
}

// TestAdminListUsage: GET /flexway/v1/usage lists every account, tenants
// before their agents, with their caps.
func TestAdminListUsage(t *testing.T) {
	up := newUpstream(t, usageUpstream(10, 5))
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 1000}"))
	resp := post(t, g, "/v1/chat/completions", chatBody)
	io.Copy(io.Discard, resp.Body)
	resp = send(t, g, "GET", "/flexway/v1/usage", nil, map[string]string{"Authorization": "Bearer " + testAdminKey})
	var body struct {
		Accounts []struct {
			Tenant, Agent string
			Caps          []struct{ Cap, Committed string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	if len(body.Accounts) != 2 || body.Accounts[0].Tenant != "acme" || body.Accounts[0].Agent != "" || body.Accounts[1].Agent != "bot" {
		t.Fatalf("accounts %+v, want acme then acme/bot", body.Accounts)
	}
	if c := body.Accounts[0].Caps; len(c) != 1 || c[0].Cap != "tokens_per_day" || c[0].Committed != "15" {
		t.Fatalf("acme's caps %+v, want tokens_per_day with 15 committed", c)
	}
}
