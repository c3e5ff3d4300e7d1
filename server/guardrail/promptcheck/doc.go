// Package promptcheck is the prompt phase of the guardrails (stage 5 of
// DESIGN.md's AI pipeline): it walks every text of a chat or embeddings
// request, applies the prompt rules of the call's policies to them, and
// rewrites the request in place where a rule redacts, before anything is
// reserved or sent upstream. The interceptor (interceptors/guardrails)
// is its adapter; everything it decides is here.
//
// The texts checked, with the location a webhook is told:
//
//   - every message of every role (system, developer, user, assistant,
//     tool): its string content (messages[1].content), each text part
//     (messages[2].content[0].text), a replayed refusal part
//     (messages[2].content[1].refusal), the message's refusal and
//     reasoning_content strings (messages[3].refusal,
//     messages[3].reasoning_content), and every string of its tool calls:
//     their arguments (messages[3].tool_calls[0].function.arguments),
//     ids, types and names, decoded from the raw tool_calls JSON (\u
//     escapes included) and encoded back only when a rule changed them,
//     every other byte of that JSON kept as sent. tool_calls must have
//     OpenAI's shape (server/toolcalls: an array of objects, a function
//     object, string arguments, no key twice): another is a 400
//     invalid_request_error with param messages[i].tool_calls before any
//     rule runs, since a translation or a lenient upstream might read it
//     another way than the check did. A webhook gets the arguments, not
//     the ids, types and names.
//     The arguments are JSON themselves: the strings in them are checked
//     decoded too (a card written "\u0034111…" inside the arguments is a
//     card to the tool), and arguments a rule changes go up with their
//     strings written without such escapes;
//   - an embeddings call's input: the one string (input) or each string
//     (input[1]); token ids are not text and are not checked.
//
// The whole conversation is checked, not only its last message; each text
// on its own (a match does not span two texts).
//
// How rules apply, every matching policy's rules together:
//
//   - the text rules (pii, secrets, injection, banned, regex) first: a
//     deny match refuses the call, and deny wins over every redaction; a
//     redact match becomes [REDACTED:<entity>] in what goes upstream; log
//     lets the call go on;
//   - then the whole rules, most specific policy first, over the texts as
//     redacted: json_schema (with a schema) requires the last user
//     message's content to be JSON valid against it (an embeddings call
//     has no user message: the rule does nothing there); webhook asks the
//     operator's service (server/guardrail/webhook), whose deny refuses
//     and whose replace rewrites the texts it names. The first refusal
//     stops the phase: no further webhook is asked.
//
// A rule of a shadow policy changes nothing: its matches are recorded as
// would_deny or would_redact. Each rule that matched is recorded once per
// (policy, rule type, action) with [call.State.AddGuardrail], phase
// prompt; a refused call records no redact verdict (nothing was sent).
//
// A refusal is a *faults.Error with reason guardrail_violation (HTTP 403,
// gRPC PERMISSION_DENIED) whose message names the policy and the rule's
// type — `policy "pii-guard" refuses the prompt: guardrail pii` — and
// never the matched text; a json_schema refusal adds where the content
// fails the schema (a JSON pointer and the keyword, not a value), a
// webhook's the reason its answer gave.
package promptcheck
