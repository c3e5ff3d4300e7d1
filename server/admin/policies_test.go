package admin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/policy"
)

// fakeAccounts knows acme and acme/bot.
type fakeAccounts struct{}

func (fakeAccounts) Known(tenant, agent string) bool {
	return tenant == "acme" && (agent == "" || agent == "bot")
}

func (fakeAccounts) List() []ledger.Account { return nil }

func i64(v int64) *int64 { return &v }

func TestPoliciesViewBudgetsAndRules(t *testing.T) {
	eur := 1.5
	tab := policy.MustCompile([]config.Policy{
		{Name: "none", Match: config.PolicyMatch{Tenant: "acme"}, Governance: &config.Governance{Models: []string{}, Mode: config.GovernanceShadow}},
		{Name: "capped", Match: config.PolicyMatch{Tenant: "acme", Agent: "bot"}, Budget: &config.PolicyBudget{
			Caps: config.Caps{TokensPerMinute: i64(20000), RequestsPerMinute: i64(60), TokensPerMonth: i64(9), EURPerMonth: &eur},
			Per:  config.PerPolicy,
		}},
		{Name: "grpc", Match: config.PolicyMatch{Operation: "b.v1.S", Listener: config.ListenerGRPC}},
	})
	s := New(nil, fakeAccounts{}, nil, tab, []string{"b.v1.S", "a.v1.S"})
	got, err := s.GetAgentPolicies(context.Background(), &flexwayv1.GetAgentPoliciesRequest{Tenant: "acme", Agent: "bot"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := protojson.MarshalOptions{EmitUnpopulated: true, UseProtoNames: true}.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	js := strings.ReplaceAll(string(raw), " ", "")
	for _, want := range []string{
		// Operations: Flexway's, then the services sorted.
		`"operations":[{"operation":"ai.chatCompletions"`,
		`{"operation":"a.v1.S","policies":[{"name":"capped"`,
		`{"operation":"b.v1.S","policies":[{"name":"capped"`,
		`"name":"grpc","level":"service","match":{"listener":"grpc","model":""},"mode":"enforce","models":null,"backends":null,"budget":null}`,
		// [] is not null: the shadow policy allows no model.
		`"name":"none","level":"tenant","match":{"listener":"","model":""},"mode":"shadow","models":[],"backends":null,"budget":null}`,
		`"budget":{"per":"policy","caps":[{"cap":"tokens_per_minute","unit":"tokens","limit":"20000"},{"cap":"requests_per_minute","unit":"requests","limit":"60"},{"cap":"tokens_per_month","unit":"tokens","limit":"9"},{"cap":"eur_per_month","unit":"nano_eur","limit":"1500000000"}]}`,
	} {
		if !strings.Contains(js, want) {
			t.Errorf("view lacks %s\n%s", want, js)
		}
	}
	if n := len(got.GetOperations()[0].GetPolicies()); n != 2 {
		t.Errorf("ai.chatCompletions: %d policies, want capped and none", n)
	}

	tenant, err := s.GetTenantPolicies(context.Background(), &flexwayv1.GetTenantPoliciesRequest{Tenant: "acme"})
	if err != nil || len(tenant.GetOperations()[0].GetPolicies()) != 1 || tenant.GetOperations()[0].GetPolicies()[0].GetName() != "none" {
		t.Errorf("tenant view: %v %v", tenant, err)
	}
	for _, req := range []*flexwayv1.GetAgentPoliciesRequest{{Tenant: "globex", Agent: "bot"}, {Tenant: "acme", Agent: "crawler"}} {
		var fe *faults.Error
		if _, err := s.GetAgentPolicies(context.Background(), req); !errors.As(err, &fe) || fe.Reason != faults.NotFound {
			t.Errorf("%v: %v, want not_found", req, err)
		}
	}
	// No policies: every operation listed, none applies.
	empty, err := New(nil, fakeAccounts{}, nil, nil, nil).GetTenantPolicies(context.Background(), &flexwayv1.GetTenantPoliciesRequest{Tenant: "acme"})
	if err != nil || len(empty.GetOperations()) != 3 || len(empty.GetOperations()[2].GetPolicies()) != 0 {
		t.Errorf("no policies: %v %v", empty, err)
	}
}
