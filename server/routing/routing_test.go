package routing_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/routing"
)

// table mirrors the reference configuration's backends.
func table() *routing.Table {
	chat := []call.Capability{call.Chat}
	return &routing.Table{
		Default:          "main",
		SensitiveBackend: "onprem",
		SoftBackend:      "cheap",
		Capabilities:     map[call.Capability]string{call.Vision: "main", call.Embeddings: "embedder"},
		Tenants: map[string]routing.Tenant{
			"acme":     {Backend: "main", Agents: map[string]string{"support-bot": "cheap"}},
			"internal": {Backend: "onprem"},
		},
		Backends: map[string]routing.Backend{
			"main":     {Capabilities: []call.Capability{call.Chat, call.Vision}, External: true, Fallback: []string{"cheap", "onprem"}},
			"cheap":    {Capabilities: chat, External: true},
			"onprem":   {Capabilities: []call.Capability{call.Chat, call.Embeddings}, External: false},
			"embedder": {Capabilities: []call.Capability{call.Embeddings}, External: false},
		},
	}
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name   string
		req    routing.Request
		want   []string
		reason faults.Reason
	}{
		{name: "default with fallbacks", req: routing.Request{Tenant: "globex", Capability: call.Chat}, want: []string{"main", "cheap", "onprem"}},
		{name: "agent override", req: routing.Request{Tenant: "acme", Agent: "support-bot", Capability: call.Chat}, want: []string{"cheap"}},
		{name: "tenant override, other agent", req: routing.Request{Tenant: "acme", Agent: "other", Capability: call.Chat}, want: []string{"main", "cheap", "onprem"}},
		{name: "vision keeps vision fallbacks only", req: routing.Request{Tenant: "globex", Capability: call.Vision}, want: []string{"main"}},
		{name: "capability override", req: routing.Request{Tenant: "acme", Agent: "support-bot", Capability: call.Embeddings}, want: []string{"embedder"}},
		{name: "sensitive pinned internal", req: routing.Request{Tenant: "globex", Capability: call.Chat, Sensitive: true}, want: []string{"onprem"}},
		{name: "sensitive fallback filtered", req: routing.Request{Tenant: "x", Capability: call.Embeddings, Sensitive: true}, want: []string{"embedder"}},
		{name: "soft goes to the soft backend", req: routing.Request{Tenant: "acme", Capability: call.Chat, Soft: true}, want: []string{"cheap"}},
		{name: "soft backend without the capability keeps the route", req: routing.Request{Tenant: "acme", Capability: call.Vision, Soft: true}, want: []string{"main"}},
		{name: "soft never widens a sensitive call", req: routing.Request{Tenant: "acme", Capability: call.Chat, Soft: true, Sensitive: true}, want: []string{"onprem"}},
		{name: "a sensitive call past the soft mark keeps its internal route", req: routing.Request{Tenant: "internal", Capability: call.Chat, Soft: true, Sensitive: true}, want: []string{"onprem"}},
		{name: "sensitive vision has no internal backend", req: routing.Request{Tenant: "globex", Capability: call.Vision, Sensitive: true}, reason: faults.SensitiveNoInternalBackend},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := table().Plan(tt.req)
			if tt.reason != "" {
				var fe *faults.Error
				if !errors.As(err, &fe) || fe.Reason != tt.reason {
					t.Fatalf("err = %v, want reason %s", err, tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, p.Backends); d != "" {
				t.Fatalf("plan (-want +got):\n%s", d)
			}
		})
	}
}

func TestPlanCapabilityUnavailable(t *testing.T) {
	tb := table()
	delete(tb.Capabilities, call.Embeddings)
	_, err := tb.Plan(routing.Request{Tenant: "globex", Capability: call.Embeddings})
	var fe *faults.Error
	if !errors.As(err, &fe) || fe.Reason != faults.CapabilityUnavailable {
		t.Fatalf("err = %v, want capability_unavailable", err)
	}
}

// TestSoftSwitchKeepsSensitiveCallsServed: past the soft mark, a sensitive
// call whose own route is internal keeps it when the soft backend is
// external, even with no sensitive_backend to fall back on.
func TestSoftSwitchKeepsSensitiveCallsServed(t *testing.T) {
	tb := table()
	tb.SensitiveBackend = ""
	p, err := tb.Plan(routing.Request{Tenant: "internal", Capability: call.Chat, Soft: true, Sensitive: true})
	if err != nil || len(p.Backends) == 0 || p.Backends[0] != "onprem" {
		t.Fatalf("plan %v, %v; want onprem", p.Backends, err)
	}
	// Not sensitive: the soft backend takes it.
	if p, _ := tb.Plan(routing.Request{Tenant: "internal", Capability: call.Chat, Soft: true}); p.Backends[0] != "cheap" {
		t.Fatalf("plan %v, want the soft backend cheap", p.Backends)
	}
}
