package grpccodec_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flexway/flexway/server/grpccodec"
)

// rawCodec sends and receives *[]byte as the message's bytes, so that a
// test can send what no protobuf client would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}
func (rawCodec) Name() string { return "proto" }

// start serves gRPC health through grpccodec as the gateway does and
// returns a client connection.
func start(t *testing.T) *grpc.ClientConn {
	t.Helper()
	srv := grpc.NewServer(grpc.ForceServerCodecV2(grpccodec.Codec()), grpc.ChainStreamInterceptor(grpccodec.StreamServerInterceptor()))
	healthpb.RegisterHealthServer(grpccodec.Registrar(srv), health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestUndecodableIsInvalidArgument: over a real gRPC connection, a
// request that does not unmarshal is INVALID_ARGUMENT with
// ErrorInfo{invalid_request, flexway.dev} naming the message and the
// cause, on a unary method (Health/Check) and a streaming one
// (Health/Watch); a valid request, unknown fields included, is served.
func TestUndecodableIsInvalidArgument(t *testing.T) {
	conn := start(t)
	raw := grpc.ForceCodecV2(rawCodec{})
	unknownField := protowire.AppendString(protowire.AppendTag(nil, 99, protowire.BytesType), "x")
	mark := protowire.AppendString(protowire.AppendTag(nil, protowire.MaxValidNumber, protowire.BytesType), "x")
	for _, c := range []struct {
		name    string
		payload []byte
		cause   string // "" = served
	}{
		{"garbage", []byte{0xff, 0xff, 0xff}, "cannot parse invalid wire-format data"},
		{"invalid_utf8", []byte{0x0a, 0x02, 0xff, 0xfe}, "invalid UTF-8"},
		{"truncated", []byte{0x0a, 0x05, 'a'}, "cannot parse invalid wire-format data"},
		{"the_mark_sent_by_the_caller", mark, "x"},
		{"valid", []byte{0x0a, 0x00}, ""},
		{"valid_with_unknown_field", unknownField, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			check := func(method string, err error) {
				t.Helper()
				if c.cause == "" {
					if err != nil {
						t.Fatalf("%s: %v", method, err)
					}
					return
				}
				st := status.Convert(err)
				var info *errdetails.ErrorInfo
				for _, d := range st.Details() {
					if i, ok := d.(*errdetails.ErrorInfo); ok {
						info = i
					}
				}
				if st.Code() != codes.InvalidArgument || info.GetReason() != "invalid_request" || info.GetDomain() != "flexway.dev" ||
					!strings.Contains(st.Message(), "grpc.health.v1.HealthCheckRequest") || !strings.Contains(st.Message(), c.cause) {
					t.Fatalf("%s: %v %q %v, want INVALID_ARGUMENT invalid_request naming the message and %q", method, st.Code(), st.Message(), info, c.cause)
				}
			}
			in, out := c.payload, []byte(nil)
			check("Check", conn.Invoke(ctx, "/grpc.health.v1.Health/Check", &in, &out, raw))
			s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/grpc.health.v1.Health/Watch", raw)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SendMsg(&in); err != nil {
				t.Fatal(err)
			}
			_ = s.CloseSend()
			check("Watch", s.RecvMsg(&out))
		})
	}
}
