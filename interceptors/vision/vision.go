// Package vision is the interceptor that checks the image parts of every
// chat completion request against the ai.vision policy (server/imagecheck)
// before the service runs: an image over the size limit is
// INVALID_ARGUMENT with ErrorInfo reason request_too_large (413 on
// /v1/*), any other refused image INVALID_ARGUMENT with reason
// invalid_request (400); both carry the part's path in metadata "param"
// (messages[2].content[1].image_url.url). A refused request never reaches
// the service, so it reaches no upstream and, the interceptor placed
// before the budget, reserves nothing.
//
// Messages other than [*flexwayv1.CreateChatCompletionRequest]
// (embeddings, health, reflection, proxied frames) pass unchecked.
package vision

import (
	"context"

	"google.golang.org/grpc"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/imagecheck"
)

// UnaryServerInterceptor checks the request of unary calls with c and
// returns its refusal, a *faults.Error, without calling the handler. It
// panics when c is nil: an unchecked gateway must be a wiring choice, not
// an accident.
func UnaryServerInterceptor(c *imagecheck.Checker) grpc.UnaryServerInterceptor {
	mustChecker(c)
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := check(c, req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor checks with c every message a streaming call
// receives: RecvMsg returns the refusal, a *faults.Error, in place of the
// message, so a server-streaming service (StreamChatCompletion) never
// starts on a refused request. It panics when c is nil.
func StreamServerInterceptor(c *imagecheck.Checker) grpc.StreamServerInterceptor {
	mustChecker(c)
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &stream{ServerStream: ss, c: c})
	}
}

// stream checks each received message.
type stream struct {
	grpc.ServerStream
	c *imagecheck.Checker
}

func (s *stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return check(s.c, m)
}

// check checks m when it is a chat completion request; other messages pass.
func check(c *imagecheck.Checker, m any) error {
	req, ok := m.(*flexwayv1.CreateChatCompletionRequest)
	if !ok {
		return nil
	}
	if _, err := c.Check(req); err != nil {
		return err
	}
	return nil
}

func mustChecker(c *imagecheck.Checker) {
	if c == nil {
		panic("interceptors/vision: nil Checker")
	}
}
