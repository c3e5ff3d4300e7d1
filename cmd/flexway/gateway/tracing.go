package gateway

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

// newTracing returns the gateway's tracer provider and its shutdown. With
// an exporter (telemetry.otlp_endpoint: OTLP over gRPC, plaintext, in
// batches; or exp, a test's, synchronously), spans are recorded (otelhttp on the HTTP front,
// otelgrpc on the gRPC server, one span per upstream attempt and per ledger
// step) and the W3C trace context of Flexway's own spans is passed to
// upstreams. Without one, tracing costs nothing and no trace header is
// sent.
func newTracing(cfg *config.Config, exp sdktrace.SpanExporter, version string) (trace.TracerProvider, func(context.Context) error, error) {
	var opt sdktrace.TracerProviderOption
	switch {
	case exp != nil:
		opt = sdktrace.WithSyncer(exp)
	case cfg.Telemetry.OTLPEndpoint != "":
		otlp, err := otlptracegrpc.New(context.Background(),
			otlptracegrpc.WithEndpoint(cfg.Telemetry.OTLPEndpoint), otlptracegrpc.WithInsecure())
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry.otlp_endpoint: %w", err)
		}
		opt = sdktrace.WithBatcher(otlp)
	default:
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tp := sdktrace.NewTracerProvider(opt, sdktrace.WithResource(flexwayResource(version)))
	return tp, tp.Shutdown, nil
}

// traced reports whether tp, from newTracing, exports spans (to
// telemetry.otlp_endpoint, or to a test's exporter).
func traced(tp trace.TracerProvider) bool {
	_, ok := tp.(*sdktrace.TracerProvider)
	return ok
}

// flexwayResource names the service in exported telemetry.
func flexwayResource(version string) *resource.Resource {
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
