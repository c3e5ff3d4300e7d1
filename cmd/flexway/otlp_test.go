package main

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	collmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// collector is a fake OpenTelemetry collector: it keeps the span and
// metric names it receives over OTLP/gRPC.
type collector struct {
	colltrace.UnimplementedTraceServiceServer
	collmetrics.UnimplementedMetricsServiceServer
	mu      sync.Mutex
	spans   []string
	metrics []string
}

func (c *collector) Export(_ context.Context, req *colltrace.ExportTraceServiceRequest) (*colltrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, s.GetName())
			}
		}
	}
	return &colltrace.ExportTraceServiceResponse{}, nil
}

// metricsService adapts the collector to the metrics service, whose
// method has the same name as the trace service's.
type metricsService struct{ *collector }

func (m metricsService) Export(_ context.Context, req *collmetrics.ExportMetricsServiceRequest) (*collmetrics.ExportMetricsServiceResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, x := range sm.GetMetrics() {
				m.metrics = append(m.metrics, x.GetName())
			}
		}
	}
	return &collmetrics.ExportMetricsServiceResponse{}, nil
}

// TestOTLPExport: with telemetry.otlp_endpoint, a call's spans (the
// upstream attempt among them) and the inference metrics reach the
// collector, at the latest when the gateway stops.
func TestOTLPExport(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator()) })
	c := &collector{}
	s := grpc.NewServer()
	colltrace.RegisterTraceServiceServer(s, c)
	collmetrics.RegisterMetricsServiceServer(s, metricsService{c})
	go s.Serve(lis)
	t.Cleanup(s.Stop)

	up := newUpstream(t, usageUpstream(7, 3))
	cfg := budgetConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 1000}") + "telemetry:\n  otlp_endpoint: " + lis.Addr().String() + "\n"
	g := startGateway(t, cfg)
	resp := post(t, g, "/v1/chat/completions", chatBody)
	io.Copy(io.Discard, resp.Body)
	g.stop()
	g.wait(t, 15*time.Second)

	c.mu.Lock()
	defer c.mu.Unlock()
	spans, metrics := strings.Join(c.spans, ","), strings.Join(c.metrics, ",")
	for _, want := range []string{"flexway.upstream_attempt", "flexway.budget.reserve", "POST /v1/chat/completions"} {
		if !strings.Contains(spans, want) {
			t.Errorf("span %s not exported; got %s", want, spans)
		}
	}
	if !strings.Contains(metrics, "flexway.inference.calls") || !strings.Contains(metrics, "flexway.inference.cost") {
		t.Errorf("inference metrics not exported; got %s", metrics)
	}
}
