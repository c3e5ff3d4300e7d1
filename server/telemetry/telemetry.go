package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/resource"
)

// Other is the label value recorded for a value not in its allowed list.
const Other = "other"

// ScopeName is the instrumentation scope of Flexway's own instruments.
const ScopeName = "github.com/flexway/flexway/server/telemetry"

// Options configures [New].
type Options struct {
	// Prometheus exports the metrics on [Metrics.Handler].
	Prometheus bool
	// Tenants, Agents, Backends and Models are the label values allowed,
	// from the configuration; anything else is recorded as "other". ""
	// (not known or not applicable: a tenant's call without an agent, a
	// call refused before routing) is always allowed, for every label.
	Tenants, Agents, Backends, Models []string
	// Operations are the gRPC methods of specialised models allowed as the
	// operation label, besides ai.chatCompletions and ai.embeddings.
	Operations []string
	// Features are the (flexway.v1.operation).ai.feature values allowed.
	Features []string
	// Aliases and Arms are the alias and arm label values allowed
	// (ai.aliases names; arm names, target indices, below and above).
	Aliases, Arms []string
	// Readers are further readers of the MeterProvider (an OTLP periodic
	// reader, a manual reader in tests).
	Readers []sdkmetric.Reader
	// Views reshape instruments of other instrumentation on the same
	// provider (otelhttp, otelgrpc), e.g. to keep only bounded attributes.
	Views []sdkmetric.View
}

// Metrics holds the MeterProvider, its exporter and Flexway's instruments.
// It is safe for concurrent use.
type Metrics struct {
	provider  *sdkmetric.MeterProvider
	handler   http.Handler
	meter     metric.Meter
	exporting bool

	cost   metric.Float64ObservableCounter
	calls  metric.Int64ObservableCounter
	tokens metric.Int64ObservableCounter
	// cacheTokens is flexway.inference.cache_tokens, by tier.
	cacheTokens metric.Int64ObservableCounter
	audit       metric.Int64Counter

	budgetLimit, budgetCommitted, budgetReserved metric.Float64ObservableGauge
	circuit                                      metric.Int64ObservableGauge
	httpDuration                                 metric.Float64Histogram
	// credentialCalls is flexway.upstream.credential.calls; credentialSets
	// caches its attribute sets (credentialKey → metric.AddOption).
	credentialCalls metric.Int64Counter
	credentialSets  sync.Map
	// wouldDeny is flexway.policy.would_deny and guardrailMatches
	// flexway.guardrail.matches; their sets cache their attribute sets.
	wouldDeny        metric.Int64Counter
	wouldDenySets    counterSets[wouldDenyKey]
	guardrailMatches metric.Int64Counter
	guardrailSets    counterSets[guardrailKey]

	tenants, agents, backends, models, operations, features map[string]string
	aliases, arms                                           map[string]string

	series      sync.Map // callKey → *callSeries
	httpSets    sync.Map // httpKey → metric.RecordOption
	auditSets   map[string]metric.AddOption
	observeOnce struct{ budgets, circuits sync.Once }
	// promptLogOnce guards ObservePromptLogs.
	promptLogOnce sync.Once
	shutdown      sync.Once
	shutdownErr   error
}

// New builds the MeterProvider and its instruments, with the Prometheus
// exporter on a registry of its own when o.Prometheus is set.
func New(o Options) (*Metrics, error) {
	m := &Metrics{
		tenants:    allow(o.Tenants),
		agents:     allow(o.Agents),
		backends:   allow(o.Backends),
		models:     allow(o.Models),
		operations: allow(o.Operations, "ai.chatCompletions", "ai.embeddings"),
		features:   allow(o.Features),
		aliases:    allow(o.Aliases),
		arms:       allow(o.Arms),
		handler:    http.NotFoundHandler(),
	}
	res := resource.NewSchemaless(attribute.String("service.name", "flexway"))
	// No exemplars: Prometheus's text format does not carry them, and
	// offering every measurement to a reservoir is a cost on every call.
	opts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter)}
	if o.Prometheus {
		reg := prometheus.NewRegistry()
		exp, err := otelprom.New(
			otelprom.WithRegisterer(reg),
			otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
			otelprom.WithoutScopeInfo(),
		)
		if err != nil {
			return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
		}
		opts = append(opts, sdkmetric.WithReader(exp))
		m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	}
	if len(o.Views) > 0 {
		opts = append(opts, sdkmetric.WithView(o.Views...))
	}
	for _, r := range o.Readers {
		opts = append(opts, sdkmetric.WithReader(r))
	}
	m.exporting = o.Prometheus || len(o.Readers) > 0
	m.provider = sdkmetric.NewMeterProvider(opts...)
	m.meter = m.provider.Meter(ScopeName)

	if err := m.instruments(); err != nil {
		_ = m.provider.Shutdown(context.Background())
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	m.auditSets = make(map[string]metric.AddOption, len(auditReasons))
	for _, r := range auditReasons {
		opt := metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r)))
		m.auditSets[r] = opt
		m.audit.Add(context.Background(), 0, opt)
	}
	return m, nil
}

func (m *Metrics) instruments() error {
	var errs [10]error
	m.cost, errs[0] = m.meter.Float64ObservableCounter("flexway.inference.cost",
		metric.WithUnit("EUR"), metric.WithDescription("Cost of inference calls committed to the budgets, in euros."))
	m.calls, errs[1] = m.meter.Int64ObservableCounter("flexway.inference.calls",
		metric.WithUnit("{call}"), metric.WithDescription("Inference calls, by outcome."))
	m.tokens, errs[2] = m.meter.Int64ObservableCounter("flexway.inference.tokens",
		metric.WithUnit("{token}"), metric.WithDescription("Tokens of inference calls, by direction (input, output)."))
	m.audit, errs[3] = m.meter.Int64Counter("flexway.audit.failures",
		metric.WithUnit("{failure}"), metric.WithDescription("Audit batches that could not be written, by reason; inference calls are refused meanwhile."))
	m.budgetLimit, errs[4] = m.meter.Float64ObservableGauge("flexway.budget.limit",
		metric.WithDescription("Budget cap limit per tenant, agent and cap (tokens, or euros for unit=\"eur\")."))
	m.budgetCommitted, errs[5] = m.meter.Float64ObservableGauge("flexway.budget.committed",
		metric.WithDescription("Usage committed against a budget cap in its current period (tokens, or euros for unit=\"eur\")."))
	m.budgetReserved, errs[6] = m.meter.Float64ObservableGauge("flexway.budget.reserved",
		metric.WithDescription("Usage held by unexpired reservations against a budget cap (tokens, or euros for unit=\"eur\")."))
	m.circuit, errs[7] = m.meter.Int64ObservableGauge("flexway.backend.circuit",
		metric.WithDescription("Circuit breaker state per backend: 0 closed, 1 half_open, 2 open, -1 unknown."))
	m.httpDuration, errs[8] = m.meter.Float64Histogram("http.server.request.duration",
		metric.WithUnit("s"), metric.WithDescription("Duration of HTTP server requests."),
		metric.WithExplicitBucketBoundaries(httpDurationBuckets...))
	m.cacheTokens, errs[9] = m.meter.Int64ObservableCounter("flexway.inference.cache_tokens",
		metric.WithUnit("{token}"), metric.WithDescription("Input tokens of inference calls the providers read from or wrote to their prompt caches, by tier (cache_read, cache_write); a part of flexway.inference.tokens' input, not added to it."))
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	if err := m.credentialInstrument(); err != nil {
		return err
	}
	if err := m.policyInstrument(); err != nil {
		return err
	}
	_, err := m.meter.RegisterCallback(m.observeCalls, m.cost, m.calls, m.tokens, m.cacheTokens)
	return err
}

// Handler serves /metrics in the Prometheus text format; it answers 404
// when the Prometheus exporter is off.
func (m *Metrics) Handler() http.Handler { return m.handler }

// Exporting reports whether anything reads the metrics: the Prometheus
// exporter or another reader. When false, instrumenting a server (otelhttp,
// otelgrpc) only costs time, and callers may leave it out.
func (m *Metrics) Exporting() bool { return m.exporting }

// MeterProvider is the provider for other instrumentation (otelgrpc,
// otelhttp), exported alongside Flexway's own instruments.
func (m *Metrics) MeterProvider() metric.MeterProvider { return m.provider }

// Shutdown flushes and stops the readers; later calls return the first
// call's result.
func (m *Metrics) Shutdown(ctx context.Context) error {
	m.shutdown.Do(func() { m.shutdownErr = m.provider.Shutdown(ctx) })
	return m.shutdownErr
}

// Call is one inference call, as the metrics see it.
type Call struct {
	// Operation is ai.chatCompletions, ai.embeddings or the gRPC method of
	// a specialised model.
	Operation, Tenant, Agent, Backend, Model string
	// Capability is chat, vision, embeddings or grpc.
	Capability string
	// MeteredBy is local or upstream.
	MeteredBy string
	// Feature is a specialised model's feature, "" otherwise.
	Feature string
	// Outcome is ok, refused, upstream_error, canceled or error.
	Outcome string
	// Alias and Arm are the alias the call was routed by and the serving
	// target's arm; "" for a call that named no alias, whose series carry
	// neither label.
	Alias, Arm string
	// InputTokens and OutputTokens are the usage committed; InputTokens
	// counts every input token, cached ones included.
	InputTokens, OutputTokens int64
	// CacheReadTokens and CacheWriteTokens are how many of InputTokens the
	// provider read from and wrote to its prompt cache.
	CacheReadTokens, CacheWriteTokens int64
	// CostNanoEUR is the cost committed, in nano-euros.
	CostNanoEUR int64
}

// Fixed label values.
var (
	capabilities = allow(nil, "chat", "vision", "embeddings", "grpc")
	meteredBy    = allow(nil, "local", "upstream")
	outcomes     = allow(nil, "ok", "refused", "upstream_error", "canceled", "error")
	caps         = allow(nil, "tokens_per_day", "tokens_per_month", "eur_per_month")
)

// callKey is the sanitised label values of a call.
type callKey struct {
	operation, tenant, agent, backend, model, capability, meteredBy, feature, outcome string
	alias, arm                                                                        string
}

// callSeries is the running totals of a callKey and its cached
// attribute sets.
type callSeries struct {
	calls, costNano, in, out    atomic.Int64
	cacheRead, cacheWrite       atomic.Int64
	call, inSet, outSet         metric.ObserveOption
	cacheReadSet, cacheWriteSet metric.ObserveOption
}

// RecordCall adds one call, its cost and its tokens to the totals of its
// (sanitised) labels. Negative amounts are ignored. The totals are
// exported at each collection: the cost is summed exactly in nano-euros
// and converted to euros only then.
func (m *Metrics) RecordCall(_ context.Context, c Call) {
	k := callKey{
		operation:  pick(m.operations, c.Operation),
		tenant:     pick(m.tenants, c.Tenant),
		agent:      pick(m.agents, c.Agent),
		backend:    pick(m.backends, c.Backend),
		model:      pick(m.models, c.Model),
		capability: pick(capabilities, c.Capability),
		meteredBy:  pick(meteredBy, c.MeteredBy),
		feature:    pick(m.features, c.Feature),
		outcome:    pick(outcomes, c.Outcome),
	}
	if c.Alias != "" {
		k.alias, k.arm = pick(m.aliases, c.Alias), pick(m.arms, c.Arm)
	}
	s := m.seriesFor(k)
	s.calls.Add(1)
	if c.CostNanoEUR > 0 {
		s.costNano.Add(c.CostNanoEUR)
	}
	if c.InputTokens > 0 {
		s.in.Add(c.InputTokens)
	}
	if c.OutputTokens > 0 {
		s.out.Add(c.OutputTokens)
	}
	if c.CacheReadTokens > 0 {
		s.cacheRead.Add(c.CacheReadTokens)
	}
	if c.CacheWriteTokens > 0 {
		s.cacheWrite.Add(c.CacheWriteTokens)
	}
}

// Model returns the model label of a call to model v: v when it is one
// of [Options.Models] (the configuration's declared models) or "", else
// [Other]. The audit line records a requested model through it, so that
// what a caller names reaches neither a series nor the audit unless it is
// declared.
func (m *Metrics) Model(v string) string { return pick(m.models, v) }

func (m *Metrics) seriesFor(k callKey) *callSeries {
	if v, ok := m.series.Load(k); ok {
		return v.(*callSeries)
	}
	base := []attribute.KeyValue{
		attribute.String("operation", k.operation),
		attribute.String("tenant", k.tenant),
		attribute.String("agent", k.agent),
		attribute.String("backend", k.backend),
		attribute.String("model", k.model),
		attribute.String("capability", k.capability),
		attribute.String("metered_by", k.meteredBy),
		attribute.String("feature", k.feature),
		attribute.String("outcome", k.outcome),
	}
	if k.alias != "" {
		// Only a call routed by an alias has these labels.
		base = append(base, attribute.String("alias", k.alias), attribute.String("arm", k.arm))
	}
	with := func(kv ...attribute.KeyValue) metric.ObserveOption {
		all := append(append(make([]attribute.KeyValue, 0, len(base)+1), base...), kv...)
		return metric.WithAttributeSet(attribute.NewSet(all...))
	}
	s := &callSeries{
		call:   with(),
		inSet:  with(attribute.String("direction", "input")),
		outSet: with(attribute.String("direction", "output")),
		// The configuration's price keys name the tiers.
		cacheReadSet:  with(attribute.String("tier", "cache_read")),
		cacheWriteSet: with(attribute.String("tier", "cache_write")),
	}
	v, _ := m.series.LoadOrStore(k, s)
	return v.(*callSeries)
}

// observeCalls reports the totals of every label combination seen; a
// token direction or cache tier appears once it has counted a token.
func (m *Metrics) observeCalls(_ context.Context, o metric.Observer) error {
	m.series.Range(func(_, v any) bool {
		s := v.(*callSeries)
		o.ObserveInt64(m.calls, s.calls.Load(), s.call)
		o.ObserveFloat64(m.cost, float64(s.costNano.Load())/1e9, s.call)
		if n := s.in.Load(); n > 0 {
			o.ObserveInt64(m.tokens, n, s.inSet)
		}
		if n := s.out.Load(); n > 0 {
			o.ObserveInt64(m.tokens, n, s.outSet)
		}
		if n := s.cacheRead.Load(); n > 0 {
			o.ObserveInt64(m.cacheTokens, n, s.cacheReadSet)
		}
		if n := s.cacheWrite.Load(); n > 0 {
			o.ObserveInt64(m.cacheTokens, n, s.cacheWriteSet)
		}
		return true
	})
	return nil
}

// BudgetReading is one cap of one account: Tenant, Agent ("" for the
// tenant's own caps), Cap (tokens_per_day, tokens_per_month,
// eur_per_month) and Unit (tokens or nano_eur), with the figures in that
// unit.
type BudgetReading struct {
	Tenant, Agent, Cap, Unit   string
	Limit, Committed, Reserved int64
}

// ObserveBudgets has read called at each collection (with the collection's
// context) for the flexway.budget.* gauges. Readings of an unconfigured
// tenant or agent are dropped; nano_eur figures are exported in euros
// (unit="eur"). Only the first call registers a callback.
func (m *Metrics) ObserveBudgets(read func(ctx context.Context) []BudgetReading) error {
	if read == nil {
		return errors.New("telemetry: ObserveBudgets: nil read")
	}
	err := errors.New("telemetry: ObserveBudgets called twice")
	m.observeOnce.budgets.Do(func() {
		_, err = m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
			for _, r := range read(ctx) {
				tenant, ok1 := m.tenants[r.Tenant]
				agent, ok2 := m.agents[r.Agent]
				if !ok1 || !ok2 || tenant == "" {
					continue
				}
				unit, scale := "tokens", 1.0
				if r.Unit == "nano_eur" {
					unit, scale = "eur", 1e-9
				} else if r.Unit != "tokens" {
					unit = Other
				}
				opt := metric.WithAttributeSet(attribute.NewSet(
					attribute.String("tenant", tenant),
					attribute.String("agent", agent),
					attribute.String("cap", pick(caps, r.Cap)),
					attribute.String("unit", unit),
				))
				o.ObserveFloat64(m.budgetLimit, float64(r.Limit)*scale, opt)
				o.ObserveFloat64(m.budgetCommitted, float64(r.Committed)*scale, opt)
				o.ObserveFloat64(m.budgetReserved, float64(r.Reserved)*scale, opt)
			}
			return nil
		}, m.budgetLimit, m.budgetCommitted, m.budgetReserved)
		if err != nil {
			err = fmt.Errorf("telemetry: budgets: %w", err)
		}
	})
	return err
}

// Circuit state values of flexway.backend.circuit.
const (
	CircuitClosed   = 0
	CircuitHalfOpen = 1
	CircuitOpen     = 2
	CircuitUnknown  = -1
)

// CircuitValue is the gauge value of a breaker state name: closed 0,
// half_open 1, open 2, anything else -1.
func CircuitValue(state string) int64 {
	switch state {
	case "closed":
		return CircuitClosed
	case "half_open":
		return CircuitHalfOpen
	case "open":
		return CircuitOpen
	}
	return CircuitUnknown
}

// ObserveCircuits has read called at each collection for the
// flexway.backend.circuit gauge: backend name → state (closed, half_open,
// open). Unconfigured backends are dropped. Only the first call registers
// a callback.
func (m *Metrics) ObserveCircuits(read func() map[string]string) error {
	if read == nil {
		return errors.New("telemetry: ObserveCircuits: nil read")
	}
	err := errors.New("telemetry: ObserveCircuits called twice")
	m.observeOnce.circuits.Do(func() {
		_, err = m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			for name, state := range read() {
				b, ok := m.backends[name]
				if !ok || b == "" {
					continue
				}
				o.ObserveInt64(m.circuit, CircuitValue(state), metric.WithAttributeSet(attribute.NewSet(attribute.String("backend", b))))
			}
			return nil
		}, m.circuit)
		if err != nil {
			err = fmt.Errorf("telemetry: circuits: %w", err)
		}
	})
	return err
}

// AuditReasons returns the values of the reason label of
// flexway.audit.failures.
func AuditReasons() []string { return slices.Clone(auditReasons) }

var auditReasons = []string{"disk_full", "file_removed", "permission", "read_only", "io_error", "closed", Other}

// AuditReason derives the reason label from a failure's description (an
// error text, or already one of [AuditReasons]): a fixed category, never
// the text itself.
func AuditReason(reason string) string {
	for _, r := range auditReasons {
		if reason == r {
			return r
		}
	}
	s := strings.ToLower(reason)
	switch {
	case strings.Contains(s, "no space left"), strings.Contains(s, "quota"), strings.Contains(s, "file too large"):
		return "disk_full"
	case strings.Contains(s, "no such file"), strings.Contains(s, "not exist"), strings.Contains(s, "removed"),
		strings.Contains(s, "stale file handle"):
		return "file_removed"
	case strings.Contains(s, "permission denied"), strings.Contains(s, "operation not permitted"), strings.Contains(s, "access is denied"):
		return "permission"
	case strings.Contains(s, "read-only file system"):
		return "read_only"
	case strings.Contains(s, "input/output error"), strings.Contains(s, "i/o error"):
		return "io_error"
	case strings.Contains(s, "closed"):
		return "closed"
	}
	return Other
}

// AuditFailure counts one audit batch that could not be written; reason
// is reduced to one of [AuditReasons] by [AuditReason]. Its signature fits
// audit.Options.OnFailure.
func (m *Metrics) AuditFailure(reason string) {
	m.audit.Add(context.Background(), 1, m.auditSets[AuditReason(reason)])
}

// allow is the set of allowed values, each mapped to itself; "" (not
// known, or not applicable) is always allowed.
func allow(values []string, always ...string) map[string]string {
	set := make(map[string]string, len(values)+len(always)+1)
	set[""] = ""
	for _, v := range append(always, values...) {
		set[v] = v
	}
	return set
}

// pick is v when allowed, else "other".
func pick(set map[string]string, v string) string {
	if s, ok := set[v]; ok {
		return s
	}
	return Other
}
