// Package budget is the budget interceptor: it runs the metering policy
// (server/metering: plan, caps, reserve, settle; DESIGN.md, "Budget
// ledger") around every chat, embeddings and proxied specialised-model
// call, through the small [Meter] interface it declares here, as
// go-grpc-middleware's ratelimit interceptor runs its Limiter.
//
// A unary chat or embeddings call is reserved before the handler runs and
// settled after it returns; a streamed chat call is reserved when the
// service receives its request and settled when the call ends; a proxied
// call is reserved before its handler runs, its messages counted as they
// pass, and settled at its end. A refusal is the policy's *faults.Error.
// A call whose caller is at or past the soft mark of a cap gets header
// metadata "flexway-budget: soft" ([HeaderBudget]). While a per-minute cap
// (tokens_per_minute, requests_per_minute) holds the caller, every metered
// call, refused or not, gets OpenAI's x-ratelimit-limit-tokens,
// x-ratelimit-remaining-tokens, x-ratelimit-limit-requests and
// x-ratelimit-remaining-requests as header metadata
// ([metering.RateHeaders]; the HTTP front writes them as headers), before
// the first message of a stream.
//
// Other messages (gRPC health, reflection) pass unmetered, and so does a
// call without a [call.State] (one that did not pass identity).
package budget

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/metering"
)

// HeaderBudget is the header metadata key set to "soft" on a call whose
// caller is at or past the soft mark of a cap; the HTTP front writes it as
// Flexway-Budget.
const HeaderBudget = "flexway-budget"

// Meter is the metering policy the interceptors run; [*metering.Meter]
// implements it.
type Meter interface {
	// Reserve readies the call of st, whose decoded request is req,
	// before the service runs (plan into st.Plan, caps, reservation); it
	// returns the reservation to settle once the call has ended (the zero
	// one when nothing is to be settled), or the call's refusal. See
	// [metering.Meter.Reserve].
	Reserve(ctx context.Context, st *call.State, req any) (metering.Reservation, error)
	// ReserveProxied readies a proxied specialised-model call of
	// fullMethod; proxied is false for any other method. See
	// [metering.Meter.ReserveProxied].
	ReserveProxied(ctx context.Context, st *call.State, fullMethod string) (pc *metering.ProxiedCall, proxied bool, err error)
}

var _ Meter = (*metering.Meter)(nil)

// UnaryServerInterceptor meters unary chat and embeddings calls with m.
func UnaryServerInterceptor(m Meter) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		st := call.FromContext(ctx)
		if st == nil || !metering.Metered(req) {
			return handler(ctx, req)
		}
		res, err := m.Reserve(ctx, st, req)
		defer st.Cache.End() // after the store: a fill not landed by now never will be
		if md := header(st, res.Rate(), err); md != nil {
			_ = grpc.SetHeader(ctx, md)
		}
		if err != nil {
			return nil, err
		}
		resp, err := handler(ctx, req)
		res.Settle(ctx)
		return resp, err
	}
}

// StreamServerInterceptor meters with m streamed chat calls (reserved
// when the service receives the request, settled when the call ends) and
// proxied specialised-model calls.
func StreamServerInterceptor(m Meter) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		st := call.FromContext(ctx)
		if st == nil {
			return handler(srv, ss)
		}
		pc, proxied, err := m.ReserveProxied(ctx, st, info.FullMethod)
		if proxied {
			if md := header(st, pc.Rate(), err); md != nil {
				_ = ss.SetHeader(md)
			}
		}
		switch {
		case err != nil:
			return err
		case proxied && pc == nil:
			return handler(srv, ss) // authenticated, not metered
		case proxied:
			herr := handler(srv, &proxiedStream{ServerStream: ss, pc: pc})
			pc.Settle(ctx)
			return herr
		}
		ms := &stream{ServerStream: ss, m: m, st: st}
		defer func() { st.Cache.End() }() // st.Cache is set when the request is read
		err = handler(srv, ms)
		ms.res.Settle(ctx)
		return err
	}
}

// header is the header metadata of the metered call of st: flexway-budget
// when st is soft, and the x-ratelimit-* of rate or, when the call is
// refused, of its refusal's headers; nil when there are none.
func header(st *call.State, rate ledger.RateState, err error) metadata.MD {
	var h map[string]string
	if err != nil {
		var fe *faults.Error
		if errors.As(err, &fe) {
			h = fe.Headers
		}
	} else {
		h = metering.RateHeaders(rate)
	}
	if !st.Soft && len(h) == 0 {
		return nil
	}
	md := make(metadata.MD, len(h)+1)
	if st.Soft {
		md[HeaderBudget] = []string{"soft"}
	}
	for k, v := range h {
		md[k] = []string{v}
	}
	return md
}

// stream reserves when its request is received.
type stream struct {
	grpc.ServerStream
	m        Meter
	st       *call.State
	res      metering.Reservation
	reserved bool
}

// RecvMsg implements [grpc.ServerStream.RecvMsg]: the first metered
// request received is reserved for, once; a refusal is RecvMsg's error, so
// the service never sees the request.
func (s *stream) RecvMsg(msg any) error {
	if err := s.ServerStream.RecvMsg(msg); err != nil {
		return err
	}
	if s.reserved || !metering.Metered(msg) {
		return nil
	}
	res, err := s.m.Reserve(s.Context(), s.st, msg)
	if md := header(s.st, res.Rate(), err); md != nil {
		_ = s.ServerStream.SetHeader(md)
	}
	if err != nil {
		return err
	}
	s.res, s.reserved = res, true
	return nil
}

// proxiedStream counts the frames a proxied call receives and sends.
type proxiedStream struct {
	grpc.ServerStream
	pc *metering.ProxiedCall
}

// RecvMsg counts a request message; one that takes the call past a cap
// ends it (the message is not forwarded).
func (p *proxiedStream) RecvMsg(msg any) error {
	if err := p.ServerStream.RecvMsg(msg); err != nil {
		return err
	}
	return p.pc.Received(msg)
}

// SendMsg sends a response message unless it would take the call past a
// cap.
func (p *proxiedStream) SendMsg(msg any) error { return p.pc.Send(msg, p.ServerStream.SendMsg) }
