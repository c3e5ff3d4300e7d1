package metering_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/metering"
	"github.com/flexway/flexway/server/routing"
)

// kindRoutes plans chat on claude, falling back to gem then gpt.
func kindRoutes() *routing.Table {
	chat := []call.Capability{call.Chat}
	return &routing.Table{Default: "claude", Backends: map[string]routing.Backend{
		"claude": {Capabilities: chat, Fallback: []string{"gem", "gpt"}},
		"gem":    {Capabilities: chat}, "gpt": {Capabilities: chat},
	}}
}

// refusing is a fake backends.Checker per backend: the ones named refuse
// every request, each with its own error naming a field.
func refusing(names ...string) (func(string, *flexwayv1.CreateChatCompletionRequest) error, *[]string) {
	var asked []string
	return func(b string, _ *flexwayv1.CreateChatCompletionRequest) error {
		asked = append(asked, b)
		if !slices.Contains(names, b) {
			return nil
		}
		return &faults.Error{Reason: faults.InvalidRequest, Message: b + " cannot express n > 1", Param: "n"}
	}, &asked
}

// TestCheckSkipsBackends: the backends that cannot express the request
// leave the plan, with and without a ledger, and the reservation is priced
// at the first one left; the routing table's own plan is not changed.
func TestCheckSkipsBackends(t *testing.T) {
	prices := map[string]ledger.Price{"claude": {Input: 9e9, Output: 9e9}, "gem": {Input: 1e9, Output: 2e9}, "gpt": {Input: 5e9}}
	for _, tc := range []struct {
		refuse []string
		plan   []string
	}{
		{nil, []string{"claude", "gem", "gpt"}},
		{[]string{"claude"}, []string{"gem", "gpt"}},
		{[]string{"gem"}, []string{"claude", "gpt"}},
		{[]string{"claude", "gem"}, []string{"gpt"}},
	} {
		check, asked := refusing(tc.refuse...)
		routes := kindRoutes()
		st := &call.State{Tenant: "acme"}
		if _, err := metering.New(metering.Config{Routes: routes, Check: check}).Reserve(context.Background(), st, chatRequest()); err != nil {
			t.Fatalf("refusing %v, no ledger: %v", tc.refuse, err)
		}
		if !slices.Equal(st.Plan, tc.plan) || len(*asked) != 3 {
			t.Errorf("refusing %v, no ledger: plan %v (asked %v), want %v", tc.refuse, st.Plan, *asked, tc.plan)
		}
		if p, _ := routes.Plan(routing.Request{Tenant: "acme", Capability: call.Chat}); !slices.Equal(p.Backends, []string{"claude", "gem", "gpt"}) {
			t.Errorf("refusing %v: the routing table's plan became %v", tc.refuse, p.Backends)
		}

		m, led := cappedMeter(t, metering.Config{Routes: kindRoutes(), Check: check, Prices: prices})
		st = &call.State{Tenant: "acme"}
		req := chatRequest()
		res, err := m.Reserve(context.Background(), st, req)
		if err != nil {
			t.Fatalf("refusing %v: %v", tc.refuse, err)
		}
		if !slices.Equal(st.Plan, tc.plan) {
			t.Errorf("refusing %v: plan %v, want %v", tc.refuse, st.Plan, tc.plan)
		}
		est, _ := m.EstimateFor(req, st.Plan)
		first := prices[tc.plan[0]]
		if _, eur := usage(t, led); eur.Reserved != first.Bound(est.Input, est.Output) {
			t.Errorf("refusing %v: reserved %d, want %d (priced at %s)", tc.refuse, eur.Reserved, first.Bound(est.Input, est.Output), tc.plan[0])
		}
		res.Settle(context.Background())
	}
}

// TestCheckAllRefuse: when no planned backend can express the request the
// call is refused with the first backend's error, before any reservation.
func TestCheckAllRefuse(t *testing.T) {
	check, _ := refusing("claude", "gem", "gpt")
	st := &call.State{Tenant: "acme"}
	_, err := metering.New(metering.Config{Routes: kindRoutes(), Check: check}).Reserve(context.Background(), st, chatRequest())
	var fe *faults.Error
	if !errors.As(err, &fe) || fe.Reason != faults.InvalidRequest || fe.Param != "n" || fe.Message != "claude cannot express n > 1" {
		t.Fatalf("no ledger: %v, want claude's invalid_request naming n", err)
	}

	m, led := cappedMeter(t, metering.Config{Routes: kindRoutes(), Check: check, Prices: map[string]ledger.Price{"claude": {Input: 1e9}}})
	st = &call.State{Tenant: "acme"}
	res, err := m.Reserve(context.Background(), st, chatRequest())
	if !errors.As(err, &fe) || fe.Message != "claude cannot express n > 1" || res != (metering.Reservation{}) || st.Plan != nil {
		t.Fatalf("Reserve: %+v, %v, plan %v; want claude's error, no reservation, no plan", res, err, st.Plan)
	}
	if tok, eur := usage(t, led); tok.Reserved != 0 || eur.Reserved != 0 {
		t.Errorf("reserved %d tokens, %d nano-euros for a refused call", tok.Reserved, eur.Reserved)
	}

	// A checker's plain error is still a client's invalid_request.
	plain := func(string, *flexwayv1.CreateChatCompletionRequest) error {
		return errors.New("logprobs is not supported")
	}
	_, err = metering.New(metering.Config{Routes: kindRoutes(), Check: plain}).Reserve(context.Background(), &call.State{Tenant: "acme"}, chatRequest())
	if fe := faults.As(err); fe.Reason != faults.InvalidRequest || fe.Message != "logprobs is not supported" {
		t.Errorf("plain error: %v, want invalid_request", err)
	}
}

// TestCheckOnlyChat: embeddings are not asked about.
func TestCheckOnlyChat(t *testing.T) {
	check, asked := refusing("claude", "gem", "gpt")
	emb := []call.Capability{call.Embeddings}
	routes := &routing.Table{Default: "e", Backends: map[string]routing.Backend{"e": {Capabilities: emb}}}
	st := &call.State{Tenant: "acme"}
	req := &flexwayv1.CreateEmbeddingRequest{Model: "e"}
	if _, err := metering.New(metering.Config{Routes: routes, Check: check}).Reserve(context.Background(), st, req); err != nil || len(*asked) != 0 {
		t.Errorf("embeddings: %v, asked %v", err, *asked)
	}
}
