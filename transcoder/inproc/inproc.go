// Package inproc is the HTTP front's channel to the gRPC core: services
// registered on a [Channel] are called in the caller's goroutine, through
// the same server interceptors as the gRPC listener, with no serialisation,
// no copy of the messages and no hand-off between goroutines.
//
// A unary call is made with [Channel.Invoke], so that generated clients
// work on it. A server-streaming call is made with [Channel.ServerStream]:
// the handler runs in the caller's goroutine and each message it sends is
// handed to the caller's [Sink] at once, so that a relayed SSE chunk is
// written to the client by the goroutine that read it from the upstream.
//
// Messages are moved, not copied: the request given to a call belongs to
// the handler from then on, and the reply is the handler's own message
// moved into the caller's.
package inproc

import (
	"context"
	"fmt"
	"io"
	"reflect"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Channel is an in-process gRPC channel. Register every service before the
// first call; calls are then safe for concurrent use. It implements
// [grpc.ServiceRegistrar] and [grpc.ClientConnInterface] (unary calls; a
// stream opened with NewStream is refused, use [Channel.ServerStream]).
type Channel struct {
	unary   grpc.UnaryServerInterceptor
	stream  grpc.StreamServerInterceptor
	methods map[string]unaryMethod  // by full method name, "/pkg.Service/Method"
	streams map[string]streamMethod // likewise
}

type unaryMethod struct {
	impl    any
	handler grpc.MethodHandler
}

type streamMethod struct {
	impl    any
	handler grpc.StreamHandler
	desc    grpc.StreamDesc
}

// New returns a channel whose calls pass unary and stream (either may be
// nil), the server interceptors of the gRPC listener.
func New(unary grpc.UnaryServerInterceptor, stream grpc.StreamServerInterceptor) *Channel {
	return &Channel{unary: unary, stream: stream, methods: map[string]unaryMethod{}, streams: map[string]streamMethod{}}
}

var (
	_ grpc.ServiceRegistrar    = (*Channel)(nil)
	_ grpc.ClientConnInterface = (*Channel)(nil)
)

// RegisterService implements [grpc.ServiceRegistrar]: impl serves sd's
// methods. It panics, as grpc.Server does, when impl does not implement
// sd.HandlerType or a method is registered twice.
func (c *Channel) RegisterService(sd *grpc.ServiceDesc, impl any) {
	if impl != nil {
		ht := reflect.TypeOf(sd.HandlerType).Elem()
		if !reflect.TypeOf(impl).Implements(ht) {
			panic(fmt.Sprintf("inproc: %T does not implement %v", impl, ht))
		}
	}
	for _, m := range sd.Methods {
		name := "/" + sd.ServiceName + "/" + m.MethodName
		if _, dup := c.methods[name]; dup {
			panic("inproc: " + name + " registered twice")
		}
		c.methods[name] = unaryMethod{impl: impl, handler: m.Handler}
	}
	for _, s := range sd.Streams {
		name := "/" + sd.ServiceName + "/" + s.StreamName
		if _, dup := c.streams[name]; dup {
			panic("inproc: " + name + " registered twice")
		}
		c.streams[name] = streamMethod{impl: impl, handler: s.Handler, desc: s}
	}
}

// Invoke implements [grpc.ClientConnInterface]: it runs the unary method
// in this goroutine. args is moved to the handler and must not be used
// after the call; the handler's reply is moved into reply. Outgoing
// metadata in ctx becomes the handler's incoming metadata; grpc.Header and
// grpc.Trailer call options receive what the handler set. Errors are the
// handler's (or an interceptor's) as returned, not converted; an unknown
// method is codes.Unimplemented.
func (c *Channel) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	m, ok := c.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	st := &serverStream{method: method}
	ctx = st.serverContext(ctx)
	moved := false
	dec := func(in any) error {
		if moved {
			return status.Error(codes.Internal, "inproc: request decoded twice")
		}
		moved = true
		return move(in, args)
	}
	resp, err := m.handler(m.impl, ctx, dec, c.unary)
	st.deliver(opts)
	if err != nil {
		return err
	}
	return move(reply, resp)
}

// NewStream implements [grpc.ClientConnInterface]; streams are refused
// (codes.Unimplemented): use [Channel.ServerStream].
func (c *Channel) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "inproc: use Channel.ServerStream")
}

// Sink receives a server-streaming call's output, in the caller's
// goroutine.
type Sink interface {
	// Header receives the response header metadata once, before the
	// first message, or when the call ends without one.
	Header(md metadata.MD)
	// Send receives each message as the handler sends it; the message is
	// the handler's and must not be kept after Send returns. An error
	// ends the handler's call (its Send returns it).
	Send(m any) error
}

// ServerStream runs the server-streaming method in this goroutine: req
// (moved to the handler) is its one request, and what it sends goes to
// sink. It returns the handler's (or an interceptor's) error as returned,
// nil when the stream ended cleanly; the trailer metadata is returned
// either way. An unknown method is codes.Unimplemented.
func (c *Channel) ServerStream(ctx context.Context, method string, req any, sink Sink) (trailer metadata.MD, err error) {
	m, ok := c.streams[method]
	if !ok || !m.desc.ServerStreams || m.desc.ClientStreams {
		return nil, status.Errorf(codes.Unimplemented, "unknown server-streaming method %s", method)
	}
	st := &serverStream{method: method, req: req, sink: sink}
	st.ctx = st.serverContext(ctx)
	if c.stream != nil {
		info := &grpc.StreamServerInfo{FullMethod: method, IsServerStream: true}
		err = c.stream(m.impl, st, info, m.handler)
	} else {
		err = m.handler(m.impl, st)
	}
	if !st.headerSent {
		st.headerSent = true
		sink.Header(st.header)
	}
	return st.trailer, err
}

// serverStream is the server side of one call: a [grpc.ServerStream] for
// streams, and through [transportStream] what grpc.SetHeader reaches.
type serverStream struct {
	method     string
	ctx        context.Context
	req        any // the stream's request until RecvMsg moves it
	sink       Sink
	header     metadata.MD
	trailer    metadata.MD
	headerSent bool
}

// serverContext is ctx as a handler sees it: the caller's outgoing
// metadata as incoming, and this stream as the transport stream.
func (s *serverStream) serverContext(ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	ctx = metadata.NewIncomingContext(ctx, md)
	return grpc.NewContextWithServerTransportStream(ctx, transportStream{s})
}

// transportStream is s as grpc.SetHeader and grpc.SetTrailer reach it.
type transportStream struct{ *serverStream }

// SetTrailer implements [grpc.ServerTransportStream].
func (t transportStream) SetTrailer(md metadata.MD) error {
	t.serverStream.SetTrailer(md)
	return nil
}

// deliver hands header and trailer to the call options that ask for them.
func (s *serverStream) deliver(opts []grpc.CallOption) {
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = s.header
		case grpc.TrailerCallOption:
			*o.TrailerAddr = s.trailer
		}
	}
}

// Method implements [grpc.ServerTransportStream] (through transportStream).
func (s *serverStream) Method() string { return s.method }

// SetHeader implements [grpc.ServerTransportStream] and [grpc.ServerStream].
func (s *serverStream) SetHeader(md metadata.MD) error {
	if s.headerSent {
		return status.Error(codes.Internal, "inproc: header already sent")
	}
	s.header = metadata.Join(s.header, md)
	return nil
}

// SendHeader implements [grpc.ServerTransportStream] and
// [grpc.ServerStream]; for a unary call the header is delivered at the end.
func (s *serverStream) SendHeader(md metadata.MD) error {
	if err := s.SetHeader(md); err != nil {
		return err
	}
	if s.sink != nil {
		s.headerSent = true
		s.sink.Header(s.header)
	}
	return nil
}

// SetTrailer implements [grpc.ServerStream].
func (s *serverStream) SetTrailer(md metadata.MD) {
	s.trailer = metadata.Join(s.trailer, md)
}

// Context implements [grpc.ServerStream].
func (s *serverStream) Context() context.Context { return s.ctx }

// SendMsg implements [grpc.ServerStream]: the header goes first, then m
// to the sink.
func (s *serverStream) SendMsg(m any) error {
	if !s.headerSent {
		s.headerSent = true
		s.sink.Header(s.header)
	}
	return s.sink.Send(m)
}

// RecvMsg implements [grpc.ServerStream]: the one request, then io.EOF.
func (s *serverStream) RecvMsg(m any) error {
	if s.req == nil {
		return io.EOF
	}
	err := move(m, s.req)
	s.req = nil
	return err
}

// move moves the message src points to into dst, both pointers to the
// same generated message type: a shallow copy of the struct, cheaper than
// proto.Merge, valid because src is not used again.
func move(dst, src any) error {
	dv, sv := reflect.ValueOf(dst), reflect.ValueOf(src)
	if dv.Kind() != reflect.Pointer || dv.Type() != sv.Type() || sv.IsNil() || dv.IsNil() {
		return status.Errorf(codes.Internal, "inproc: cannot move %T into %T", src, dst)
	}
	dv.Elem().Set(sv.Elem())
	return nil
}
