package metering_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
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

// TestReserveCacheHit: a call the cache answers is reserved and committed
// its hit price and no token: it counts toward requests_per_minute (the
// third hit of a minute capped at two is refused), never toward a token
// cap (tokens_per_day 5 refuses any estimated call, not a hit), and is
// charged its price on eur_per_month; the outcome reads that price. The
// lookup runs once the call is planned. A miss is reserved as any call.
func TestReserveCacheHit(t *testing.T) {
	store, err := ledger.OpenEmbedded(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	two, five, euros := int64(2), int64(5), int64(1_000_000_000)
	led := ledger.New(ledger.Policy{Default: ledger.Limits{RequestsPerMinute: &two, TokensPerDay: &five, NanoEURPerMonth: &euros}}, store, ledger.Options{})
	t.Cleanup(func() { _ = led.Close() })
	hit := true
	var planned []string
	m := metering.New(metering.Config{Ledger: led, Routes: routes(), Cache: func(_ context.Context, st *call.State, _ any, _ func() error) (int64, bool, error) {
		planned = st.Plan
		return 7_000, hit, nil
	}})
	ctx := context.Background()
	for i := range 3 {
		st := &call.State{Tenant: "acme"}
		res, err := m.Reserve(ctx, st, chatRequest())
		if i == 2 {
			if f := faults.As(err); f == nil || f.Reason != faults.RateLimited {
				t.Fatalf("third hit: %v, want rate_limited", err)
			}
			break
		}
		if err != nil {
			t.Fatalf("hit %d: %v", i, err)
		}
		if !slices.Equal(planned, []string{"main"}) {
			t.Fatalf("the lookup saw plan %v", planned)
		}
		st.SetOutcome(call.Outcome{Backend: "main", Served: true, InputTokens: 100, OutputTokens: 50})
		res.Settle(ctx)
		if o := st.Outcome(); o.CostNanoEUR != 7_000 {
			t.Errorf("hit %d costs %d nano-euros, want 7000", i, o.CostNanoEUR)
		}
	}
	usage, err := led.Usage(ctx, ledger.Account{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range usage {
		want := map[ledger.Cap]int64{ledger.RequestsPerMinute: 2, ledger.TokensPerDay: 0, ledger.EURPerMonth: 14_000}[u.Cap]
		if u.Committed != want || u.Reserved != 0 {
			t.Errorf("%s: committed %d, reserved %d; want %d, 0", u.Cap, u.Committed, u.Reserved, want)
		}
	}
	// a miss is estimated: more than tokens_per_day 5 allows
	hit = false
	if _, err := m.Reserve(ctx, &call.State{Tenant: "acme"}, chatRequest()); faults.As(err) == nil {
		t.Errorf("a miss past tokens_per_day: %v, want a refusal", err)
	}
}
