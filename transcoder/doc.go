// Package transcoder is Flexway's HTTP front: a hand-written OpenAI
// `/v1/*` surface (JSON and SSE) that parses OpenAI JSON into flexway.v1
// messages and calls the gRPC core in-process, through the same interceptor
// chain as external gRPC calls, plus `/healthz`, `/readyz` and RFC 9457
// problem details for everything that is not `/v1/*`.
//
// Errors on `/v1/*` use OpenAI's envelope
// `{"error":{"message","type","param","code"}}`; elsewhere
// `application/problem+json` (RFC 9457).
package transcoder
