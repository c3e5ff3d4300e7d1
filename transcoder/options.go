package transcoder

import (
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc"
)

// Options configures the HTTP front.
type Options struct {
	// Conn reaches the gRPC core; an in-process channel so that every call
	// passes the server's interceptor chain. Required.
	Conn grpc.ClientConnInterface
	// MaxBodyBytes bounds a request body in bytes (ai.vision.max_body_bytes);
	// a larger body is refused with 413 while it is read. Default 24 MiB.
	MaxBodyBytes int64
	// BodyReadTimeout bounds how long a request body may take to arrive;
	// a slower sender gets 400. Default 60 s.
	BodyReadTimeout time.Duration
	// ForwardHeaders are the request headers passed to the core as gRPC
	// metadata besides Authorization and X-Request-Id: the sensitivity
	// header and the relays' identity headers. They never reach an upstream.
	ForwardHeaders []string
	// Ready reports whether the gateway takes traffic (GET /readyz); nil
	// means always.
	Ready func() error
	// Fallback serves every path that is not /v1/*, /healthz or /readyz
	// (the admin REST gateway, /metrics); nil answers 404 problem details.
	Fallback http.Handler
	// Logger receives one line per failed request (never content); nil
	// discards.
	Logger *slog.Logger
}

// DefaultMaxBodyBytes is the body limit when Options.MaxBodyBytes is 0:
// 24 MiB.
const DefaultMaxBodyBytes = 24 << 20

// DefaultBodyReadTimeout is the body read bound when
// Options.BodyReadTimeout is 0.
const DefaultBodyReadTimeout = 60 * time.Second
