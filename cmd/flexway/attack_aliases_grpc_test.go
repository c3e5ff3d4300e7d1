package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// TestAttackAliasGRPC: over gRPC a failover alias serves from its second
// target with the model sent as is and flexway-route in the header
// metadata; an A/B alias sticky on header:x-exp reads the metadata.
func TestAttackAliasGRPC(t *testing.T) {
	g, _, spare, _ := aliasGateway(t, "    fast:\n      strategy: failover\n      targets:\n        - {backend: main, model: fail}\n        - {backend: spare, model: tiny-1}\n"+
		"    rev:\n      strategy: ab\n      sticky: header:X-Exp\n      targets:\n        - {backend: main, model: a-1, weight: 50, arm: control}\n        - {backend: spare, model: b-1, weight: 50, arm: candidate}\n")
	client := flexwayv1.NewChatServiceClient(grpcConn(t, g))
	var header metadata.MD
	resp, err := client.CreateChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
		Model: "fast", Messages: []*flexwayv1.ChatMessage{userMessage("hi")}}, grpc.Header(&header))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetModel() != "tiny-1" || modelSent(spare) != "tiny-1" || strings.Join(header.Get("flexway-route"), ",") != "fast/1" {
		t.Fatalf("model %q sent %v route %v", resp.GetModel(), modelSent(spare), header.Get("flexway-route"))
	}
	arms := map[string]int{}
	for i := range 16 {
		var h metadata.MD
		ctx := metadata.AppendToOutgoingContext(withKey(t, demoKey), "x-exp", fmt.Sprintf("subject-%d", i))
		if _, err := client.CreateChatCompletion(ctx, &flexwayv1.CreateChatCompletionRequest{
			Model: "rev", Messages: []*flexwayv1.ChatMessage{userMessage("hi")}}, grpc.Header(&h)); err != nil {
			t.Fatal(err)
		}
		arms[strings.Join(h.Get("flexway-route"), ",")]++
	}
	if len(arms) != 2 {
		t.Fatalf("16 x-exp subjects over gRPC all on %v", arms)
	}
}

// TestAttackAliasBudgetAtServingPrice: a failover alias whose first
// target (main, 1 €/2 € per M tokens) fails is served by cheap (0.10 €/
// 0.20 €); the committed euros are cheap's price of the usage, the same as
// a call routed to cheap by itself.
func TestAttackAliasBudgetAtServingPrice(t *testing.T) {
	main := newCounting(t, jsonHandler(503, `{"error":{"message":"down"}}`))
	cheap := newCounting(t, usageUpstream(100000, 0))
	c := budgetTestConfig(t, main.URL, cheap.URL, "    default: {eur_per_month: 1000}")
	c.Backends[0].Fallback = ""
	c.AI = "  aliases:\n    fast:\n      strategy: failover\n      targets:\n        - {backend: main, model: x-1}\n        - {backend: cheap, model: y-1}\n"
	g := startGateway(t, c.yaml())
	resp := post(t, g, "/v1/chat/completions", `{"model":"fast","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Flexway-Route") != "fast/1" {
		t.Fatalf("%d %q: %s", resp.StatusCode, resp.Header.Get("Flexway-Route"), raw)
	}
	got := committedCap(t, g, "eur_per_month")
	// 100,000 input tokens at 0.10 € per million: 0.01 €.
	if got != "0.01" && got != "10000000" {
		t.Fatalf("committed %s, want cheap's price of 100000 input tokens (0.01 €)", got)
	}
}

// committedCap is the acme tenant's committed value of cap.
func committedCap(t *testing.T, g *testGW, cap string) string {
	t.Helper()
	resp := send(t, g, "GET", "/flexway/v1/usage", nil, map[string]string{"Authorization": "Bearer " + testAdminKey})
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("usage %d: %s", resp.StatusCode, raw)
	}
	i := strings.Index(string(raw), `"cap":"`+cap+`"`)
	if i < 0 {
		t.Fatalf("no %s in %s", cap, raw)
	}
	rest := string(raw[i:])
	j := strings.Index(rest, `"committed":"`)
	if j < 0 {
		t.Fatalf("no committed in %s", rest)
	}
	rest = rest[j+len(`"committed":"`):]
	return rest[:strings.Index(rest, `"`)]
}

// TestAttackPoolTokenFile: a token_file key is re-read on every call: a
// token rotated mid-run is sent on the next call; while its file is
// missing the pool's other key serves (a local read failure is not the
// upstream's refusal and must not fail the call nor count against the
// backend).
func TestAttackPoolTokenFile(t *testing.T) {
	t.Setenv("FLEXWAY_TEST_POOL_B", "pool-secret-b")
	tok := t.TempDir() + "/token"
	if err := os.WriteFile(tok, []byte("rot-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pu := &poolUpstream{status: map[string]int{}, retry: map[string]string{}}
	main := newUpstream(t, pu.handle)
	cheap := newCounting(t, usageUpstream(10, 5))
	c := budgetTestConfig(t, main.URL, cheap.URL, "    default: {tokens_per_day: 100000}")
	c.Backends[0].Extra = poolWith("{name: a, auth: {type: token_file, path: " + tok + "}}")
	c.Backends[0].CircuitBreaker = "{failures: 3, open_for: 30s}"
	log := &syncBuffer{}
	g := startGatewayLog(t, c.yaml(), log)
	for range 2 {
		if st, _, body := refusal(t, g, false); st != 200 {
			t.Fatalf("status %d: %s", st, body)
		}
	}
	if err := os.WriteFile(tok, []byte("rot-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if st, _, body := refusal(t, g, false); st != 200 {
			t.Fatalf("status %d: %s", st, body)
		}
	}
	if got := pu.keys(); got != "rot-1,pool-secret-b,rot-2,pool-secret-b" {
		t.Fatalf("keys sent %s", got)
	}
	os.Remove(tok)
	before := strings.Count(pu.keys(), "pool-secret-b")
	for i := range 20 {
		if st, _, body := refusal(t, g, false); st != 200 {
			t.Errorf("call %d with key a's token file missing: status %d: %s", i, st, body)
		}
	}
	if served := strings.Count(pu.keys(), "pool-secret-b") - before; cheap.calls.Load() != 0 || served != 20 {
		t.Errorf("with key a's token file missing, 20 calls: key b served %d, cheap (another backend) %d; want b to serve all 20", served, cheap.calls.Load())
	}
	if strings.Contains(log.String(), "rot-") {
		t.Error("a token reached the log")
	}
}

// TestAttackAliasFailoverListReplacesFallback: a failover alias's list
// replaces the backend's own fallback, and a canary's weight-0 target is
// never a failover: when every target fails, neither the backend's
// fallback nor the weight-0 target is called.
func TestAttackAliasFailoverListReplacesFallback(t *testing.T) {
	main := newCounting(t, jsonHandler(503, `{"error":{"message":"down"}}`))
	cheap := newCounting(t, usageUpstream(10, 5))
	c := budgetTestConfig(t, main.URL, cheap.URL, "    default: {tokens_per_day: 100000}")
	c.SoftBackend = ""
	c.AI = "  aliases:\n    fo:\n      strategy: failover\n      targets:\n        - {backend: main, model: x-1}\n" +
		"    can:\n      strategy: canary\n      targets:\n        - {backend: main, model: x-1, weight: 100}\n        - {backend: cheap, model: y-1, weight: 0}\n"
	g := startGateway(t, c.yaml())
	for _, model := range []string{"fo", "can"} {
		resp := post(t, g, "/v1/chat/completions", `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`)
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode < 500 || cheap.calls.Load() != 0 {
			t.Errorf("%s: status %d, cheap %d calls: %s", model, resp.StatusCode, cheap.calls.Load(), raw)
		}
	}
}

// TestAttackAliasCostRouteIndex: a cost alias sorts its targets by price
// at load; Flexway-Route's arm is the serving target's index in targets
// as written (the cheap one is targets[1]), and the audit line says so.
func TestAttackAliasCostRouteIndex(t *testing.T) {
	dear, cheap := modelEcho(t), modelEcho(t)
	c := baseTestConfig(dear.URL)
	c.Backends[0].Price = &[2]float64{5, 10}
	cb := baseBackend("cheap", cheap.URL)
	cb.Price = &[2]float64{0.1, 0.2}
	c.Backends = append(c.Backends, cb)
	c.AuditPath = t.TempDir() + "/audit.jsonl"
	c.AI = "  aliases:\n    thrifty:\n      strategy: cost\n      targets:\n        - {backend: main, model: dear-1}\n        - {backend: cheap, model: cheap-1}\n" +
		"    pick:\n      strategy: canary\n      targets:\n        - {backend: main, model: dear-1, weight: 0, arm: off}\n        - {backend: cheap, model: cheap-1, weight: 5}\n"
	g := startGateway(t, c.yaml())
	for _, tc := range []struct{ model, route string }{{"thrifty", "thrifty/1"}, {"pick", "pick/1"}} {
		st, route := aliasCall(t, g, tc.model, nil)
		if st != 200 || route != tc.route || modelSent(cheap) != "cheap-1" {
			t.Errorf("%s: status %d route %q (want %q), cheap sent %v", tc.model, st, route, tc.route, modelSent(cheap))
		}
	}
	g.stop()
	g.wait(t, 10*time.Second)
	for i, l := range auditLines(t, c.AuditPath) {
		if l["arm"] != "1" {
			t.Errorf("audit line %d: alias %v arm %v, want arm 1", i, l["alias"], l["arm"])
		}
	}
}

// TestAttackAliasMetricsLabels: the issue says metrics carry alias and,
// for canary/ab, arm. After an A/B alias call, some inference series must
// carry alias="rev" and the serving arm (today the series say
// model="other": the served model id, outside the label set, and neither
// the alias nor the arm).
func TestAttackAliasMetricsLabels(t *testing.T) {
	g, _, _, _ := aliasGateway(t, "    rev:\n      strategy: ab\n      sticky: agent\n      targets:\n        - {backend: main, model: a-1, weight: 50, arm: control}\n        - {backend: spare, model: b-1, weight: 50, arm: candidate}\n")
	_, route := aliasCall(t, g, "rev", nil)
	arm := strings.TrimPrefix(route, "rev/")
	resp := send(t, g, "GET", "/metrics", nil, map[string]string{"Authorization": ""})
	raw, _ := io.ReadAll(resp.Body)
	var series []string
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "flexway_inference_calls_total{") {
			series = append(series, l)
		}
	}
	for _, l := range series {
		if strings.Contains(l, `alias="rev"`) && strings.Contains(l, `arm="`+arm+`"`) {
			return
		}
	}
	t.Fatalf("route %q; no flexway_inference_calls_total series with alias=\"rev\" and arm=%q: %v", route, arm, series)
}

// TestAttackClassifierSkippedUnderOverride: tenant globex's backend
// replaces any alias's route, so a classifier alias's verdict is thrown
// away for it; the prompt must not be sent to an (external) scorer for a
// verdict nobody uses (today it is, costing the scorer's latency too).
func TestAttackClassifierSkippedUnderOverride(t *testing.T) {
	scorer := newUpstream(t, jsonHandler(200, `{"score":0.1}`))
	g, _, _, _ := aliasGateway(t, "    triage:\n      strategy: classifier\n      classifier: {url: "+scorer.URL+"/score, external: true, timeout: 300ms, threshold: 0.5}\n"+
		"      below: {backend: spare, model: small-1}\n      above: {backend: main, model: large-1}\n")
	resp := send(t, g, "POST", "/v1/chat/completions", strings.NewReader(`{"model":"triage","messages":[{"role":"user","content":"secret plan"}]}`),
		map[string]string{"Authorization": "Bearer sk-test-globex", "Content-Type": "application/json"})
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Flexway-Route") != "" {
		t.Fatalf("status %d route %q: the tenant's backend should serve", resp.StatusCode, resp.Header.Get("Flexway-Route"))
	}
	if n := len(scorer.requests()); n != 0 {
		t.Fatalf("the external scorer got the prompt %d times for a call its verdict cannot route", n)
	}
}
