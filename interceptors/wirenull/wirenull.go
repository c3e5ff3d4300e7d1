// Package wirenull drops JSON nulls from the answers the gRPC listener
// sends: an extra_fields entry whose value is `null` (a message's
// refusal, a choice's logprobs, a chunk's usage, as an upstream writes
// them) is absent for a gRPC caller, who would otherwise read the
// four-letter string "null".
//
// The entries exist for the HTTP front: openaiwire keeps an upstream's
// nulls in extra_fields so that the front writes the answer back as the
// upstream sent it. The front calls the core through the in-process
// channel (transcoder/inproc), which hands it the core's own messages;
// these interceptors go on the gRPC server only, outermost, so that every
// interceptor of the shared chain and the in-process channel see the
// messages whole, and the nulls go only where the messages are serialised
// for a gRPC caller.
package wirenull

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// UnaryServerInterceptor drops the nulls of a unary call's answer (see
// [Drop]).
func UnaryServerInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err == nil {
		Drop(resp)
	}
	return resp, err
}

// StreamServerInterceptor drops the nulls of every message a streaming
// call sends (see [Drop]).
func StreamServerInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, stream{ss})
}

type stream struct{ grpc.ServerStream }

func (s stream) SendMsg(m any) error {
	Drop(m)
	return s.ServerStream.SendMsg(m)
}

// Drop deletes, in place, every extra_fields entry whose value is exactly
// `null` from m and the messages it holds, at any depth, when m is a
// flexway.v1 message; any other value (a proxied model's raw frame, a
// health answer) is left alone. A null inside a kept value
// (`{"content":[...],"refusal":null}`) stays: it is part of that value.
func Drop(m any) {
	msg, ok := m.(proto.Message)
	if !ok {
		return
	}
	r := msg.ProtoReflect()
	if !r.IsValid() || !strings.HasPrefix(string(r.Descriptor().FullName()), "flexway.v1.") {
		return
	}
	drop(r)
}

func drop(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.Name() == "extra_fields" && fd.MapValue().Kind() == protoreflect.StringKind {
				dropNulls(v.Map())
			}
		case fd.Message() == nil:
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				drop(l.Get(i).Message())
			}
		default:
			drop(v.Message())
		}
		return true
	})
}

// dropNulls clears the entries of m whose value is "null"; Range does not
// allow clearing while it runs.
func dropNulls(m protoreflect.Map) {
	var nulls []protoreflect.MapKey
	m.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		if v.String() == "null" {
			nulls = append(nulls, k)
		}
		return true
	})
	for _, k := range nulls {
		m.Clear(k)
	}
}
