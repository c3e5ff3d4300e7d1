// Package gemini translates between Flexway's canonical chat model
// (flexway.v1, what the OpenAI surface carries) and Google's Gemini API wire
// format: generateContent, streamGenerateContent?alt=sse and
// batchEmbedContents, per the reference at
// https://ai.google.dev/api/generate-content and
// https://ai.google.dev/api/embeddings.
//
// The package is pure: no network, no configuration, no state that outlives
// a call (Decode and ReduceSchema keep scratch buffers in a sync.Pool,
// holding nothing of a call once it returns). [Encode] builds a generateContent body, [Decode] reads its answer,
// [DecodeError] maps an error answer, [NewStream] returns the per-call state
// machine of a streamed answer fed one Server-Sent Event at a time (an
// server/backends/sse's Reader splits a body into events), and [EncodeEmbeddings] /
// [DecodeEmbeddings] translate /v1/embeddings.
//
// Statelessness: what must outlive a call travels in the messages. A tool
// call id Flexway generates is "call_" + 16 random base64url characters,
// unique across turns without a counter; when Gemini attached a
// thoughtSignature to the function call, the id carries it too, after a
// '.', so that the assistant turn the client echoes back restores it on the
// function call part (see [ToolCallID]). A tool result is matched to its
// function's name through the history alone: the assistant turn holding the
// tool call with that id.
//
// Wire types are hand-written structs rather than google.golang.org/genai's:
// tool parameter schemas must pass as reduced raw JSON (genai.Schema is a
// typed subset and would drop keys), and the stream decoder reuses its
// buffers per call. The body is written by hand (byte for byte what
// json.Marshal wrote), the request's raw members and every answer read
// with server/backends/jsonscan, and [ReduceSchema] walks a schema's bytes
// once rather than decoding it to maps.
package gemini
