package interceptors_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/interceptors"
)

// benchStream is a server stream whose one request is a valid chat
// request; what the handler sends is dropped.
type benchStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *benchStream) Context() context.Context     { return s.ctx }
func (s *benchStream) SetHeader(metadata.MD) error  { return nil }
func (s *benchStream) SendHeader(metadata.MD) error { return nil }
func (s *benchStream) SetTrailer(metadata.MD)       {}
func (s *benchStream) SendMsg(any) error            { return nil }
func (s *benchStream) RecvMsg(m any) error {
	*m.(*flexwayv1.CreateChatCompletionRequest) = flexwayv1.CreateChatCompletionRequest{Model: "m",
		Messages: []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "hi"}}}}
	return nil
}

// BenchmarkChain measures one authenticated call through the whole chain
// (recovery, admin, identity, sensitivity, validate) to a handler that
// does nothing, as the in-process channel calls it: what composing the
// chain costs a call, next to what its interceptors do.
func BenchmarkChain(b *testing.B) {
	c, err := interceptors.New(interceptors.Config{Keys: ring{}, Sensitivity: sensitiveTenants{}, SensitiveHeader: "Flexway-Sensitive"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer sk-acme"))
	b.Run("unary", func(b *testing.B) {
		unary := c.UnaryInterceptor()
		info := &grpc.UnaryServerInfo{FullMethod: "/flexway.v1.ChatService/CreateChatCompletion"}
		req := &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "hi"}}}}
		handler := func(context.Context, any) (any, error) { return nil, nil }
		b.ReportAllocs()
		for b.Loop() {
			if _, err := unary(ctx, req, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		stream := c.StreamInterceptor()
		info := &grpc.StreamServerInfo{FullMethod: "/flexway.v1.ChatService/StreamChatCompletion", IsServerStream: true}
		ss := &benchStream{ctx: ctx}
		handler := func(_ any, ss grpc.ServerStream) error {
			var req flexwayv1.CreateChatCompletionRequest
			return ss.RecvMsg(&req)
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := stream(nil, ss, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
}
