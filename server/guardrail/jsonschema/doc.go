// Package jsonschema is the guardrails' json_schema rule (issue 17): a text
// must be one JSON value valid against a JSON Schema. It wraps
// github.com/santhosh-tekuri/jsonschema/v6 (drafts 4 to 2020-12; a schema
// without $schema is 2020-12) and is pure: no network, no configuration
// types.
//
// Where schemas come from:
//
//   - the prompt phase, a rule's `schema`: inline ([Compile], the decoded
//     YAML or JSON value) or `file:` ([CompileFile]); the last user
//     message's content must validate;
//   - the response phase, the request's
//     response_format {"type": "json_schema", "json_schema": {"schema": …}}
//     ([FromResponseFormat]): the final answer's content must validate.
//     response_format of type text or json_object has no schema and the
//     rule does nothing (json_object is not even checked for being JSON:
//     issue 17 says a rule without a schema in the request does nothing,
//     and the upstream's JSON mode is its own contract);
//     json_schema.strict is ignored: the answer is validated either way;
//   - a tool call in the answer: its arguments are validated against the
//     request's own tool's function.parameters ([FromTools]), not against
//     response_format. Issue 17 names response_format.json_schema for both,
//     but that schema describes the message content, and what a caller
//     expects of a tool call is that its arguments fit the tool it
//     declared. A call to a tool the request did not declare is a
//     violation; a declared tool without parameters is not checked.
//
// A request's schema is compiled once and kept: compiled schemas are cached
// by the SHA-256 of their bytes in a bounded LRU ([CacheSize] entries), so
// a caller sending the same response_format on every call pays the compile
// once (BenchmarkFromResponseFormat: compile vs cached).
//
// No reference is ever fetched: a $ref or $schema naming anything but the
// schema itself or a JSON Schema metaschema (embedded in the library) is a
// compile error ([ErrRemoteRef]); an operator's `file:` schema may also
// reference other local files. Format keywords are annotations, as the
// 2020-12 draft says (not asserted); patterns are Go RE2, linear in the
// text.
//
// Errors say where a text fails — the instance location (a JSON pointer
// into the text, which names the text's own property names) and the
// keyword — briefly, and never quote the text's values: they may end up
// in a 403's message or in logs.
package jsonschema
