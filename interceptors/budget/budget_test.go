package budget_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/interceptors/budget"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/metering"
)

// fakeMeter records what the interceptors ask of the policy.
type fakeMeter struct {
	err      error // returned by Reserve
	soft     bool  // Reserve marks the call soft
	proxied  bool  // every method is proxied, unmetered
	reserves int
}

var _ budget.Meter = (*fakeMeter)(nil)

func (f *fakeMeter) Reserve(_ context.Context, st *call.State, _ any) (metering.Reservation, error) {
	f.reserves++
	st.Soft = f.soft
	return metering.Reservation{}, f.err
}

func (f *fakeMeter) ReserveProxied(context.Context, *call.State, string) (*metering.ProxiedCall, bool, error) {
	return nil, f.proxied, nil
}

// headerStream records the headers set on it and receives one chat request.
type headerStream struct {
	grpc.ServerStream
	ctx    context.Context
	header metadata.MD
}

func (s *headerStream) Context() context.Context { return s.ctx }
func (s *headerStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *headerStream) RecvMsg(any) error { return nil }

// TestUnaryAdapter: the unary interceptor asks the policy for chat and
// embeddings requests only, refuses with the policy's error without
// calling the handler, and passes calls without a call state.
func TestUnaryAdapter(t *testing.T) {
	chat := &flexwayv1.CreateChatCompletionRequest{}
	ctx := call.NewContext(context.Background(), &call.State{Tenant: "acme"})
	handled := 0
	handler := func(context.Context, any) (any, error) { handled++; return "ok", nil }

	m := &fakeMeter{}
	in := budget.UnaryServerInterceptor(m)
	if out, err := in(ctx, chat, &grpc.UnaryServerInfo{}, handler); err != nil || out != "ok" || m.reserves != 1 || handled != 1 {
		t.Fatalf("chat: %v %v, reserves %d, handled %d", out, err, m.reserves, handled)
	}
	if _, err := in(ctx, &flexwayv1.ListModelsRequest{}, &grpc.UnaryServerInfo{}, handler); err != nil || m.reserves != 1 || handled != 2 {
		t.Fatalf("models listing: %v, reserves %d: it is not metered", err, m.reserves)
	}
	if _, err := in(context.Background(), chat, &grpc.UnaryServerInfo{}, handler); err != nil || m.reserves != 1 || handled != 3 {
		t.Fatalf("no call state: %v, reserves %d", err, m.reserves)
	}
	refused := faults.New(faults.BudgetExceeded, "over the cap")
	m.err = refused
	if _, err := in(ctx, chat, &grpc.UnaryServerInfo{}, handler); !errors.Is(err, refused) || handled != 3 {
		t.Fatalf("refused: %v, handled %d", err, handled)
	}
}

// TestStreamAdapter: a streamed chat call is reserved once, when its
// request is received, and a call the policy marks soft gets the
// flexway-budget header; an unmetered proxied method passes its stream
// unwrapped.
func TestStreamAdapter(t *testing.T) {
	m := &fakeMeter{soft: true}
	in := budget.StreamServerInterceptor(m)
	ss := &headerStream{ctx: call.NewContext(context.Background(), &call.State{Tenant: "acme"})}
	handler := func(_ any, s grpc.ServerStream) error {
		for range 2 {
			if err := s.RecvMsg(&flexwayv1.CreateChatCompletionRequest{}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := in(nil, ss, &grpc.StreamServerInfo{FullMethod: flexwayv1.ChatService_StreamChatCompletion_FullMethodName}, handler); err != nil {
		t.Fatal(err)
	}
	if m.reserves != 1 || len(ss.header.Get(budget.HeaderBudget)) != 1 || ss.header.Get(budget.HeaderBudget)[0] != "soft" {
		t.Fatalf("reserves %d, header %v: want one reservation and flexway-budget: soft", m.reserves, ss.header)
	}

	p := &fakeMeter{proxied: true}
	var got grpc.ServerStream
	err := budget.StreamServerInterceptor(p)(nil, ss, &grpc.StreamServerInfo{FullMethod: "/acme.ocr.v1.OcrService/Recognize"}, func(_ any, s grpc.ServerStream) error {
		got = s
		return nil
	})
	if err != nil || got != grpc.ServerStream(ss) || p.reserves != 0 {
		t.Fatalf("unmetered proxied: %v, stream wrapped %v, reserves %d", err, got != grpc.ServerStream(ss), p.reserves)
	}
}

// TestRefusalHeaders: a per-minute refusal's x-ratelimit-* headers reach
// the caller as header metadata, with flexway-budget when the call is
// soft, and the service never sees the request.
func TestRefusalHeaders(t *testing.T) {
	refused := &faults.Error{Reason: faults.RateLimited, Message: "over", RetryAfterSeconds: 3,
		Headers: metering.RateHeaders(ledger.RateState{TokensLimit: 100, TokensRemaining: 0, RequestsLimit: -1})}
	m := &fakeMeter{err: refused, soft: true}
	ss := &headerStream{ctx: call.NewContext(context.Background(), &call.State{Tenant: "acme"})}
	handled := false
	err := budget.StreamServerInterceptor(m)(nil, ss, &grpc.StreamServerInfo{FullMethod: flexwayv1.ChatService_StreamChatCompletion_FullMethodName}, func(_ any, s grpc.ServerStream) error {
		if err := s.RecvMsg(&flexwayv1.CreateChatCompletionRequest{}); err != nil {
			return err
		}
		handled = true
		return nil
	})
	if !errors.Is(err, refused) || handled {
		t.Fatalf("err %v, handled %v", err, handled)
	}
	want := map[string]string{"x-ratelimit-limit-tokens": "100", "x-ratelimit-remaining-tokens": "0", budget.HeaderBudget: "soft"}
	if len(ss.header) != len(want) {
		t.Fatalf("header %v, want %v", ss.header, want)
	}
	for k, v := range want {
		if got := ss.header.Get(k); len(got) != 1 || got[0] != v {
			t.Errorf("%s: %v, want %s", k, got, v)
		}
	}

	// A unary refusal sets the same metadata through grpc.SetHeader.
	m.soft = false
	uss := &headerStream{}
	ctx := grpc.NewContextWithServerTransportStream(call.NewContext(context.Background(), &call.State{Tenant: "acme"}), &transport{s: uss})
	if _, err := budget.UnaryServerInterceptor(m)(ctx, &flexwayv1.CreateChatCompletionRequest{}, &grpc.UnaryServerInfo{}, nil); !errors.Is(err, refused) {
		t.Fatalf("unary: %v", err)
	}
	if got := uss.header.Get("x-ratelimit-limit-tokens"); len(got) != 1 || got[0] != "100" || len(uss.header) != 2 {
		t.Errorf("unary header %v", uss.header)
	}
}

// transport is a grpc.ServerTransportStream recording the header set.
type transport struct{ s *headerStream }

func (t *transport) Method() string                  { return "/flexway.v1.ChatService/CreateChatCompletion" }
func (t *transport) SetHeader(md metadata.MD) error  { return t.s.SetHeader(md) }
func (t *transport) SendHeader(md metadata.MD) error { return t.s.SetHeader(md) }
func (t *transport) SetTrailer(metadata.MD) error    { return nil }
