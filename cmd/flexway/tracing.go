package main

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/flexway/flexway/server/config"
)

// spanExporter, when a test sets it, receives every span the gateway
// records; OTLP export (telemetry.otlp_endpoint) is not built yet, and
// without an exporter no span is recorded at all.
var spanExporter sdktrace.SpanExporter

// newTracing returns the gateway's tracer provider and its shutdown. With
// an exporter, spans are recorded (otelhttp on the HTTP front, otelgrpc on
// the gRPC server, one span per upstream attempt and per ledger step) and
// the W3C trace context of Flexway's own spans is passed to upstreams.
// Without one, tracing costs nothing and no trace header is sent.
func newTracing(*config.Config) (trace.TracerProvider, func(context.Context) error) {
	if spanExporter == nil {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }
	}
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spanExporter))
	return tp, tp.Shutdown
}
