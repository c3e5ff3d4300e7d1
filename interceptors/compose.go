package interceptors

import (
	"context"

	"google.golang.org/grpc"

	"github.com/flexway/flexway/server/faults"
)

// A chain composed by composeUnary or composeStream is N handlers built
// once: handler i calls interceptor i+1 with handler i+1 as its next, the
// last calls the call's own handler. What differs per call (the method's
// info and the final handler) travels in a frame, the call's one
// allocation for the chain, which the outermost interceptor receives as
// its context (a stream's, through a wrapping stream) and every
// interceptor passes on in the contexts it derives. A handler finds its
// frame by its chain's key, so that chains nested in one another each
// find their own. An interceptor that called its next handler with a
// context not derived from the one it was given would break the chain:
// the call fails with faults.Internal.

// frameContext is ctx carrying frame under key (a chain).
type frameContext struct {
	context.Context
	key, frame any
}

// Value implements [context.Context.Value].
func (c *frameContext) Value(key any) any {
	if key == c.key {
		return c.frame
	}
	return c.Context.Value(key)
}

// errNoFrame is the failure of a chain whose interceptor lost its context.
var errNoFrame = faults.New(faults.Internal, "internal error: an interceptor dropped the call's context")

// unaryChain is a composed unary chain.
type unaryChain struct {
	ints []grpc.UnaryServerInterceptor
	next []grpc.UnaryHandler // next[i] is interceptor i's next handler
}

// unaryFrame is one unary call's frame.
type unaryFrame struct {
	ctx     frameContext
	info    *grpc.UnaryServerInfo
	handler grpc.UnaryHandler
}

// composeUnary runs ints as one interceptor, the first outermost.
func composeUnary(ints ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	if len(ints) == 0 {
		return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			return handler(ctx, req)
		}
	}
	c := &unaryChain{ints: ints, next: make([]grpc.UnaryHandler, len(ints))}
	last := len(ints) - 1
	c.next[last] = func(ctx context.Context, req any) (any, error) {
		f, ok := ctx.Value(c).(*unaryFrame)
		if !ok {
			return nil, errNoFrame
		}
		return f.handler(ctx, req)
	}
	for i := last - 1; i >= 0; i-- {
		in, next := ints[i+1], c.next[i+1]
		c.next[i] = func(ctx context.Context, req any) (any, error) {
			f, ok := ctx.Value(c).(*unaryFrame)
			if !ok {
				return nil, errNoFrame
			}
			return in(ctx, req, f.info, next)
		}
	}
	first, next := ints[0], c.next[0]
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		f := &unaryFrame{info: info, handler: handler}
		f.ctx = frameContext{Context: ctx, key: c, frame: f}
		return first(&f.ctx, req, info, next)
	}
}

// streamChain is a composed stream chain.
type streamChain struct {
	ints []grpc.StreamServerInterceptor
	next []grpc.StreamHandler // next[i] is interceptor i's next handler
}

// streamFrame is one streaming call's frame, and the stream the outermost
// interceptor receives: ss with the frame in its context.
type streamFrame struct {
	grpc.ServerStream
	ctx     frameContext
	info    *grpc.StreamServerInfo
	handler grpc.StreamHandler
}

// Context implements [grpc.ServerStream.Context].
func (f *streamFrame) Context() context.Context { return &f.ctx }

// composeStream runs ints as one interceptor, the first outermost.
func composeStream(ints ...grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	if len(ints) == 0 {
		return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			return handler(srv, ss)
		}
	}
	c := &streamChain{ints: ints, next: make([]grpc.StreamHandler, len(ints))}
	last := len(ints) - 1
	c.next[last] = func(srv any, ss grpc.ServerStream) error {
		f, ok := ss.Context().Value(c).(*streamFrame)
		if !ok {
			return errNoFrame
		}
		return f.handler(srv, ss)
	}
	for i := last - 1; i >= 0; i-- {
		in, next := ints[i+1], c.next[i+1]
		c.next[i] = func(srv any, ss grpc.ServerStream) error {
			f, ok := ss.Context().Value(c).(*streamFrame)
			if !ok {
				return errNoFrame
			}
			return in(srv, ss, f.info, next)
		}
	}
	first, next := ints[0], c.next[0]
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		f := &streamFrame{ServerStream: ss, info: info, handler: handler}
		f.ctx = frameContext{Context: ss.Context(), key: c, frame: f}
		return first(srv, f, info, next)
	}
}
