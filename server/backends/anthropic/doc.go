// Package anthropic translates between Flexway's canonical chat model
// (flexway.v1: CreateChatCompletionRequest, ChatCompletion,
// ChatCompletionChunk, OpenAI's shapes) and Anthropic's Messages API wire
// format (POST /v1/messages and its Server-Sent Events), as the
// `anthropic` backend kind's adapter (DESIGN.md, AI pipeline stages 9 and
// 12). It is pure: no network, no configuration, no state that outlives a
// call.
//
//   - [Encode] writes the request body of POST /v1/messages
//     (https://docs.anthropic.com/en/api/messages) and refuses, with a
//     *faults.Error of reason invalid_request naming the field, what the
//     Messages API cannot express;
//   - [Decode] reads a Message answer into a chat completion, and
//     [DecodeError] maps an error answer
//     (https://docs.anthropic.com/en/api/errors) to Flexway's errors;
//   - [Stream] is one call's stream decoder, fed one event at a time
//     (https://docs.anthropic.com/en/docs/build-with-claude/streaming), and
//     server/backends/sse's Reader reads those events from a text/event-stream body.
//
// The request is encoded by hand rather than with
// github.com/anthropics/anthropic-sdk-go/v2's MessageNewParams: the
// translation must decide per field what to map, refuse or drop, which the
// SDK's param types (reflection-based encoding, param.Opt wrappers) do not
// make simpler, and a hand-written body costs no dependency in go.mod.
//
// # Performance
//
// Encode writes the body by hand, byte for byte what json.Marshal wrote,
// reading the request's raw tools, tool_calls, tool_choice and stop with
// server/backends/jsonscan; Decode and the stream's hot events are read
// with jsonscan's Scanner, encoding/json deciding only what those fast
// paths do not read exactly (fuzz targets check that both agree).
package anthropic
