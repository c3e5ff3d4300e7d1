package transcoder

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/flexway/flexway/server/cache"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/transcoder/inproc"
)

// Options configures the HTTP front.
type Options struct {
	// Conn reaches the gRPC core: an *inproc.Channel carrying the server's
	// interceptor chain, so that every call passes it. Required.
	Conn Core
	// MaxBodyBytes bounds a request body in bytes (ai.vision.max_body_bytes);
	// a larger body is refused with 413 while it is read. Default 24 MiB.
	MaxBodyBytes int64
	// MaxInflightBodyBytes bounds the bytes of chat and embeddings request
	// bodies being read and parsed at once, across all requests
	// (server.max_inflight_body_bytes): a body with a Content-Length is
	// admitted only if that many bytes fit, before any of it is read; a
	// chunked body reserves as it is read. A body that does not fit is
	// refused with 503 (code unavailable) and Retry-After, and the
	// connection closed. Its bytes are given back once it is parsed.
	// Default 256 MiB, and never below MaxBodyBytes.
	MaxInflightBodyBytes int64
	// BodyReadTimeout bounds how long a request body may take to arrive;
	// a slower sender gets 400. Default 60 s.
	BodyReadTimeout time.Duration
	// StreamIdleTimeout, when set, gives a backend's idle_timeout by its
	// name: each write of a streamed answer to its client must complete
	// within the idle_timeout of the backend serving it, else the stream
	// ends as if the client had gone away (the upstream closed, what was
	// relayed charged as an estimate). Nil, or 0 for a backend: writes
	// are not bounded.
	StreamIdleTimeout func(backend string) time.Duration
	// ForwardHeaders are the request headers passed to the core as gRPC
	// metadata besides Authorization and X-Request-Id: the sensitivity
	// header and the relays' identity headers. They never reach an upstream.
	ForwardHeaders []string
	// Admit, when set, is asked before a chat or embeddings request body
	// is read, with the call's context (the forwarded headers as outgoing
	// metadata) and its operation (ai.chatCompletions, ai.embeddings); an
	// error refuses the request at once, unread (a caller at a hard or
	// per-minute cap, an unknown key). The call to the core is made with
	// the context it returns, which may carry what the check found (an
	// in-process context value) for the interceptor chain to reuse; the
	// chain checks the rest once the body is in.
	Admit func(ctx context.Context, operation string) (context.Context, error)
	// Ready reports whether the gateway takes traffic (GET /readyz); nil
	// means always.
	Ready func() error
	// Fallback serves every path that is not /v1/*, /healthz or /readyz
	// (the admin REST gateway, /metrics); nil answers 404 problem details.
	Fallback http.Handler
	// Logger receives one line per failed request (never content); nil
	// discards.
	Logger *slog.Logger
	// Observe, when set, is called once per request as it ends, with its
	// method, the status answered and its duration from the request's
	// arrival at the front to the end of the answer: the HTTP server
	// metrics ([telemetry.Metrics.ObserveHTTP]).
	Observe func(r *http.Request, status int, took time.Duration)
	// CacheKeyer, when set (a policy turns the response cache on), keys
	// each chat request from its body as sent ([call.WithCacheKey]), so
	// that the cache's lookup does not encode the request again; and the
	// request's Cache-Control and Flexway-Cache-Similarity go to the core. Nil: chat requests are
	// not keyed here.
	CacheKeyer *cache.Keyer
}

// Core is the front's channel to the gRPC core: unary calls through
// generated clients, server-streaming calls pushed to a sink in the
// caller's goroutine. [inproc.Channel] implements it.
type Core interface {
	grpc.ClientConnInterface
	// ServerStream runs a server-streaming method; see
	// [inproc.Channel.ServerStream].
	ServerStream(ctx context.Context, method string, req any, sink inproc.Sink) (trailer metadata.MD, err error)
}

// DefaultMaxBodyBytes is the body limit when Options.MaxBodyBytes is 0:
// 24 MiB.
const DefaultMaxBodyBytes = 24 << 20

// DefaultMaxInflightBodyBytes is the bound when
// Options.MaxInflightBodyBytes is 0: 256 MiB.
const DefaultMaxInflightBodyBytes = 256 << 20

// DefaultBodyReadTimeout is the body read bound when
// Options.BodyReadTimeout is 0.
const DefaultBodyReadTimeout = 60 * time.Second
