package metering_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/metering"
	"github.com/flexway/flexway/server/routing"
)

// routes plans chat on main, or on cheap past a soft mark.
func routes() *routing.Table {
	chat := []call.Capability{call.Chat}
	return &routing.Table{Default: "main", SoftBackend: "cheap", Backends: map[string]routing.Backend{
		"main": {Capabilities: chat}, "cheap": {Capabilities: chat},
	}}
}

func chatRequest() *flexwayv1.CreateChatCompletionRequest {
	return &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "hi"}}}}
}

// TestReserveWithoutLedgerPlans: a meter without a ledger plans every chat
// and embeddings call (the service only reads the plan) and meters none.
func TestReserveWithoutLedgerPlans(t *testing.T) {
	m := metering.New(metering.Config{Routes: routes()})
	st := &call.State{Tenant: "acme"}
	res, err := m.Reserve(context.Background(), st, chatRequest())
	if err != nil || res != (metering.Reservation{}) {
		t.Fatalf("Reserve: %+v, %v; want a plan and no reservation", res, err)
	}
	if !slices.Equal(st.Plan, []string{"main"}) || st.Capability != call.Chat || st.Soft {
		t.Fatalf("state %+v: want plan [main], capability chat", st)
	}
	res.Settle(context.Background()) // the zero reservation: nothing
	if _, proxied, err := m.ReserveProxied(context.Background(), st, "/acme.ocr.v1.OcrService/Recognize"); proxied || err != nil {
		t.Fatalf("ReserveProxied without a Proxied table: %v, %v", proxied, err)
	}
	st = &call.State{Tenant: "acme"}
	if res, err := m.Reserve(context.Background(), st, &flexwayv1.ListModelsRequest{}); res != (metering.Reservation{}) || err != nil || st.Plan != nil {
		t.Fatalf("models listing: %v, %v, plan %v: it is not planned here", res, err, st.Plan)
	}
}

// TestReserveUsesAdmission: a call whose state holds the HTTP front's
// pre-body check for its account takes its soft state from it, without a
// second ledger read; for another account the ledger is read.
func TestReserveUsesAdmission(t *testing.T) {
	store, err := ledger.OpenEmbedded(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	led := ledger.New(ledger.Policy{}, store, ledger.Options{})
	t.Cleanup(func() { _ = led.Close() })
	m := metering.New(metering.Config{Ledger: led, Routes: routes()})

	ctx, err := m.Admit(context.Background(), call.Identity{KeyName: "acme-bot", Tenant: "acme"}, "ai.chatCompletions")
	if err != nil {
		t.Fatal(err)
	}
	if a := call.AdmissionFrom(ctx); a == nil || a.Tenant != "acme" || a.Soft || a.Caller.KeyName != "acme-bot" {
		t.Fatalf("Admit carried %+v, want acme's, not soft", a)
	}
	for _, tc := range []struct {
		name     string
		admitted *call.Admission
		plan     []string
	}{
		// No cap here is soft: only the admission can make the call so.
		{"admitted soft", &call.Admission{Tenant: "acme", Soft: true}, []string{"cheap"}},
		{"admitted for another account", &call.Admission{Tenant: "other", Soft: true}, []string{"main"}},
		{"not admitted", nil, []string{"main"}},
	} {
		st := &call.State{Tenant: "acme", Admitted: tc.admitted}
		res, err := m.Reserve(context.Background(), st, chatRequest())
		if err != nil || res == (metering.Reservation{}) {
			t.Fatalf("%s: Reserve: %v, %v", tc.name, res, err)
		}
		if !slices.Equal(st.Plan, tc.plan) || st.Soft != (tc.plan[0] == "cheap") {
			t.Errorf("%s: plan %v, soft %v; want %v", tc.name, st.Plan, st.Soft, tc.plan)
		}
		res.Settle(context.Background()) // not served: released
	}
}
