// Package telemetry holds Flexway's OpenTelemetry metrics: an SDK
// MeterProvider whose readings are exported on /metrics by the OpenTelemetry
// Prometheus exporter, registered on a prometheus.Registry of its own (never
// the process-wide default one).
//
// # Instruments and their /metrics series
//
// The exporter writes OpenTelemetry names the Prometheus way (dots become
// underscores, the unit and, for counters, _total are appended); target_info
// carries the resource (service.name="flexway"); no otel_scope_* labels.
//
//	OpenTelemetry instrument        unit       /metrics series
//	flexway.inference.cost          EUR        flexway_inference_cost_EUR_total
//	flexway.inference.calls         {call}     flexway_inference_calls_total
//	flexway.inference.tokens        {token}    flexway_inference_tokens_total{direction="input"|"output"}
//	flexway.inference.cache_tokens  {token}    flexway_inference_cache_tokens_total{tier="cache_read"|"cache_write"}
//	flexway.budget.limit            (none)     flexway_budget_limit
//	flexway.budget.committed        (none)     flexway_budget_committed
//	flexway.budget.reserved         (none)     flexway_budget_reserved
//	flexway.backend.circuit         (none)     flexway_backend_circuit
//	flexway.audit.failures          {failure}  flexway_audit_failures_total
//
// The four inference counters carry operation, tenant, agent, backend,
// model, capability, metered_by, feature and outcome. The cost is a float
// counter in euros (nano-euros / 1e9): the audit line and the ledger keep the
// exact nano-euro figure, the metric is for dashboards and alerts. Token
// counters are not touched for a call without tokens (a specialised gRPC
// call metered per call), so no series of zeros appears for it.
//
// flexway.inference.cache_tokens counts the input tokens a provider read
// from (tier="cache_read") or wrote to (tier="cache_write") its prompt
// cache, priced at ai.backends.NAME.price.cache_read and cache_write. They
// are a part of direction="input", which counts every input token: a
// counter of their own rather than more direction values, so that summing
// flexway_inference_tokens_total over direction still gives the tokens
// charged, never cached ones twice. A tier appears once it has counted a
// token.
//
// The budget gauges carry tenant, agent ("" for the tenant's own caps), cap
// (tokens_per_day, tokens_per_month, eur_per_month) and unit. A cap kept in
// nano-euros is exported in euros with unit="eur"; token caps keep
// unit="tokens". They are read at each collection from the callback given to
// [Metrics.ObserveBudgets].
//
// flexway.backend.circuit is one gauge per backend (label backend), read at
// each collection from the callback given to [Metrics.ObserveCircuits]:
// 0 closed, 1 half_open, 2 open (the order of the breaker's states, so that
// "> 0" means "not fully closed"), -1 for a state this package does not
// know.
//
// flexway.audit.failures counts the batches the audit writer could not write,
// by reason: one of a short fixed list ([AuditReasons]) derived from the
// error text, never the text itself. Every reason starts at 0 so that
// increase() and rate() see the first failure.
//
// # Label values
//
// A caller must never be able to mint a series: every label value is checked
// against a closed list and anything else is recorded as "other". Tenants,
// agents, backends, models, features and extra gRPC operations come from the
// configuration through [Options]; capability (chat, vision, embeddings,
// grpc), metered_by (local, upstream), outcome (ok, refused,
// upstream_error, canceled, error) and the built-in operations
// (ai.chatCompletions, ai.embeddings) are fixed here. An empty value (not
// known, or not applicable: no agent, no feature, a gRPC call without a
// model, a call refused before routing) is kept as "" for every label, as
// it mints nothing. Gauges are different: a budget reading or a
// circuit whose tenant, agent or backend is not configured is dropped rather
// than folded into "other", where several would overwrite one another. A
// configured value spelt "other" is indistinguishable from the fallback.
//
// RecordCall touches no OpenTelemetry instrument: each distinct combination
// of (sanitised) labels gets, once, its attribute sets and six atomic
// totals (calls, nano-euros, input, output, cache-read and cache-write tokens); a call adds to them.
// The four inference counters are observable counters whose callback
// reports those cumulative totals at each collection. This keeps the SDK's
// per-measurement attribute work (about 1 µs per Add with nine labels) off
// the call's path, and sums the cost exactly in integer nano-euros, turned
// into euros only on export (no float drift over millions of calls). The
// ctx given to RecordCall is unused (no exemplars).
//
// # OTLP
//
// OTLP export of metrics is not built: the OTLP metric exporter is not a
// dependency of the module. [Options.Readers] lets a caller attach any other
// sdk/metric Reader (an OTLP PeriodicReader, a ManualReader in tests) to the
// same MeterProvider when it is.
package telemetry
