// Package grpcproxy proxies the gRPC services of specialised models (an OCR,
// a classifier, a speech model) served by kind: grpc backends, as raw frames:
// a message body is never decoded, only relayed.
//
// The gateway's gRPC server installs [Codec] with grpc.ForceServerCodecV2 and
// [Proxy.Handler] as its grpc.UnknownServiceHandler: its own flexway.v1
// services keep their protobuf messages, and every other call reaches the
// handler, which relays it to the backend routed for its service (unary,
// client-, server- and bidirectional streaming alike). The interceptors of
// the server's chain run before the handler, as for any other call; they see
// each relayed message as a [*Frame].
//
// [New] loads the FileDescriptorSets of the proxied services, so that the
// gateway knows each method's streaming shape and its (flexway.v1.operation)
// option without the upstream's code; [Proxy.Lookup] returns what the
// metering interceptor needs of a method.
package grpcproxy
