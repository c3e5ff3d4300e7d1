// Package server implements Flexway's gRPC services (flexway.v1 ChatService,
// EmbeddingsService, ModelsService) over the inference core they share:
// plan the call ([routing.Table]), try each planned backend in turn under
// the fallback rules, and record who served it with what usage in the
// call's [call.State].
//
// Every call reaches a service through the interceptor chain (identity,
// validation, sensitivity, budget), so the services read the caller from
// the context and never authenticate. Errors are [*faults.Error]; gRPC turns
// them into statuses with a google.rpc.ErrorInfo detail.
package server
