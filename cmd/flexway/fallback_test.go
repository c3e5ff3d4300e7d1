package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestStreamFallsBackAfterPreamble: a backend that sends OpenAI's preamble
// chunk (role, empty content, refusal null) and then dies has sent no
// content, so the stream falls back to the next backend; the client sees
// one clean stream from the fallback, marked degraded.
func TestStreamFallsBackAfterPreamble(t *testing.T) {
	primary := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\n", chunk(`[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]`, ""))
		w.(http.Flusher).Flush()
		// The connection drops before any content and before [DONE].
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	spare := newUpstream(t, sseUpstream(
		chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"content":"from the spare"},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""),
	))
	g := startGateway(t, fallbackConfig(t, primary.URL, spare.URL))
	resp, raw := streamBody(t, g, `{"model":"m-large","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || resp.Header.Get("Flexway-Degraded") != "backend-fallback" {
		t.Fatalf("status %d, Flexway-Degraded %q\n%s", resp.StatusCode, resp.Header.Get("Flexway-Degraded"), raw)
	}
	text, finish, done := streamText(t, sseEvents(raw))
	if text != "from the spare" || finish != "stop" || !done {
		t.Fatalf("text %q finish %q done %v\n%s", text, finish, done, raw)
	}
	if strings.Count(string(raw), `"role":"assistant"`) != 1 {
		t.Fatalf("the primary's preamble reached the client:\n%s", raw)
	}
	if len(primary.requests()) != 1 || len(spare.requests()) != 1 {
		t.Fatalf("primary %d, spare %d requests", len(primary.requests()), len(spare.requests()))
	}
}
