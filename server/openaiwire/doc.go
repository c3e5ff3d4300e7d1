// Package openaiwire converts OpenAI's JSON wire format to and from the
// flexway.v1 messages, for both edges of the gateway: the HTTP front parses
// client requests and writes responses and stream chunks with it, and the
// openai backend writes upstream requests and parses upstream responses and
// chunks with it.
//
// It exists so that the mapping is lossless and written once. The proto
// messages type the fields the gateway reasons about (model, messages,
// max_tokens, usage, ...); every other JSON member of each object, at every
// level, is kept in that message's extra_fields map, JSON name → the member's
// raw JSON text, byte for byte as received, in a string (`"seed": "42"`,
// `"refusal": "null"`; the gRPC listener drops the nulls from the answers
// it sends, see interceptors/wirenull). Parsing then appending gives back a
// document that is semantically identical to the input (key order aside): a
// big `seed`, a vendor extension object, a `tool_calls` delta with
// `"index": 0`, `content: null` beside tool_calls, content parts (never
// flattened), base64 embeddings all survive unchanged.
//
// # Parsing
//
// The Parse functions run a small hand-written JSON scanner over the input
// (no reflection, no intermediate `any` tree). They check that the whole
// input is valid UTF-8 first, then parse in one pass: strings without
// escapes are converted to Go strings with a single copy (a 20 MiB data: URI
// costs one 20 MiB allocation), and each extra_fields value is copied once
// into its string (small values share a few arena blocks; null, true and
// false are constants), so the input may be reused or modified after a Parse
// function returns. Duplicate keys follow encoding/json: the last one wins.
// Nesting deeper than 10000 levels is refused.
//
// A typed field that has presence (max_tokens, stream, name, usage, ...)
// and is given as JSON null is left unset and the `null` is kept in
// extra_fields under its name, so that it is written back as null; the
// typed field, when set, takes precedence over an extra field of the same
// name. Two nulls are typed instead: `content: null` is the null member of
// ChatMessage.content, and `finish_reason: null` is an unset finish_reason.
// Integer fields accept integer literals and integral numbers written with
// a fraction or exponent (`100.0`, `1e2`); any other number is refused.
//
// Client requests ([ParseChatCompletionRequest], [ParseEmbeddingRequest])
// are checked as their docs list and fail with a [*faults.Error] of
// reason [faults.InvalidRequest] whose Param names the field in OpenAI's
// notation (`messages[2].content[1].type`). Upstream responses
// ([ParseChatCompletion], [ParseChatCompletionChunk],
// [ParseEmbeddingResponse]) fail with a plain error that the backend turns
// into [faults.UpstreamError].
//
// # Encoding
//
// The Append functions append one JSON document to dst and return the
// extended slice, in the style of strconv.Append*: typed fields first, in
// OpenAI's usual order, then extra_fields sorted by key. Strings are escaped
// for JSON (quote, backslash, control characters, U+2028 and U+2029);
// invalid UTF-8 in a Go string is written as U+FFFD. An extra_fields value
// that is not exactly one valid JSON value in valid UTF-8 (a message built
// by a gRPC caller, for example) makes [AppendChatCompletionRequest] and
// [AppendEmbeddingRequest] fail with [faults.InvalidRequest]; the response
// encoders, which cannot fail, write such a value as null. Request encoders
// write extra values byte for byte; response encoders compact an extra value
// that holds a line break, so that their output never holds one and a chunk
// always fits one SSE data line. Chunks are written without SSE framing:
// the caller adds "data: " and the blank line.
//
// Every function is safe for concurrent use; none keeps a reference to its
// arguments.
package openaiwire
