// Package faults is Flexway's one coded error: every refusal and failure of
// the core (identity, budget, routing, backends) is a [*Error] carrying a
// gRPC code and a [Reason] from a closed list. The core returns it; only the
// edges turn it into a gRPC status ([Error.GRPCStatus], with a
// google.rpc.ErrorInfo detail) or an HTTP response ([HTTPStatus]).
//
// The reasons are the OpenAI error `code` values of the DESIGN.md error
// table, so that the HTTP front picks the OpenAI `code` and `type` from the
// status detail without parsing messages.
package faults
