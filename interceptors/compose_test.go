package interceptors

import (
	"context"
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc"

	"github.com/flexway/flexway/server/faults"
)

// TestComposeOrderAndNesting: a composed chain runs its interceptors
// outermost first, each seeing the call's info, then the call's handler; a
// chain composed inside another finds its own frame and hands on to the
// outer chain's next interceptor; the same chain serves calls one after
// another with each call's own handler.
func TestComposeOrderAndNesting(t *testing.T) {
	var trace []string
	named := func(name string) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			trace = append(trace, name+" "+info.FullMethod)
			return h(context.WithValue(ctx, new(int), name), req)
		}
	}
	inner := composeUnary(named("b"), named("c"))
	chain := composeUnary(named("a"), inner, named("d"))
	for _, method := range []string{"/one", "/two"} {
		trace = nil
		out, err := chain(context.Background(), "req", &grpc.UnaryServerInfo{FullMethod: method},
			func(_ context.Context, req any) (any, error) { return method + " " + req.(string), nil })
		if err != nil || out != method+" req" {
			t.Fatalf("%s: %v, %v", method, out, err)
		}
		want := []string{"a " + method, "b " + method, "c " + method, "d " + method}
		if !slices.Equal(trace, want) {
			t.Fatalf("%s: ran %q, want %q", method, trace, want)
		}
	}
}

// TestComposeContextDropped: an interceptor that calls on with a context
// not derived from its own fails the call with internal_error instead of
// running the next interceptor without the call's frame.
func TestComposeContextDropped(t *testing.T) {
	drop := func(_ context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(context.Background(), req)
	}
	reached := false
	pass := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		reached = true
		return h(ctx, req)
	}
	_, err := composeUnary(drop, pass)(context.Background(), nil, &grpc.UnaryServerInfo{},
		func(context.Context, any) (any, error) { return nil, nil })
	var fe *faults.Error
	if !errors.As(err, &fe) || fe.Reason != faults.Internal || reached {
		t.Fatalf("err %v, next reached %v", err, reached)
	}
}

// TestComposeStream: the stream chain runs in order, and the handler's
// stream has the contexts the interceptors derived.
func TestComposeStream(t *testing.T) {
	type key struct{}
	var trace []string
	named := func(name string) grpc.StreamServerInterceptor {
		return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			trace = append(trace, name+" "+info.FullMethod)
			return h(srv, &ctxStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), key{}, name)})
		}
	}
	chain := composeStream(named("a"), composeStream(named("b")), named("c"))
	var got any
	err := chain(nil, &ctxStream{ctx: context.Background()}, &grpc.StreamServerInfo{FullMethod: "/s"}, func(_ any, ss grpc.ServerStream) error {
		got = ss.Context().Value(key{})
		return nil
	})
	if err != nil || got != "c" || !slices.Equal(trace, []string{"a /s", "b /s", "c /s"}) {
		t.Fatalf("err %v, value %v, trace %q", err, got, trace)
	}
}

// ctxStream is a server stream with its own context.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }
