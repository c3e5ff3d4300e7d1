// Package a2a translates between Flexway's canonical chat model (flexway.v1)
// and the A2A protocol's JSON-RPC 2.0 binding, for `kind: a2a` backends: an
// agent reached with `message/send` (unary) and `message/stream` (Server-Sent
// Events), per the A2A specification 0.2 and later
// (https://a2a-protocol.org/v0.3.0/specification/, the JSON schema at
// https://github.com/a2aproject/A2A/blob/main/specification/json/a2a.json).
//
// The package is pure: no network, no configuration, no clock. [Encode]
// writes the JSON-RPC request body, [Decode] reads a JSON-RPC response body,
// [DecodeError] maps a non-2xx answer, and a [StreamDecoder] (one per call)
// is fed one SSE event at a time, read with server/backends/sse's Reader.
//
// # Request
//
// The whole chat history becomes the parts of ONE A2A Message of role
// `user` (an agent keeps its own memory by contextId, which a stateless
// gateway does not hold): a conversation of a single user message sends that
// message's parts as they are; a longer one sends every message's text as
// text parts, the first part of each message prefixed with its role
// ("system: ", "assistant: ", ...), so that the agent reads who said what.
// Images become file parts: a data: URI → `file{bytes, mimeType}` (image/jpg
// written image/jpeg), an http(s) URL → `file{uri}`. Fields A2A has no
// counterpart for (tools, temperature, max_tokens, stop, ...) are dropped and
// their names returned; `n` > 1 and images to an agent that takes none are
// refused with [faults.InvalidRequest] naming the field.
//
// # Answer
//
// `message/send` may answer a Message (its text parts are the answer) or a
// Task: `completed` → the text parts of its artifacts (else of its status
// message, else of the last agent message of its history); `input-required`
// and `auth-required` → a normal answer whose content is the agent's
// question (its status message), finish_reason "stop"; `failed`, `rejected`,
// `canceled`, a task still `submitted`/`working`, `auth-required` with no
// status message text (no question to relay), or `unknown` → a
// [faults.UpstreamError] (502). Only an answer (or stream event) carrying
// the request's JSON-RPC id is read; another id, none, or a null id on a
// result is a [faults.UpstreamError] ([DecodeOptions.RequestID]). An agent reports no tokens: the decoded
// usage is always nil and the caller estimates it. Text parts are joined
// with "\n", a data part is written as its JSON text, file parts are not
// content.
//
// # Errors
//
// [DecodeError] maps a non-2xx HTTP answer (401/403 → Flexway's own
// credentials refused, 429 and other 4xx relayed in the OpenAI envelope,
// 5xx/529/garbage → 502); [Decode] and [StreamDecoder.Feed] map JSON-RPC
// error objects and task states; a JSON-RPC error's message is never
// logged (the cause keeps its code and the data's size). All are *faults.Error with the core's
// reasons, so the shared upstream path's fallback and breaker rules
// ([backends.Unavailable]) apply unchanged.
//
// # Performance
//
// The common answers (a Message, a Task completed or asking for input, an
// artifact-update event, all of text parts) are read in one pass by
// server/backends/jsonscan's reflection-free scanner; anything else goes to
// encoding/json, and fuzz
// targets check both read every input alike. No library holds these wire
// types at the protocol version Flexway speaks: github.com/a2aproject/a2a-go's
// current module speaks A2A 1.0 (SendMessage, parts without `kind`), so the
// few structs here are hand-written.
package a2a
