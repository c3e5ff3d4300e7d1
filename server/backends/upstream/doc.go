// Package upstream is the shared upstream path of every backend Flexway
// calls over HTTP: the `kind: openai` backend, an OpenAI-compatible
// upstream (OpenAI itself, vLLM, llama.cpp's server, a cloud vendor's
// compatible endpoint) that serves chat completions, streamed or not, and
// embeddings; the `kind: relay` backend (below); and the kinds whose wire
// format Flexway translates (anthropic, gemini, a2a), which are this same
// backend with [Options.Wire]: the kind's package owns the translation
// ([backends.Wire]: request, answer, stream decoder, error mapping), this
// package owns everything else (TLS, the pool, timeouts, credentials, the
// failure mapping below, Server-Sent Events through server/backends/sse)
// and logs, once per name and never with its value, each request field a
// wire format dropped.
//
// It exists so that the inference core sees one [backends.Backend] per
// configured upstream and never deals with HTTP: a [Backend] builds each
// upstream request from scratch (the caller's headers are never copied),
// adds its own credentials (a token file is re-read at every call), talks
// TLS or mutual TLS over one pooled transport, maps the requested model to
// the one it sends, reads Server-Sent Events without a line length limit,
// and turns every failure into a [*faults.Error] whose reason tells the
// core whether it may fall back:
//
//   - faults.UpstreamError: connection error, 5xx, an unreadable or
//     truncated answer, a 2xx answer that is an OpenAI error object
//     (`{"error": {...}}` without choices or data), an error event inside a
//     stream, a stream cut before `data: [DONE]`, an unreadable token file;
//   - faults.UpstreamError wrapping [backends.ErrUpstreamAuth]: an upstream
//     401 or 403, the upstream refusing the gateway's credentials (not the
//     caller's), which the core does not fall back from; the message says
//     only that, the cause names the backend and its auth setting, and the
//     upstream's body, which may echo the credential, is dropped;
//   - faults.UpstreamTimeout: no response headers within Options.Timeout, or
//     no byte for Options.IdleTimeout while reading an answer;
//   - faults.UpstreamStatus: any other upstream 4xx (429 included), with
//     its status, Content-Type, body (first MiB) and Retry-After kept so
//     that the front relays them as they are;
//   - faults.Canceled: the caller's context was canceled;
//   - with a pool of credentials ([Options.Credentials]), a 429 rests the
//     key and a 401, 402 or 403 sets it aside, and the same request bytes
//     go at once to the next usable key (not a fallback); no key left is
//     faults.RateLimited (earliest Retry-After, never the upstream's body)
//     or faults.UpstreamCredentialsExhausted, neither fallen back from.
//
// Error messages name the backend and the upstream status only (and not
// even the backend for a refused credential). Causes are in
// [faults.Error.Err], for logs; of a failed answer's body they keep the
// media type of its Content-Type and the size read, never the bytes, which
// may echo a prompt or a token (of an error object or event, only its
// type and code, bounded, are kept); of an HTTP client error they keep the
// URL without its user info and query, which may hold a credential.
//
// A `kind: relay` backend, another Flexway, is this backend with
// [Options.IdentityHeaders]: the caller's tenant, agent and sensitivity,
// taken from the call state and never from the caller's headers, are sent
// under the declared names, besides the backend's own credentials and
// client certificate.
//
// JSON encoding and decoding is package openaiwire's, or the wire's; this
// package only moves bytes. A translated backend's upstream 4xx (other
// than 401 and 403) is mapped by its wire into OpenAI's envelope, keeping
// the status and Retry-After.
package upstream
