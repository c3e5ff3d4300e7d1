// Package guardrails is the interceptor of stage 5 of the AI pipeline
// (DESIGN.md): the prompt guardrails of the call's ai.policies, applied
// by server/guardrail/promptcheck to every chat and embeddings request
// before the image checks and the budget, so that a refused prompt
// reserves nothing and sends nothing upstream, and a redacted one goes
// on rewritten. A refusal is PERMISSION_DENIED with ErrorInfo reason
// guardrail_violation (HTTP 403 in the OpenAI envelope, type
// content_filter).
//
// It runs after the governance interceptor, which resolves the call's
// policies into [call.State].Policies; a call whose policies have no
// prompt rule passes untouched, without allocating (a streaming call
// pays its stream wrapper, as it does governance's). Wire it only when
// some policy has prompt rules ([policy.Table.Guarded]): then an
// unguarded gateway pays nothing at all. A call without a [call.State]
// passes untouched; so does any message but a chat or embeddings
// request (a proxied specialised model's frames).
package guardrails

import (
	"context"

	"google.golang.org/grpc"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/guardrail/promptcheck"
)

// UnaryServerInterceptor checks the request of unary calls and returns
// the refusal, a *faults.Error, without calling the handler.
func UnaryServerInterceptor(opts ...Option) grpc.UnaryServerInterceptor {
	k := checker(opts)
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := k.Check(ctx, call.FromContext(ctx), req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor checks the first request a streaming call
// receives: RecvMsg returns the refusal in place of the message, so a
// server-streaming service (StreamChatCompletion) never starts on a
// refused prompt.
func StreamServerInterceptor(opts ...Option) grpc.StreamServerInterceptor {
	k := checker(opts)
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		st := call.FromContext(ss.Context())
		if st == nil {
			return handler(srv, ss)
		}
		return handler(srv, &stream{ServerStream: ss, k: k, st: st})
	}
}

// stream checks the call's first received message.
type stream struct {
	grpc.ServerStream
	k       promptcheck.Checker
	st      *call.State
	checked bool
}

// RecvMsg implements [grpc.ServerStream.RecvMsg]; see
// [StreamServerInterceptor].
func (s *stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.checked {
		return nil
	}
	s.checked = true
	return s.k.Check(s.Context(), s.st, m)
}
