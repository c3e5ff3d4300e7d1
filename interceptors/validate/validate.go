// Package validate checks every request message against its protovalidate
// constraints (buf.validate annotations in proto/) before the service runs,
// and chat and embeddings requests against the rules protovalidate cannot
// express, the ones the HTTP parser applies too
// ([openaiwire.CheckChatCompletionRequest],
// [openaiwire.CheckEmbeddingRequest]: the model's length and characters,
// the message roles, no modelled field carried in extra_fields). The chain
// runs it on every call, gRPC and HTTP (the in-process channel) alike. A
// violation is INVALID_ARGUMENT with ErrorInfo reason invalid_request and
// the first violated field's path in metadata "param" (`n`,
// `messages[0].role`, `extra_fields.max_tokens`).
package validate

import (
	"context"
	"errors"
	"strings"

	"buf.build/go/protovalidate"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// UnaryServerInterceptor validates the request of unary calls with v.
func UnaryServerInterceptor(v protovalidate.Validator) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := check(v, req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor validates every message a streaming call receives
// with v.
func StreamServerInterceptor(v protovalidate.Validator) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &stream{ServerStream: ss, v: v})
	}
}

type stream struct {
	grpc.ServerStream
	v protovalidate.Validator
}

func (s *stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return check(s.v, m)
}

// check validates m when it is a proto message; other messages (raw frames
// of proxied services) pass.
func check(v protovalidate.Validator, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	err := v.Validate(msg)
	if err == nil {
		switch r := m.(type) {
		case *flexwayv1.CreateChatCompletionRequest:
			return openaiwire.CheckChatCompletionRequest(r)
		case *flexwayv1.CreateEmbeddingRequest:
			return openaiwire.CheckEmbeddingRequest(r)
		}
		return nil
	}
	var verr *protovalidate.ValidationError
	if !errors.As(err, &verr) || len(verr.Violations) == 0 {
		return faults.Wrap(faults.Internal, err, "request validation failed")
	}
	first := verr.Violations[0]
	path := protovalidate.FieldPathString(first.Proto.GetField())
	msgs := make([]string, 0, len(verr.Violations))
	for _, vi := range verr.Violations {
		msgs = append(msgs, protovalidate.FieldPathString(vi.Proto.GetField())+": "+vi.Proto.GetMessage())
	}
	return &faults.Error{Reason: faults.InvalidRequest, Message: "invalid request: " + strings.Join(msgs, "; "), Param: path}
}
