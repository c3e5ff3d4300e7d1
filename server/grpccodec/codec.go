package grpccodec

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/flexway/flexway/server/faults"
)

// markField is the field number of the mark [Codec] leaves in the unknown
// fields of a message it could not unmarshal: the largest valid number,
// which no Flexway message declares. A caller who sends it, length
// delimited, as its only unknown field is refused as if its message had
// not unmarshalled.
const markField = protowire.MaxValidNumber

// Codec returns grpc's protobuf codec (Name "proto") whose Unmarshal never
// fails for a protobuf message: a message that does not unmarshal is
// reset and marked with the cause, for [Registrar]'s handlers and
// [StreamServerInterceptor] to refuse. Install it on a server with
// grpc.ForceServerCodecV2 (or wrap it in a codec that is installed so, the
// proxy's frame codec), never on a client, and register every service of
// that server through [Registrar]. It is safe for concurrent use.
func Codec() encoding.CodecV2 { return codec{proto: encoding.GetCodecV2(protoenc.Name)} }

type codec struct{ proto encoding.CodecV2 }

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.proto.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok {
		return err
	}
	proto.Reset(m)
	mark := protowire.AppendTag(nil, markField, protowire.BytesType)
	m.ProtoReflect().SetUnknown(protowire.AppendString(mark, err.Error()))
	return nil
}

func (codec) Name() string { return protoenc.Name }

// refused returns the INVALID_ARGUMENT (invalid_request) error for m when
// [Codec] marked it as not unmarshalled, else nil.
func refused(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	unknown := pm.ProtoReflect().GetUnknown()
	if len(unknown) == 0 {
		return nil
	}
	num, typ, n := protowire.ConsumeTag(unknown)
	if n < 0 || num != markField || typ != protowire.BytesType {
		return nil
	}
	cause, m2 := protowire.ConsumeString(unknown[n:])
	if m2 < 0 || n+m2 != len(unknown) {
		return nil
	}
	return faults.New(faults.InvalidRequest, "the request is not a valid %s message: %s", pm.ProtoReflect().Descriptor().FullName(), cause)
}

// Registrar returns a registrar that registers services on s with each
// unary method's handler refusing a request [Codec] could not unmarshal,
// before the unary interceptors run. Streaming methods are left as they
// are: their messages are checked by [StreamServerInterceptor].
// GetServiceInfo is s's.
func Registrar(s Server) Server { return registrar{s} }

// Server is what [Registrar] wraps and returns: a *grpc.Server, or what
// reflection.Register takes.
type Server interface {
	grpc.ServiceRegistrar
	GetServiceInfo() map[string]grpc.ServiceInfo
}

type registrar struct{ Server }

// RegisterService implements [grpc.ServiceRegistrar]: desc is copied with
// every unary handler's decoding checked.
func (r registrar) RegisterService(desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(v any) error {
				if err := dec(v); err != nil {
					return err
				}
				return refused(v)
			}, ic)
		}
		d.Methods[i] = m
	}
	r.Server.RegisterService(&d, impl)
}

// StreamServerInterceptor refuses, with INVALID_ARGUMENT, every message a
// streaming method receives that [Codec] could not unmarshal: its RecvMsg
// returns the error, and the handler ends the call with it. Install it
// outermost (first in grpc.ChainStreamInterceptor), so that no other
// interceptor sees such a message.
func StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, checkedStream{ss})
	}
}

// checkedStream is a server stream whose RecvMsg refuses marked messages.
type checkedStream struct{ grpc.ServerStream }

func (s checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return refused(m)
}
