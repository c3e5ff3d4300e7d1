package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingUpstream counts the calls that reach h.
type countingUpstream struct {
	*fakeUpstream
	calls atomic.Int64
}

func newCounting(t *testing.T, h http.HandlerFunc) *countingUpstream {
	c := &countingUpstream{}
	c.fakeUpstream = newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		c.calls.Add(1)
		h(w, r)
	})
	return c
}

// TestFallbackTable: what falls back to the next backend (with
// Flexway-Degraded) and what is relayed as it is.
func TestFallbackTable(t *testing.T) {
	const chatReq = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	closed := newUpstream(t, jsonHandler(200, completion))
	closed.Close()
	cases := []struct {
		name     string
		main     http.HandlerFunc // nil: connection refused
		status   int              // what the caller gets
		fallback bool
	}{
		{name: "connection refused", main: nil, status: 200, fallback: true},
		{name: "500", main: jsonHandler(500, `{"error":{"message":"boom"}}`), status: 200, fallback: true},
		{name: "502 with an HTML body", main: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			io.WriteString(w, "<html><body>Bad Gateway</body></html>")
		}, status: 200, fallback: true},
		{name: "timeout to headers", main: func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
		}, status: 200, fallback: true},
		{name: "400", main: jsonHandler(400, `{"error":{"message":"bad","type":"invalid_request_error","code":"bad"}}`), status: 400},
		{name: "404", main: jsonHandler(404, `{"error":{"message":"no such model","type":"invalid_request_error","code":"model_not_found"}}`), status: 404},
		{name: "429", main: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "7")
			jsonHandler(429, `{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limited"}}`)(w, nil)
		}, status: 429},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mainURL := closed.URL
			var main *countingUpstream
			if tc.main != nil {
				main = newCounting(t, tc.main)
				mainURL = main.URL
			}
			spare := newCounting(t, jsonHandler(200, completion))
			g := startGateway(t, pairConfig(t, mainURL, spare.URL, "[spare]", "[]", "{failures: 100, open_for: 1m}"))
			resp := post(t, g, "/v1/chat/completions", chatReq)
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, raw)
			}
			degraded := resp.Header.Get("Flexway-Degraded") == "backend-fallback"
			if tc.fallback != degraded || (spare.calls.Load() == 1) != tc.fallback {
				t.Fatalf("Flexway-Degraded %q, spare called %d times; want fallback %v", resp.Header.Get("Flexway-Degraded"), spare.calls.Load(), tc.fallback)
			}
			if main != nil && main.calls.Load() != 1 {
				t.Errorf("main called %d times, want once", main.calls.Load())
			}
			if tc.status == 429 && (resp.Header.Get("Retry-After") != "7" || !strings.Contains(string(raw), "rate_limited")) {
				t.Errorf("429 not relayed as is: Retry-After %q, %s", resp.Header.Get("Retry-After"), raw)
			}
		})
	}
}

// TestNoFallbackAfterTheFirstByte: a stream cut after content reached the
// client ends with an error event; the spare is never asked.
func TestNoFallbackAfterTheFirstByte(t *testing.T) {
	main := newCounting(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\n", chunk(`[{"index":0,"delta":{"role":"assistant","content":"Once"}}]`, ""))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	spare := newCounting(t, jsonHandler(200, completion))
	g := startGateway(t, pairConfig(t, main.URL, spare.URL, "[spare]", "[]", "{failures: 100, open_for: 1m}"))
	resp := post(t, g, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	events := sseEvents(raw)
	if resp.StatusCode != 200 || len(events) != 2 || !strings.Contains(events[0], "Once") || !strings.Contains(events[1], `"error"`) {
		t.Fatalf("status %d, events %q; want the content chunk then an error event", resp.StatusCode, events)
	}
	if spare.calls.Load() != 0 {
		t.Fatalf("spare called %d times after content reached the client", spare.calls.Load())
	}
}

// TestFallbackCycleTriesEachOnce: fallback lists that form a cycle try
// each backend once.
func TestFallbackCycleTriesEachOnce(t *testing.T) {
	main := newCounting(t, jsonHandler(500, `{}`))
	spare := newCounting(t, jsonHandler(503, `{}`))
	g := startGateway(t, pairConfig(t, main.URL, spare.URL, "[spare]", "[main]", "{failures: 100, open_for: 1m}"))
	resp := post(t, g, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 502 || main.calls.Load() != 1 || spare.calls.Load() != 1 {
		t.Fatalf("status %d, main %d calls, spare %d; want 502 after one call each", resp.StatusCode, main.calls.Load(), spare.calls.Load())
	}
}

// TestCircuitBreakerStopsCalls: after `failures` failures the failing
// upstream receives no call (the spare serves at once, degraded) until
// open_for passes; then one trial call reaches it.
func TestCircuitBreakerStopsCalls(t *testing.T) {
	main := newCounting(t, jsonHandler(500, `{}`))
	spare := newCounting(t, jsonHandler(200, completion))
	g := startGateway(t, pairConfig(t, main.URL, spare.URL, "[spare]", "[]", "{failures: 3, open_for: 400ms}"))
	call := func() *http.Response {
		resp := post(t, g, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		io.Copy(io.Discard, resp.Body)
		return resp
	}
	for range 10 {
		if resp := call(); resp.StatusCode != 200 || resp.Header.Get("Flexway-Degraded") != "backend-fallback" {
			t.Fatalf("status %d, degraded %q", resp.StatusCode, resp.Header.Get("Flexway-Degraded"))
		}
	}
	if n := main.calls.Load(); n != 3 {
		t.Fatalf("the failing upstream got %d calls out of 10, want 3 (then the circuit is open)", n)
	}
	resp := send(t, g, "GET", "/flexway/v1/backends", nil, map[string]string{"Authorization": "Bearer " + testAdminKey})
	raw, _ := io.ReadAll(resp.Body)
	want := `{"backends":[{"name":"main","kind":"openai","external":true,"capabilities":["chat"],"circuit":"open","credentials":[]},{"name":"spare","kind":"openai","external":true,"capabilities":["chat"],"circuit":"closed","credentials":[]}]}`
	if got := strings.Join(strings.Fields(string(raw)), ""); resp.StatusCode != 200 || got != want {
		t.Fatalf("GET /flexway/v1/backends: %d\n%s\nwant %s", resp.StatusCode, got, want)
	}
	time.Sleep(500 * time.Millisecond)
	call()
	call()
	if n := main.calls.Load(); n != 4 {
		t.Fatalf("after open_for the failing upstream got %d calls in all, want 4: one trial, then open again", n)
	}
	if spare.calls.Load() != 12 {
		t.Errorf("spare served %d calls, want 12", spare.calls.Load())
	}
}

// TestRelayWithoutSensitiveHeaderIsExternalForRouting: an internal relay
// that cannot pass the sensitive flag to its peer never gets a sensitive
// call: the peer could send it outside.
func TestRelayWithoutSensitiveHeaderIsExternalForRouting(t *testing.T) {
	inner := newCounting(t, jsonHandler(200, completion))
	peer := newCounting(t, jsonHandler(200, completion))
	cfg := testConfig{
		Keys:             []testKey{acmeBot},
		Backend:          "hq",
		SensitiveBackend: "inner",
		Backends: []testBackend{
			{Name: "hq", Kind: "relay", URL: peer.URL + "/v1", Internal: true, Metering: "upstream", IdentityHeaders: "{tenant: Flexway-Tenant}"},
			{Name: "inner", URL: inner.URL + "/v1", Internal: true},
		},
	}.yaml()
	g := startGateway(t, cfg)
	for _, sensitive := range []string{"", "true"} {
		resp := send(t, g, "POST", "/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), map[string]string{"Flexway-Sensitive": sensitive})
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("sensitive %q: %d", sensitive, resp.StatusCode)
		}
	}
	if peer.calls.Load() != 1 || inner.calls.Load() != 1 {
		t.Fatalf("relay got %d calls, inner %d; want the plain call on the relay, the sensitive one inside", peer.calls.Load(), inner.calls.Load())
	}
}
