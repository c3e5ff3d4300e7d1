// Package promptlog is the prompt-log interceptor (stage 15 of the AI
// pipeline, DESIGN.md): for a call whose policies turn prompt_logging on,
// it writes one line to that policy's own file (server/promptlog) with
// what went upstream and what went back to the client. It is never the
// audit and never a log line.
//
// Which calls: a chat completion (unary or streamed) or an embeddings
// call whose [call.State].Policies.Logging() — the most specific policy
// with a prompt_logging section — is enabled; a sensitive call
// (State.Sensitive) only when that section also sets include_sensitive.
// Model listings and proxied specialised-model calls carry no prompt and
// are never logged. A call is logged once it has reached the service and
// either succeeded or been tried upstream (its outcome names a backend):
// a call refused before any upstream was tried (by the budget, the
// routing, a prompt guardrail) sent no prompt anywhere and is not logged;
// its audit line records the refusal.
//
// What a line holds:
//   - messages: the request's messages as the service received them,
//     encoded as OpenAI JSON (server/openaiwire). The interceptor is the
//     innermost of the chain, so every other interceptor's rewriting (a
//     prompt guardrail's redaction) is in it. For embeddings, the input,
//     as an array of inputs (["text"], ["a","b"], [[1,2]]).
//   - answer: what the client got. The response guardrails run in the
//     core before the answer is returned or sent, so the unary response
//     and the stream's sent chunks are already what the client sees. A
//     single choice whose message is text only is written as a JSON
//     string (a stream's deltas concatenated); anything else — n > 1,
//     tool calls, a refusal, content parts — as a JSON array of the
//     choices' messages in index order, as OpenAI message objects (a
//     stream's deltas accumulated as OpenAI's SDKs do: content and
//     refusal concatenated, each tool call's id, type and name kept and
//     its arguments concatenated). A call that failed after some chunks
//     were sent has the content sent so far; one that failed before any,
//     "". Embeddings: null (vectors are never logged).
//   - time (the call's start), request_id, tenant, agent and model (as
//     requested).
//
// Cost: the interceptor is in the chain only when a policy turns logging
// on (leave it out otherwise). A unary call whose policies do not log
// pays a context lookup and [policy.Set.Logging], no allocation. A
// stream is wrapped only when [policy.Table.MayLog] says its policies may
// log (asked before its request, and so its model, is known); a stream
// of a caller no logging policy selects is passed on untouched. A logged
// call encodes its messages before the service runs (the service may
// move the request) and its entry is written off the call's path
// ([promptlog.Writer.Write] queues it; a full queue drops and counts it).
package promptlog
