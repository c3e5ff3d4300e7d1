// Package server implements Flexway's gRPC services (flexway.v1 ChatService,
// EmbeddingsService, ModelsService) over the inference core they share:
// try each backend of the call's plan in turn under the fallback rules
// (one attempt runner, runPlan in attempt.go, for every kind of call), and record
// who served it with what usage in the call's [call.State].
//
// Every call reaches a service through the interceptor chain (identity,
// validation, sensitivity, budget), so the services read the caller from
// the context and never authenticate, and read the plan the budget
// interceptor made (server/metering) instead of planning. Errors are
// [*faults.Error]; gRPC turns them into statuses with a
// google.rpc.ErrorInfo detail.
package server
