// Package grpccodec is the gateway's gRPC server codec: grpc's protobuf
// codec, except that a request message that does not unmarshal (garbage
// bytes, invalid UTF-8 in a proto3 string) is answered INVALID_ARGUMENT
// with google.rpc.ErrorInfo{reason: "invalid_request", domain:
// "flexway.dev"}, the caller's mistake, instead of the INTERNAL grpc-go
// answers.
//
// A codec alone cannot do it: grpc-go turns every Unmarshal error into
// INTERNAL ("grpc: failed to unmarshal the received message", rpc_util.go's
// recv) and writes that status itself from the server stream's RecvMsg,
// whatever the handler returns next. So [Codec] does not fail: it leaves
// the message empty but for a mark in its unknown fields that holds the
// cause, and the first code to receive the message refuses it, before
// anything else reads it: [Registrar]'s handlers for a unary method's
// request (decoded before the unary interceptors run), and
// [StreamServerInterceptor], installed outermost, for every message a
// streaming method receives. The in-process channel of the HTTP front
// moves messages without encoding them and needs none of this.
package grpccodec
