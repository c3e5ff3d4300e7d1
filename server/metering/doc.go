// Package metering is the budget's policy for every call (DESIGN.md,
// "Budget ledger"; stages 8 and 14 of the pipeline): it plans each chat and
// embeddings call (server/routing), holds it to its tenant's and agent's
// caps, and settles what it used.
//
// Before the service runs, [Meter.Reserve] reads the caller's state in the
// ledger (a caller at a hard cap is refused with faults.BudgetExceeded and
// a Retry-After; one past a soft mark is planned on ai.budget.soft_backend
// and marked [call.State].Soft), plans the call into [call.State].Plan,
// estimates it for that plan ([Estimate]) and reserves the estimate priced
// at the planned backend against every cap at once (a planned backend
// whose wire format cannot express the request is skipped first,
// [Config.Check]). After the service
// returns, [Reservation.Settle] commits the reported usage at the price of
// the backend that served (cache reads and writes at their own prices,
// plus a per-call price), an estimate marked usage_estimated when an
// answer was served without usage (a stream cut after output began), or
// releases the reservation when nothing was served: a failing backend
// never drains a budget. Proxied specialised-model calls are metered per
// call or per byte ([Meter.ReserveProxied]).
//
// A [Meter] without a ledger plans every call and meters none, so that
// every call the core serves has its plan made once, here.
//
// The gRPC interceptor that runs it is interceptors/budget; the HTTP front
// asks [Meter.Admit] before it reads a request body.
package metering
