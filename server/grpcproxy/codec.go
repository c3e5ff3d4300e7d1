package grpcproxy

import (
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"

	"github.com/flexway/flexway/server/grpccodec"
)

// Frame is one gRPC message as raw bytes, its wire encoding without the
// 5-byte gRPC message prefix: the proxy never decodes bodies. The handler
// receives every caller message into a *Frame and sends every upstream
// message as a *Frame, so that a stream wrapper counts bytes with
// len(Payload).
//
// A Frame that [Codec] unmarshalled holds gRPC's (pooled) receive buffer
// rather than a copy, and hands it back to gRPC when it is sent: once
// SendMsg has been called with it, its Payload's contents must not be read
// (its length stays valid) and it must not be sent again. A Frame built
// with only Payload set has no such limits.
type Frame struct {
	// Payload is the message's wire bytes; it may be empty (a message with
	// all fields at their defaults).
	Payload []byte

	buf mem.Buffer // when set, holds Payload's memory; Marshal hands it over
}

// Codec returns the codec to install on the gateway's gRPC server with
// grpc.ForceServerCodecV2: it passes a *Frame through as its bytes and
// (un)marshals every other message as protobuf, so the gateway's own
// flexway.v1 services keep working on the same server. Its Name is "proto",
// the content-subtype clients send by default. Its protobuf is
// [grpccodec.Codec], whose unmarshal errors grpccodec.Registrar's handlers
// answer INVALID_ARGUMENT. It is safe for concurrent use.
func Codec() encoding.CodecV2 { return frameCodec{proto: grpccodec.Codec()} }

// frameCodec is [Codec]'s implementation.
type frameCodec struct{ proto encoding.CodecV2 }

func (c frameCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*Frame); ok {
		if b := f.buf; b != nil {
			f.buf = nil // gRPC frees it once written
			return mem.BufferSlice{b}, nil
		}
		if len(f.Payload) == 0 {
			return nil, nil
		}
		return mem.BufferSlice{mem.SliceBuffer(f.Payload)}, nil
	}
	return c.proto.Marshal(v)
}

func (c frameCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*Frame); ok {
		// data is freed when Unmarshal returns: the frame takes its own
		// reference to a single buffer, else a pooled copy.
		var b mem.Buffer
		switch len(data) {
		case 0:
			f.Payload, f.buf = nil, nil
			return nil
		case 1:
			b = data[0]
			b.Ref()
		default:
			b = data.MaterializeToBuffer(mem.DefaultBufferPool())
		}
		f.Payload, f.buf = b.ReadOnlyData(), b
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

func (frameCodec) Name() string { return protoenc.Name }
