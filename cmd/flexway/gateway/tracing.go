package main

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/flexway/flexway/server/config"
)

// spanExporter, when a test sets it, receives every span the gateway
// records, synchronously.
var spanExporter sdktrace.SpanExporter

// newTracing returns the gateway's tracer provider and its shutdown. With
// an exporter (telemetry.otlp_endpoint: OTLP over gRPC, plaintext, in
// batches; or a test's), spans are recorded (otelhttp on the HTTP front,
// otelgrpc on the gRPC server, one span per upstream attempt and per ledger
// step) and the W3C trace context of Flexway's own spans is passed to
// upstreams. Without one, tracing costs nothing and no trace header is
// sent.
func newTracing(cfg *config.Config) (trace.TracerProvider, func(context.Context) error, error) {
	var opt sdktrace.TracerProviderOption
	switch {
	case spanExporter != nil:
		opt = sdktrace.WithSyncer(spanExporter)
	case cfg.Telemetry.OTLPEndpoint != "":
		exp, err := otlptracegrpc.New(context.Background(),
			otlptracegrpc.WithEndpoint(cfg.Telemetry.OTLPEndpoint), otlptracegrpc.WithInsecure())
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry.otlp_endpoint: %w", err)
		}
		opt = sdktrace.WithBatcher(exp)
	default:
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tp := sdktrace.NewTracerProvider(opt, sdktrace.WithResource(flexwayResource()))
	return tp, tp.Shutdown, nil
}

// traced reports whether newTracing exports spans (to telemetry.otlp_endpoint,
// or to a test's spanExporter).
func traced(cfg *config.Config) bool {
	return spanExporter != nil || cfg.Telemetry.OTLPEndpoint != ""
}

// flexwayResource names the service in exported telemetry.
func flexwayResource() *resource.Resource {
	return resource.NewSchemaless(attribute.String("service.name", "flexway"), attribute.String("service.version", version))
}

// otlpMetricReaders returns the reader that pushes metrics to
// telemetry.otlp_endpoint every 10 s (and at shutdown), if set.
func otlpMetricReaders(cfg *config.Config) ([]sdkmetric.Reader, error) {
	if cfg.Telemetry.OTLPEndpoint == "" {
		return nil, nil
	}
	exp, err := otlpmetricgrpc.New(context.Background(),
		otlpmetricgrpc.WithEndpoint(cfg.Telemetry.OTLPEndpoint), otlpmetricgrpc.WithInsecure())
	if err != nil {
		return nil, fmt.Errorf("telemetry.otlp_endpoint: %w", err)
	}
	return []sdkmetric.Reader{sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(10*time.Second))}, nil
}
