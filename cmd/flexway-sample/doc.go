// Command flexway-sample is a local, OpenAI-compatible sample model server.
//
// It exists so that a newcomer's offline first run (make run), the gateway's
// tests and its benchmarks have a backend to relay to without network access
// or API keys. It is a sample, not a model: every answer is a fixed sentence
// that says so and echoes the start of the last user message, and every
// embedding is a deterministic vector derived from a hash of the input. Do not
// put it in front of users.
//
// # Usage
//
//	flexway-sample --listen 127.0.0.1:8000 [--name sample]
//	    [--models sample-small,sample-large] [--chunk-delay 30ms] [--chunks 8]
//	    [--require-bearer TOKEN]
//
// Flags:
//
//	--listen          address to listen on (default 127.0.0.1:8000; port 0 picks a free port)
//	--name            owner reported by GET /v1/models (default "sample")
//	--models          comma-separated model names served (default "sample-small,sample-large")
//	--chunk-delay     delay before each streamed content chunk (default 30ms)
//	--chunks          number of content chunks a streamed answer is split into (default 8)
//	--require-bearer  when set, every request needs "Authorization: Bearer TOKEN", else 401
//
// Once listening it prints one line to stdout,
// "flexway-sample listening on http://ADDR/v1 ...", and then logs one line per
// request to stderr with the method, path, status and duration. Message
// content is never logged. SIGINT or SIGTERM shuts it down gracefully.
//
// # Endpoints
//
// All endpoints live under /v1 and answer errors in OpenAI's envelope,
// {"error":{"message":...,"type":...,"param":...,"code":...}}: malformed JSON
// and invalid parameters are 400, a missing or wrong bearer token is 401, an
// unknown path is 404, a wrong method is 405 and a body over 8 MiB is 413.
//
//   - POST /v1/chat/completions returns a chat.completion object, or with
//     "stream": true a text/event-stream of chat.completion.chunk objects: a
//     role-only first chunk, the answer split into --chunks content chunks
//     each preceded by --chunk-delay, a chunk with an empty delta and
//     finish_reason "stop", a usage-only chunk (empty choices) only if
//     stream_options.include_usage is true, and finally "data: [DONE]". With
//     "n" greater than one, every step carries one chunk per choice index.
//     The stream stops as soon as the client goes away. "max_tokens" or
//     "max_completion_tokens" (which wins) cuts each choice's answer after
//     that many tokens (words, see below), with finish_reason "length";
//     a limit below 1 is 400.
//   - POST /v1/embeddings accepts input as a string, an array of strings, an
//     array of token ids or an array of token-id arrays, and returns one
//     vector per input, of 8 dimensions or "dimensions". With
//     "encoding_format": "base64" each vector is the base64 of its
//     little-endian float32 values.
//   - GET /v1/models lists the --models, owned_by --name, and
//     GET /v1/models/{id} returns one of them.
//
// The requested model is echoed back when it is one of --models; any other
// or missing model name is answered as the first of --models, except for the
// test models below.
//
// # Token counts
//
// Usage figures are a deterministic estimate, not a tokenizer: prompt_tokens
// is the number of whitespace-separated words in the text of all messages
// plus 4 per message; completion_tokens is the number of words of the answer
// times the number of choices; total_tokens is their sum. For embeddings,
// prompt_tokens (and total_tokens) is the number of words of each string
// input plus the number of ids of each token input.
//
// # Embedding vectors
//
// Component j of an input's vector is the FNV-1a 64-bit hash of the input
// followed by j as 4 little-endian bytes, mapped to [-1, 1); the vector is
// then scaled to unit length and converted to float32. A string input is
// hashed as its UTF-8 bytes, a token input as its ids written in decimal and
// separated by single spaces.
//
// # Test hooks
//
// Gateway tests can script failures and latency. Request headers, applied to
// every path after the bearer check, delay first and status second:
//
//   - X-Sample-Delay: 200ms sleeps that long (a Go duration) before writing
//     any header.
//   - X-Sample-Status: 503 answers that status (400 to 599) with an OpenAI
//     error body instead of serving the request.
//
// Because the gateway does not copy caller headers upstream, the same
// behaviours are reachable through the requested model name on
// /v1/chat/completions and /v1/embeddings, whether or not it is in --models:
//
//   - model "sample-fail-503" always answers 503 with an OpenAI error body.
//   - model "sample-slow" waits 500ms before writing any header, then answers
//     normally as model "sample-slow".
//
// Every wait ends early when the client goes away.
package main
