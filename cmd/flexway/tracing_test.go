package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/flexway/flexway/cmd/flexway/gateway"
)

// TestTraceShowsFallbackAttempts: a call served by a fallback is one trace
// holding the HTTP server span and both upstream attempts, the failed one
// marked, and the serving upstream receives that trace's W3C context.
func TestTraceShowsFallbackAttempts(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tuneOptions = func(o *gateway.Options) { o.SpanExporter = exp }
	t.Cleanup(func() {
		tuneOptions = nil
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	})
	main := newCounting(t, jsonHandler(500, `{}`))
	var traceparent string
	spare := newCounting(t, func(w http.ResponseWriter, r *http.Request) {
		traceparent = r.Header.Get("Traceparent")
		jsonHandler(200, completion)(w, r)
	})
	g := startGateway(t, pairConfig(t, main.URL, spare.URL, "[spare]", "[]", "{failures: 100, open_for: 1m}"))
	resp := post(t, g, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var attempts []string
	traceID := ""
	for _, s := range exp.GetSpans() {
		if s.Name != "flexway.upstream_attempt" {
			continue
		}
		backend, failed := "", s.Status.Code.String() == "Error"
		for _, a := range s.Attributes {
			if a.Key == "flexway.backend" {
				backend = a.Value.AsString()
			}
		}
		attempts = append(attempts, backend+map[bool]string{true: ":failed", false: ":ok"}[failed])
		if traceID == "" {
			traceID = s.SpanContext.TraceID().String()
		} else if s.SpanContext.TraceID().String() != traceID {
			t.Errorf("attempts in different traces")
		}
	}
	if strings.Join(attempts, ",") != "main:failed,spare:ok" {
		t.Fatalf("attempt spans %v, want main:failed,spare:ok", attempts)
	}
	// The HTTP server span ends once the handler has returned, which is
	// after the answer was sent (it leaves before the access log line).
	server := false
	for deadline := time.Now().Add(5 * time.Second); !server && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID().String() == traceID && !s.Parent.IsValid() {
				server = true
			}
		}
	}
	if !server {
		t.Errorf("no root span of the HTTP call in the attempts' trace")
	}
	if !strings.Contains(traceparent, traceID) {
		t.Errorf("the serving upstream got traceparent %q, want trace %s", traceparent, traceID)
	}
}
