// Package backends declares what the inference core asks of a backend, the
// upstream that serves a call. Each kind lives in its own package below
// (server/backends/upstream, ...); the core only sees [Backend].
package backends

import (
	"context"
	"errors"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
)

// ErrUpstreamAuth is the cause (faults.Error.Err) of the
// faults.UpstreamError a backend returns when its upstream refused the
// gateway's own credentials (HTTP 401 or 403). Such a refusal is not relayed
// to the caller, whose key is not the one refused, and is not fallen back
// from: like any other upstream 4xx, it is no transient failure. Test for it
// with errors.Is.
var ErrUpstreamAuth = errors.New("upstream refused the gateway's credentials")

// ErrRequestCaused is the cause (faults.Error.Err) of the
// faults.UpstreamError a backend returns when a healthy upstream answered
// in a way the call's own request explains, so that the failure says
// nothing of the backend's health:
//   - a 2xx answer of a media type the call did not ask for: an event
//     stream (text/event-stream, or a body of SSE `data:` lines) to a unary
//     call, or a whole JSON completion (with choices, not an error object)
//     to a stream call, which a carried field of the request may have
//     asked for;
//   - an answer too large to be read (over 64 MiB, or one stream event
//     over 64 MiB), which the request's own n and max_tokens explain.
//
// Such a failure never counts against the backend's circuit breaker (it
// would let one caller open a circuit every tenant shares) and is not
// fallen back from: the next backend would be asked the same. Everything
// else that fails after the request was sent (a connection error, a 5xx, a
// timeout, a 2xx answer that is garbage or an error object) is the
// backend's. Test for it with errors.Is.
var ErrRequestCaused = errors.New("the upstream's answer is explained by the call's own request")

// Backend serves chat completions and embeddings. Implementations are safe
// for concurrent use. Errors are *faults.Error:
//   - faults.UpstreamStatus for an upstream 4xx other than 401 and 403
//     (429 included), with the status and body kept for relay;
//   - faults.UpstreamError wrapping [ErrUpstreamAuth] for an upstream 401
//     or 403: the upstream refused the gateway's credentials, which the
//     caller is not told as if its own key were refused, and which is never
//     fallen back from; no upstream body is kept;
//   - faults.UpstreamError for a connection error, a 5xx or an unreadable
//     answer; wrapping [ErrRequestCaused] when the call's own request
//     explains the failure;
//   - faults.UpstreamTimeout for a timeout, and faults.Canceled when ctx was
//     canceled.
type Backend interface {
	// Name is the backend's key in ai.backends.
	Name() string
	// CreateChatCompletion sends req (stream off) and returns the completion.
	CreateChatCompletion(ctx context.Context, req *flexwayv1.CreateChatCompletionRequest) (*flexwayv1.ChatCompletion, Served, error)
	// StreamChatCompletion sends req with stream on and
	// stream_options.include_usage on, and returns once the upstream's
	// response headers arrived with a 2xx status. The caller must Close the
	// stream.
	StreamChatCompletion(ctx context.Context, req *flexwayv1.CreateChatCompletionRequest) (ChunkStream, Served, error)
	// CreateEmbedding sends req and returns the embeddings.
	CreateEmbedding(ctx context.Context, req *flexwayv1.CreateEmbeddingRequest) (*flexwayv1.CreateEmbeddingResponse, Served, error)
}

// Checker is implemented by a backend whose wire format cannot express
// every chat request (kinds anthropic, gemini, a2a). The plan asks it
// before anything is reserved or sent, so that a request one backend
// cannot express skips to a fallback of another kind that can.
type Checker interface {
	// CheckChat returns nil when the backend can express req, else a
	// *faults.Error of reason invalid_request whose Param names the
	// field (n above 1, logprobs, an image to an agent that takes none).
	// It is cheap: request-level fields and part types only, no encoding.
	CheckChat(req *flexwayv1.CreateChatCompletionRequest) error
}

// Served says who served a call and with which model.
type Served struct {
	// Backend is the backend's name.
	Backend string
	// ModelSent is the model sent upstream: the requested one if the
	// backend lists it, else its default_model.
	ModelSent string
}

// ChunkStream is a streamed chat completion. It is not safe for concurrent
// use.
type ChunkStream interface {
	// Recv returns the next chunk as soon as its SSE event is read. It
	// returns io.EOF after the upstream's `data: [DONE]`, and an error
	// (never io.EOF) when the stream ends any other way: a stream cut short
	// never looks complete.
	Recv() (*flexwayv1.ChatCompletionChunk, error)
	// Close releases the connection; it cancels the upstream request if the
	// stream was not read to its end.
	Close() error
}

// Unavailable reports whether err means the backend could not serve: a
// connection error, a 5xx, a timeout or an open circuit (faults reasons
// upstream_error, upstream_timeout, no_backend_available). It is the rule
// the core falls back by and a circuit breaker counts by. An upstream 4xx,
// a cancellation, an upstream refusing Flexway's own credentials
// ([ErrUpstreamAuth], a configuration problem) and a failure the call's
// own request explains ([ErrRequestCaused]) are not.
func Unavailable(err error) bool {
	var fe *faults.Error
	if !errors.As(err, &fe) || errors.Is(err, ErrUpstreamAuth) || errors.Is(err, ErrRequestCaused) {
		return false
	}
	switch fe.Reason {
	case faults.UpstreamError, faults.UpstreamTimeout, faults.NoBackendAvailable:
		return true
	}
	return false
}

// Wire is a wire format other than OpenAI's, which a backend kind speaks
// and Flexway translates (kinds anthropic, gemini and a2a; DESIGN.md, AI
// pipeline stage 12): the kind's package owns the translation, the shared
// upstream path (server/backends/upstream: TLS, pooling, timeouts,
// credentials, errors) owns the HTTP. Implementations are stateless and
// safe for concurrent use; a stream's state lives in its [WireStream].
type Wire interface {
	// Chat returns the request of one chat call of req to call.Model,
	// streamed when stream is set. Errors are *faults.Error of reason
	// invalid_request naming the field the format cannot express.
	Chat(req *flexwayv1.CreateChatCompletionRequest, call WireCall, stream bool) (WireRequest, error)
	// DecodeChat reads the 2xx body of a non-streamed chat call. A body
	// that is not the format's answer is a faults.UpstreamError.
	DecodeChat(body []byte, call WireCall) (*flexwayv1.ChatCompletion, error)
	// NewChatStream returns the decoder of one streamed chat call.
	NewChatStream(call WireCall) WireStream
	// DecodeError maps a non-2xx answer other than 401 and 403 (which the
	// upstream path maps itself, to [ErrUpstreamAuth]): status is its
	// HTTP status, retryAfter its Retry-After in seconds (0 when none) and
	// body its first MiB (nil for a 5xx, whose body is never kept).
	DecodeError(status int, retryAfter int64, body []byte) *faults.Error
}

// WireEmbedder is implemented by a [Wire] that serves embeddings (kind
// gemini: batchEmbedContents).
type WireEmbedder interface {
	// Embeddings returns the request of one embeddings call.
	Embeddings(req *flexwayv1.CreateEmbeddingRequest, call WireCall) (WireRequest, error)
	// DecodeEmbeddings reads the 2xx answer of the call req.
	DecodeEmbeddings(body []byte, req *flexwayv1.CreateEmbeddingRequest, call WireCall) (*flexwayv1.CreateEmbeddingResponse, error)
}

// WireCall is what a [Wire] needs of one call beside its request.
type WireCall struct {
	// Backend is the backend's name, for error messages.
	Backend string
	// Model is the model sent upstream (Served.ModelSent).
	Model string
	// Created is the answer's creation time, in Unix seconds, for a wire
	// whose answers carry none.
	Created int64
	// RequestID is the call's request id (a JSON-RPC id for a2a).
	RequestID string
}

// WireRequest is one translated request.
type WireRequest struct {
	// Path is appended to the backend URL's path ("v1/messages",
	// "models/m:streamGenerateContent"); empty posts to the URL itself.
	// The model in it is already path-escaped.
	Path string
	// Query, when set, is added to the URL's query ("alt=sse").
	Query string
	// Body is the JSON body.
	Body []byte
	// Dropped lists, sorted and each once, the names (never the values)
	// of the request fields the format has no counterpart for: they were
	// left out, and the upstream path logs each name once.
	Dropped []string
}

// WireStream decodes one streamed call, fed one Server-Sent Event at a
// time in order. It is not safe for concurrent use.
type WireStream interface {
	// Event decodes one event, name being its SSE event field (maybe
	// empty) and data its data, and returns the chunk it makes (nil for
	// none) and whether the stream is complete (no later event is read).
	// Errors are *faults.Error: an error event, or data that is not the
	// format's, is a faults.UpstreamError.
	Event(name, data []byte) (chunk *flexwayv1.ChatCompletionChunk, done bool, err error)
	// End is called when the body ended before Event said done: the last
	// chunk, if the format ends at the body's end (nil otherwise), or the
	// faults.UpstreamError of a cut stream.
	End() (*flexwayv1.ChatCompletionChunk, error)
}

type modelKey struct{}

// WithModel returns ctx asking the backend to send model upstream as is,
// without mapping it by its models and default_model: the model id of an
// alias's target (ai.aliases).
func WithModel(ctx context.Context, model string) context.Context {
	return context.WithValue(ctx, modelKey{}, model)
}

// ModelFrom returns the model [WithModel] set, if any.
func ModelFrom(ctx context.Context) (string, bool) {
	m, ok := ctx.Value(modelKey{}).(string)
	return m, ok && m != ""
}
