package main

import (
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// circuits reads GET /flexway/v1/backends: each backend's circuit state.
func circuits(t *testing.T, g *testGW) map[string]string {
	t.Helper()
	resp := send(t, g, "GET", "/flexway/v1/backends", nil, map[string]string{"Authorization": "Bearer " + testAdminKey})
	var body struct {
		Backends []struct{ Name, Circuit string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /flexway/v1/backends: %d %v", resp.StatusCode, err)
	}
	out := map[string]string{}
	for _, b := range body.Backends {
		out[b.Name] = b.Circuit
	}
	return out
}

// TestRequestCausedFailuresLeaveCircuitsClosed: upstreams that answer a
// unary call with an event stream (what a caller's carried `stream` field
// made a healthy upstream do; here they stream regardless) fail the call
// with 502, but five such calls leave the circuits of the backend and of
// its fallback closed, and are not fallen back from; five real 5xx open
// the backend's circuit.
func TestRequestCausedFailuresLeaveCircuitsClosed(t *testing.T) {
	var fail500 atomic.Bool
	streaming := func(w http.ResponseWriter, r *http.Request) {
		if fail500.Load() {
			jsonHandler(500, `{}`)(w, r)
			return
		}
		sseUpstream(chunk(`[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]`, "null"))(w, r)
	}
	main := newCounting(t, streaming)
	spare := newCounting(t, streaming)
	g := startGateway(t, pairConfig(t, main.URL, spare.URL, "[spare]", "[]", "{failures: 5, open_for: 30s}"))
	call := func() *http.Response {
		resp := post(t, g, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := range 6 {
		if resp := call(); resp.StatusCode != 502 {
			t.Fatalf("call %d: status %d, want 502", i+1, resp.StatusCode)
		}
	}
	if got := circuits(t, g); got["main"] != "closed" || got["spare"] != "closed" {
		t.Fatalf("after 6 event streams answered to unary calls, circuits %v; want both closed", got)
	}
	if main.calls.Load() != 6 || spare.calls.Load() != 0 {
		t.Fatalf("main got %d calls, spare %d; want 6 and 0 (a request-caused failure is not fallen back from)", main.calls.Load(), spare.calls.Load())
	}

	fail500.Store(true)
	for range 5 {
		call()
	}
	if got := circuits(t, g); got["main"] != "open" {
		t.Fatalf("after 5 upstream 500s, circuits %v; want main open", got)
	}
}

// TestCarriedStreamFieldLeavesCircuitsClosed is the reproduction:
// gRPC calls carrying extra_fields {"stream":"true"} make a healthy
// upstream (it streams only when asked) answer an event stream to a unary
// call. Whether such a call is refused before any upstream call or fails
// as request-caused, six of them leave every circuit closed, and a plain
// call is served after them.
func TestCarriedStreamFieldLeavesCircuitsClosed(t *testing.T) {
	healthy := func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Stream bool }
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		if body.Stream {
			sseUpstream(chunk(`[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]`, "null"))(w, r)
			return
		}
		jsonHandler(200, completion)(w, r)
	}
	main := newCounting(t, healthy)
	spare := newCounting(t, healthy)
	g := startGateway(t, pairConfig(t, main.URL, spare.URL, "[spare]", "[]", "{failures: 5, open_for: 30s}"))
	client := flexwayv1.NewChatServiceClient(grpcConn(t, g))
	for i := range 6 {
		_, err := client.CreateChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
			Model: "m", Messages: []*flexwayv1.ChatMessage{userMessage("hi")},
			ExtraFields: map[string]string{"stream": "true"},
		})
		if err == nil {
			t.Fatalf("call %d with a carried stream field was answered", i+1)
		}
	}
	if got := circuits(t, g); got["main"] != "closed" || got["spare"] != "closed" {
		t.Fatalf("after 6 calls carrying stream: true, circuits %v; want both closed", got)
	}
	if _, err := client.CreateChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
		Model: "m", Messages: []*flexwayv1.ChatMessage{userMessage("hi")},
	}); err != nil {
		t.Fatalf("a plain call after them: %v", err)
	}
	if spare.calls.Load() != 0 {
		t.Errorf("spare got %d calls: nothing should have fallen back", spare.calls.Load())
	}
}
