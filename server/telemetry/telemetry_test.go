package telemetry

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func newTest(t testing.TB, o Options) *Metrics {
	t.Helper()
	o.Prometheus = true
	if o.Tenants == nil {
		o.Tenants = []string{"acme", "globex"}
		o.Agents = []string{"bot"}
		o.Backends = []string{"openai-eu", "local-vllm"}
		o.Models = []string{"gpt-4o-mini", "text-embedding-3-small"}
		o.Operations = []string{"/acme.ocr.v1.OCR/Read"}
		o.Features = []string{"ocr"}
	}
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	return m
}

// scrape returns the body of GET /metrics and its series lines (no
// comments), failing on a status other than 200.
func scrape(t testing.TB, m *Metrics) (string, []string) {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, b)
	}
	var series []string
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			series = append(series, l)
		}
	}
	return string(b), series
}

// want fails unless every line is one of the series, exactly.
func want(t testing.TB, series []string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !slices.Contains(series, l) {
			t.Errorf("missing series line\n  %s\nin\n  %s", l, strings.Join(series, "\n  "))
		}
	}
}

// only fails unless the series of metric name are exactly lines.
func only(t testing.TB, series []string, name string, lines ...string) {
	t.Helper()
	var got []string
	for _, l := range series {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			got = append(got, l)
		}
	}
	slices.Sort(got)
	lines = slices.Clone(lines)
	slices.Sort(lines)
	if !slices.Equal(got, lines) {
		t.Errorf("series of %s:\n  %s\nwant\n  %s", name, strings.Join(got, "\n  "), strings.Join(lines, "\n  "))
	}
}

const chatLabels = `agent="bot",backend="openai-eu",capability="chat",feature="",metered_by="local",model="gpt-4o-mini",operation="ai.chatCompletions",outcome="ok",tenant="acme"`

func chatCall() Call {
	return Call{
		Operation: "ai.chatCompletions", Tenant: "acme", Agent: "bot", Backend: "openai-eu", Model: "gpt-4o-mini",
		Capability: "chat", MeteredBy: "local", Outcome: "ok",
		InputTokens: 1200, OutputTokens: 300, CostNanoEUR: 24000,
	}
}

func TestCallSeries(t *testing.T) {
	m := newTest(t, Options{})
	ctx := context.Background()
	m.RecordCall(ctx, chatCall())
	_, series := scrape(t, m)
	only(t, series, "flexway_inference_cost_EUR_total", `flexway_inference_cost_EUR_total{`+chatLabels+`} 2.4e-05`)
	only(t, series, "flexway_inference_calls_total", `flexway_inference_calls_total{`+chatLabels+`} 1`)
	only(t, series, "flexway_inference_tokens_total",
		`flexway_inference_tokens_total{agent="bot",backend="openai-eu",capability="chat",direction="input",feature="",metered_by="local",model="gpt-4o-mini",operation="ai.chatCompletions",outcome="ok",tenant="acme"} 1200`,
		`flexway_inference_tokens_total{agent="bot",backend="openai-eu",capability="chat",direction="output",feature="",metered_by="local",model="gpt-4o-mini",operation="ai.chatCompletions",outcome="ok",tenant="acme"} 300`,
	)
	want(t, series, `target_info{service_name="flexway"} 1`)

	// Two more calls of the same labels add up; 1.5 € + 24 µ€ × 2.
	c := chatCall()
	c.CostNanoEUR = 1_500_000_000
	m.RecordCall(ctx, c)
	m.RecordCall(ctx, chatCall())
	_, series = scrape(t, m)
	only(t, series, "flexway_inference_cost_EUR_total", `flexway_inference_cost_EUR_total{`+chatLabels+`} 1.500048`)
	only(t, series, "flexway_inference_calls_total", `flexway_inference_calls_total{`+chatLabels+`} 3`)
	want(t, series,
		`flexway_inference_tokens_total{agent="bot",backend="openai-eu",capability="chat",direction="input",feature="",metered_by="local",model="gpt-4o-mini",operation="ai.chatCompletions",outcome="ok",tenant="acme"} 3600`,
		`flexway_inference_tokens_total{agent="bot",backend="openai-eu",capability="chat",direction="output",feature="",metered_by="local",model="gpt-4o-mini",operation="ai.chatCompletions",outcome="ok",tenant="acme"} 900`,
	)
}

func TestCostSummedExactly(t *testing.T) {
	m := newTest(t, Options{})
	c := chatCall()
	c.CostNanoEUR, c.InputTokens, c.OutputTokens = 1, 0, 0
	for range 10000 {
		m.RecordCall(context.Background(), c)
	}
	c.CostNanoEUR = -5 // ignored
	m.RecordCall(context.Background(), c)
	_, series := scrape(t, m)
	// Ten thousand nano-euros summed as floats would not print as 1e-05.
	only(t, series, "flexway_inference_cost_EUR_total", `flexway_inference_cost_EUR_total{`+chatLabels+`} 1e-05`)
	only(t, series, "flexway_inference_calls_total", `flexway_inference_calls_total{`+chatLabels+`} 10001`)
}

func TestCallOutcomesAndGRPC(t *testing.T) {
	m := newTest(t, Options{})
	ctx := context.Background()
	// A refused call: counted, cost 0, no tokens.
	m.RecordCall(ctx, Call{Operation: "ai.embeddings", Tenant: "globex", Backend: "local-vllm", Model: "text-embedding-3-small",
		Capability: "embeddings", MeteredBy: "local", Outcome: "refused"})
	// A specialised gRPC call metered per call, relayed upstream.
	m.RecordCall(ctx, Call{Operation: "/acme.ocr.v1.OCR/Read", Tenant: "acme", Backend: "local-vllm",
		Capability: "grpc", MeteredBy: "upstream", Feature: "ocr", Outcome: "ok", CostNanoEUR: 2_000_000})
	_, series := scrape(t, m)
	refused := `agent="",backend="local-vllm",capability="embeddings",feature="",metered_by="local",model="text-embedding-3-small",operation="ai.embeddings",outcome="refused",tenant="globex"`
	grpc := `agent="",backend="local-vllm",capability="grpc",feature="ocr",metered_by="upstream",model="",operation="/acme.ocr.v1.OCR/Read",outcome="ok",tenant="acme"`
	only(t, series, "flexway_inference_calls_total",
		`flexway_inference_calls_total{`+refused+`} 1`,
		`flexway_inference_calls_total{`+grpc+`} 1`)
	only(t, series, "flexway_inference_cost_EUR_total",
		`flexway_inference_cost_EUR_total{`+refused+`} 0`,
		`flexway_inference_cost_EUR_total{`+grpc+`} 0.002`)
	only(t, series, "flexway_inference_tokens_total") // none: no tokens
}

func TestCallerCannotMintSeries(t *testing.T) {
	m := newTest(t, Options{})
	const marker = "invented-XYZZY"
	m.RecordCall(context.Background(), Call{
		Operation: "/" + marker + "/Do", Tenant: marker, Agent: marker, Backend: marker, Model: marker,
		Capability: marker, MeteredBy: marker, Feature: marker, Outcome: marker,
		InputTokens: 7, CostNanoEUR: 1,
	})
	// Empty values are kept: they mint nothing.
	m.RecordCall(context.Background(), Call{})
	// Only the model invented, the rest configured.
	c := chatCall()
	c.Model = "gpt-5-" + marker
	m.RecordCall(context.Background(), c)
	body, series := scrape(t, m)
	if strings.Contains(body, marker) {
		t.Errorf("an invented label value reached /metrics:\n%s", body)
	}
	all := `agent="other",backend="other",capability="other",feature="other",metered_by="other",model="other",operation="other",outcome="other",tenant="other"`
	model := strings.Replace(chatLabels, `model="gpt-4o-mini"`, `model="other"`, 1)
	only(t, series, "flexway_inference_calls_total",
		`flexway_inference_calls_total{`+all+`} 1`,
		`flexway_inference_calls_total{`+model+`} 1`,
		`flexway_inference_calls_total{agent="",backend="",capability="",feature="",metered_by="",model="",operation="",outcome="",tenant=""} 1`)
	want(t, series,
		`flexway_inference_cost_EUR_total{`+all+`} 1e-09`,
		`flexway_inference_cost_EUR_total{`+model+`} 2.4e-05`,
		`flexway_inference_tokens_total{agent="other",backend="other",capability="other",direction="input",feature="other",metered_by="other",model="other",operation="other",outcome="other",tenant="other"} 7`)
}

// TestModel: the model label, which the audit line's model_requested
// reuses, is the model when declared, "" when none, else "other".
func TestModel(t *testing.T) {
	m := newTest(t, Options{})
	for in, want := range map[string]string{
		"gpt-4o-mini": "gpt-4o-mini", "": "", "gpt-4o-MINI": Other, strings.Repeat("m", 1000): Other,
	} {
		if got := m.Model(in); got != want {
			t.Errorf("Model(%.20q) = %q, want %q", in, got, want)
		}
	}
}

func TestBudgetGauges(t *testing.T) {
	m := newTest(t, Options{})
	var mu sync.Mutex
	committed := int64(1_250_000_000) // 1.25 €
	sawCtx := false
	err := m.ObserveBudgets(func(ctx context.Context) []BudgetReading {
		mu.Lock()
		defer mu.Unlock()
		sawCtx = ctx != nil
		return []BudgetReading{
			{Tenant: "acme", Cap: "eur_per_month", Unit: "nano_eur", Limit: 50_000_000_000, Committed: committed, Reserved: 24000},
			{Tenant: "acme", Agent: "bot", Cap: "tokens_per_day", Unit: "tokens", Limit: 100000, Committed: 4200, Reserved: 800},
			{Tenant: "initech", Cap: "tokens_per_day", Unit: "tokens", Limit: 1},                  // unconfigured tenant: dropped
			{Tenant: "globex", Agent: "mallory", Cap: "tokens_per_day", Unit: "tokens", Limit: 1}, // unconfigured agent: dropped
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_, series := scrape(t, m)
	only(t, series, "flexway_budget_limit",
		`flexway_budget_limit{agent="",cap="eur_per_month",tenant="acme",unit="eur"} 50`,
		`flexway_budget_limit{agent="bot",cap="tokens_per_day",tenant="acme",unit="tokens"} 100000`)
	only(t, series, "flexway_budget_committed",
		`flexway_budget_committed{agent="",cap="eur_per_month",tenant="acme",unit="eur"} 1.25`,
		`flexway_budget_committed{agent="bot",cap="tokens_per_day",tenant="acme",unit="tokens"} 4200`)
	only(t, series, "flexway_budget_reserved",
		`flexway_budget_reserved{agent="",cap="eur_per_month",tenant="acme",unit="eur"} 2.4e-05`,
		`flexway_budget_reserved{agent="bot",cap="tokens_per_day",tenant="acme",unit="tokens"} 800`)

	// Read again at each scrape.
	mu.Lock()
	committed = 2_000_000_000
	mu.Unlock()
	_, series = scrape(t, m)
	want(t, series, `flexway_budget_committed{agent="",cap="eur_per_month",tenant="acme",unit="eur"} 2`)
	mu.Lock()
	defer mu.Unlock()
	if !sawCtx {
		t.Error("the budget callback got no context")
	}
	if err := m.ObserveBudgets(func(context.Context) []BudgetReading { return nil }); err == nil {
		t.Error("a second ObserveBudgets was accepted")
	}
}

func TestCircuitGauges(t *testing.T) {
	m := newTest(t, Options{})
	var mu sync.Mutex
	states := map[string]string{"openai-eu": "open", "local-vllm": "closed", "invented": "open", "": "open"}
	if err := m.ObserveCircuits(func() map[string]string {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(states)
	}); err != nil {
		t.Fatal(err)
	}
	_, series := scrape(t, m)
	only(t, series, "flexway_backend_circuit",
		`flexway_backend_circuit{backend="local-vllm"} 0`,
		`flexway_backend_circuit{backend="openai-eu"} 2`)
	mu.Lock()
	states["openai-eu"], states["local-vllm"] = "half_open", "melted"
	mu.Unlock()
	_, series = scrape(t, m)
	only(t, series, "flexway_backend_circuit",
		`flexway_backend_circuit{backend="local-vllm"} -1`,
		`flexway_backend_circuit{backend="openai-eu"} 1`)
	if err := m.ObserveCircuits(func() map[string]string { return nil }); err == nil {
		t.Error("a second ObserveCircuits was accepted")
	}
}

func TestAuditFailures(t *testing.T) {
	m := newTest(t, Options{})
	_, series := scrape(t, m)
	only(t, series, "flexway_audit_failures_total",
		`flexway_audit_failures_total{reason="closed"} 0`,
		`flexway_audit_failures_total{reason="disk_full"} 0`,
		`flexway_audit_failures_total{reason="file_removed"} 0`,
		`flexway_audit_failures_total{reason="io_error"} 0`,
		`flexway_audit_failures_total{reason="other"} 0`,
		`flexway_audit_failures_total{reason="permission"} 0`,
		`flexway_audit_failures_total{reason="read_only"} 0`)

	const secret = "/srv/secret-tenant-path/audit.log"
	m.AuditFailure("write " + secret + ": no space left on device")
	m.AuditFailure("write " + secret + ": no space left on device")
	m.AuditFailure("open " + secret + ": no such file or directory")
	m.AuditFailure("open " + secret + ": permission denied")
	m.AuditFailure("something nobody foresaw in " + secret)
	m.AuditFailure("disk_full")
	body, series := scrape(t, m)
	if strings.Contains(body, "secret-tenant-path") {
		t.Errorf("error text reached /metrics:\n%s", body)
	}
	only(t, series, "flexway_audit_failures_total",
		`flexway_audit_failures_total{reason="closed"} 0`,
		`flexway_audit_failures_total{reason="disk_full"} 3`,
		`flexway_audit_failures_total{reason="file_removed"} 1`,
		`flexway_audit_failures_total{reason="io_error"} 0`,
		`flexway_audit_failures_total{reason="other"} 1`,
		`flexway_audit_failures_total{reason="permission"} 1`,
		`flexway_audit_failures_total{reason="read_only"} 0`)
}

func TestAuditReason(t *testing.T) {
	for in, want := range map[string]string{
		"write /a: no space left on device":                   "disk_full",
		"write /a: disk quota exceeded":                       "disk_full",
		"open /a: no such file or directory":                  "file_removed",
		"audit: file removed":                                 "file_removed",
		"open /a: permission denied":                          "permission",
		"open /a: read-only file system":                      "read_only",
		"write /a: input/output error":                        "io_error",
		"write /a: file already closed":                       "closed",
		"audit: 12 bytes of lines could not be written to /a": "other",
		"":          "other",
		"read_only": "read_only",
	} {
		if got := AuditReason(in); got != want {
			t.Errorf("AuditReason(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrometheusOff(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := New(Options{Tenants: []string{"acme"}, Readers: []sdkmetric.Reader{reader}})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /metrics with Prometheus off: %d, want 404", rec.Code)
	}
	m.RecordCall(context.Background(), Call{Tenant: "acme", Outcome: "ok", CostNanoEUR: 5})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			names = append(names, mt.Name)
		}
	}
	for _, n := range []string{"flexway.inference.calls", "flexway.inference.cost", "flexway.audit.failures"} {
		if !slices.Contains(names, n) {
			t.Errorf("reader lacks %s: %v", n, names)
		}
	}
	if m.MeterProvider() == nil {
		t.Error("nil MeterProvider")
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	m.RecordCall(context.Background(), chatCall()) // after shutdown: no panic
}

func TestOwnRegistry(t *testing.T) {
	// Two instances side by side: no duplicate registration, separate series.
	a, b := newTest(t, Options{}), newTest(t, Options{})
	a.RecordCall(context.Background(), chatCall())
	_, sa := scrape(t, a)
	_, sb := scrape(t, b)
	want(t, sa, `flexway_inference_calls_total{`+chatLabels+`} 1`)
	only(t, sb, "flexway_inference_calls_total")
	for _, l := range sa {
		if strings.HasPrefix(l, "go_") || strings.HasPrefix(l, "process_") {
			t.Fatalf("default registry collectors leaked in: %s", l)
		}
	}
}

func TestConcurrent(t *testing.T) {
	m := newTest(t, Options{})
	if err := m.ObserveCircuits(func() map[string]string { return map[string]string{"openai-eu": "closed"} }); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 500 {
				c := chatCall()
				if j%2 == 0 {
					c.Model = "invented"
				}
				c.Outcome = []string{"ok", "error"}[i%2]
				m.RecordCall(context.Background(), c)
				if j%100 == 0 {
					m.AuditFailure("closed")
				}
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			scrape(t, m)
		}
	})
	wg.Wait()
	_, series := scrape(t, m)
	want(t, series,
		`flexway_inference_calls_total{`+chatLabels+`} 1000`,
		`flexway_inference_calls_total{`+strings.Replace(chatLabels, `model="gpt-4o-mini"`, `model="other"`, 1)+`} 1000`,
		`flexway_audit_failures_total{reason="closed"} 40`)
}

func TestNewErrors(t *testing.T) {
	m := newTest(t, Options{})
	if err := m.ObserveBudgets(nil); err == nil {
		t.Error("nil budget reader accepted")
	}
	if err := m.ObserveCircuits(nil); err == nil {
		t.Error("nil circuit reader accepted")
	}
}

func BenchmarkRecordCall(b *testing.B) {
	m := newTest(b, Options{})
	ctx := context.Background()
	c := chatCall()
	m.RecordCall(ctx, c)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		m.RecordCall(ctx, c)
	}
}

// BenchmarkObserveHTTP is the HTTP server metric's cost per request.
func BenchmarkObserveHTTP(b *testing.B) {
	m := newTest(b, Options{})
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	m.ObserveHTTP(r, 200, time.Millisecond)
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveHTTP(r, 200, 1234*time.Microsecond)
	}
}

func BenchmarkRecordCallParallel(b *testing.B) {
	m := newTest(b, Options{})
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		calls := []Call{chatCall(), chatCall(), chatCall(), chatCall()}
		calls[1].Tenant, calls[2].Model, calls[3].Outcome = "globex", "invented", "error"
		i := 0
		for pb.Next() {
			m.RecordCall(ctx, calls[i%len(calls)])
			i++
		}
	})
}

// BenchmarkScrape is one GET /metrics with 1000 call series and a few
// gauges: the collection cost moved off the call's path.
func BenchmarkScrape(b *testing.B) {
	tenants := make([]string, 100)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("t%03d", i)
	}
	m := newTest(b, Options{Tenants: tenants, Backends: []string{"b"}, Models: []string{"m"}})
	for i := range 1000 {
		m.RecordCall(context.Background(), Call{Operation: "ai.chatCompletions", Tenant: tenants[i%100], Backend: "b", Model: "m",
			Capability: "chat", MeteredBy: "local", Outcome: []string{"ok", "refused", "error", "canceled", "upstream_error", "ok", "ok", "ok", "ok", "ok"}[i/100],
			InputTokens: 10, OutputTokens: 10, CostNanoEUR: 10})
	}
	h := m.Handler()
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	}
}
