// Command flexway-sample is a local sample model server speaking OpenAI's
// API or, with --wire, Anthropic's Messages API, Gemini's API or A2A.
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
//	flexway-sample --listen 127.0.0.1:8000 [--wire openai|anthropic|gemini|a2a]
//	    [--name sample] [--models sample-small,sample-large] [--chunk-delay 30ms]
//	    [--chunks 8] [--require-bearer TOKEN] [--require-key KEY]
//
// Flags:
//
//	--listen          address to listen on (default 127.0.0.1:8000; port 0 picks a free port)
//	--wire            wire format served (default openai); see "Other wires" below
//	--name            owner reported by GET /v1/models (default "sample")
//	--models          comma-separated model names served (default per wire: openai
//	                  "sample-small,sample-large,sample-words", anthropic "sample-claude", gemini
//	                  "sample-gemini,sample-gemini-embedding", a2a "sample-agent")
//	--chunk-delay     delay before each streamed content chunk (default 30ms)
//	--chunks          number of content chunks a streamed answer is split into (default 8)
//	--require-bearer  when set, every request needs "Authorization: Bearer TOKEN", else 401
//	                  (openai and a2a wires)
//	--require-key     when set, every anthropic request needs x-api-key: KEY (or the bearer
//	                  token anthropic-sdk-go sends), else 401; every gemini request needs
//	                  x-goog-api-key: KEY or ?key=KEY, else 403 (none) or 400 (wrong)
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
//   - The pieces mode: a last user message that is exactly the JSON object
//     {"pieces": ["4111 1111 ", "1111 1111"]} (the key alone, 1 to 1024
//     strings) is answered with the pieces concatenated instead of the
//     echo, and a stream sends exactly those pieces as its content
//     deltas (whatever --chunks says), so that a text split at a chosen
//     place — a card number across two chunks, for a response guardrail —
//     can be shown. max_tokens, when it cuts, falls back to --chunks.
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
//
// # Other wires
//
// With --wire other than openai the sample speaks that provider's format
// byte for byte, as recorded in server/backends/{anthropic,gemini,a2a}/testdata,
// so that Flexway's backend kinds of the same names can be tried and tested
// offline. Each answer is the sentence above naming the format, e.g. "This
// is flexway-sample (model sample-claude, speaking Anthropic Messages), a
// local sample model, not a real LLM. You said: ...". Token counts follow
// the rules above. The header hooks and the test models apply to every
// wire, their errors in the wire's own shape.
//
//   - anthropic (https://docs.anthropic.com/en/api/messages): POST
//     /v1/messages, which needs an anthropic-version header (else 400),
//     model, max_tokens and messages. The answer is a Message, or with
//     "stream": true the event stream message_start, content_block_start,
//     ping, content_block_delta (--chunks of them), content_block_stop,
//     message_delta (stop_reason, output_tokens), message_stop, each framed
//     "event: TYPE\ndata: JSON\n\n". max_tokens cuts the answer (stop_reason
//     max_tokens), stop_sequences too (stop_sequence). The sample plays a
//     prompt cache: the system prompt's words are cache_read_input_tokens,
//     words of blocks marked cache_control are cache_creation_input_tokens,
//     input_tokens the rest. Errors are {"type":"error","error":{"type",
//     "message"},"request_id"}, the type following the status as the API's
//     does (invalid_request_error, authentication_error, not_found_error,
//     rate_limit_error, api_error, overloaded_error for 529).
//   - gemini (https://ai.google.dev/api/generate-content): POST
//     {base}/models/{model}:generateContent, :streamGenerateContent
//     (?alt=sse: "data: JSON\r\n\r\n" events, usageMetadata cumulative on
//     each, finishReason on the last; without alt=sse one JSON array),
//     :batchEmbedContents and :embedContent (the vectors of /v1/embeddings,
//     outputDimensionality or 8 values). JSON answers are indented by two
//     spaces, as Google's are. The system instruction's words are
//     cachedContentTokenCount, included in promptTokenCount.
//     generationConfig.maxOutputTokens cuts the answer (MAX_TOKENS). Errors
//     are {"error":{"code","message","status"}} with Google's status names.
//   - a2a (https://a2a-protocol.org/latest/specification/): JSON-RPC 2.0 at
//     POST /. message/send answers a Message, or a completed Task with the
//     answer as its artifact when the user text contains "task";
//     message/stream answers SSE of JSON-RPC responses: the Task
//     (submitted), a status-update (working), --chunks artifact-updates
//     (append after the first, lastChunk on the last) and a final
//     status-update (completed, final: true). The echoed text is the last
//     "user: " turn of the message's parts, as Flexway's a2a kind writes a
//     chat history. JSON-RPC errors: -32700 parse, -32600 invalid request,
//     -32601 unknown method, -32602 invalid params, -32001 for tasks/*.
//     GET /.well-known/agent-card.json (or agent.json) is the agent card,
//     served without the bearer check. No tokens are reported.
//
// Tools: when an anthropic or gemini request declares tools and the last
// user text names one (or tool_choice / functionCallingConfig forces one),
// the answer also calls it: a tool_use block (stop_reason tool_use) or a
// functionCall part (carrying a thoughtSignature, as Gemini 2.5 sends), its
// arguments every required property of the tool's schema, strings set to
// the start of the user text. A turn that carries tool results is answered
// in text, echoing them. tool_choice none and mode NONE call nothing.
package main
