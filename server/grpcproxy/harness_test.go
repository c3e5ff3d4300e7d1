package grpcproxy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/grpcproxy"
)

// waitBody is the request payload that makes the upstream wait for its
// context to end, recording what it saw.
var waitBody = []byte("wait")

// pattern returns n deterministic bytes that differ with seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// waited is what the upstream saw of a call that waited for its context.
type waited struct {
	deadline    time.Time
	hasDeadline bool
	err         error
	ended       time.Time // when the context ended
}

// upstream is the test's real gRPC backend: grpc_testing's TestService.
type upstream struct {
	testpb.UnimplementedTestServiceServer

	calls    atomic.Int64
	active   atomic.Int64 // FullDuplexCall handlers running
	mu       sync.Mutex
	md       metadata.MD // incoming metadata of the last call
	received [][]byte    // StreamingInputCall bodies, in order
	waits    chan waited
}

func newUpstream() *upstream { return &upstream{waits: make(chan waited, 16)} }

// enter records a call's metadata and sends the fixed header.
func (u *upstream) enter(ctx context.Context) {
	u.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	u.mu.Lock()
	u.md = md.Copy()
	u.mu.Unlock()
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-up-header", "hv"))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-up-trailer", "tv"))
}

func (u *upstream) lastMD() metadata.MD {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.md
}

func (u *upstream) wait(ctx context.Context) {
	d, ok := ctx.Deadline()
	<-ctx.Done()
	u.waits <- waited{deadline: d, hasDeadline: ok, err: ctx.Err(), ended: time.Now()}
}

// echoStatus is the status an EchoStatus asks for, with an ErrorInfo
// detail so that details are checked too.
func echoStatus(s *testpb.EchoStatus) error {
	st, err := status.New(codes.Code(s.GetCode()), s.GetMessage()).
		WithDetails(&errdetails.ErrorInfo{Reason: "upstream_reason", Domain: "up.test", Metadata: map[string]string{"k": "v"}})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// UnaryCall echoes the payload, or answers ResponseSize pattern bytes, or
// the asked status, or waits for the context when the body is waitBody.
func (u *upstream) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	u.enter(ctx)
	if bytes.Equal(req.GetPayload().GetBody(), waitBody) {
		u.wait(ctx)
		return nil, ctx.Err()
	}
	if req.GetResponseStatus() != nil {
		return nil, echoStatus(req.GetResponseStatus())
	}
	body := req.GetPayload().GetBody()
	if req.GetResponseSize() > 0 {
		body = pattern(int(req.GetResponseSize()), 1)
	}
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: body}, Username: "from-upstream"}, nil
}

// StreamingOutputCall sends one message per ResponseParameters, of its
// size, then the asked status if any.
func (u *upstream) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	u.enter(ss.Context())
	for i, p := range req.GetResponseParameters() {
		if err := ss.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: pattern(int(p.GetSize()), byte(i))}}); err != nil {
			return err
		}
	}
	if req.GetResponseStatus() != nil {
		return echoStatus(req.GetResponseStatus())
	}
	return nil
}

// StreamingInputCall records every body and answers their total size.
func (u *upstream) StreamingInputCall(ss grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	u.enter(ss.Context())
	total := 0
	for {
		req, err := ss.Recv()
		if err == io.EOF {
			return ss.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(total)})
		}
		if err != nil {
			return err
		}
		u.mu.Lock()
		u.received = append(u.received, req.GetPayload().GetBody())
		u.mu.Unlock()
		total += len(req.GetPayload().GetBody())
	}
}

// FullDuplexCall answers each request, as it arrives, with its payload
// echoed then one message per ResponseParameters; a ResponseStatus ends the
// call with it; waitBody waits for the context.
func (u *upstream) FullDuplexCall(ss grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	u.active.Add(1)
	defer u.active.Add(-1)
	u.enter(ss.Context())
	for {
		req, err := ss.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if bytes.Equal(req.GetPayload().GetBody(), waitBody) {
			u.wait(ss.Context())
			return ss.Context().Err()
		}
		if req.GetResponseStatus() != nil {
			return echoStatus(req.GetResponseStatus())
		}
		if err := ss.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
		for i, p := range req.GetResponseParameters() {
			if err := ss.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: pattern(int(p.GetSize()), byte(i))}}); err != nil {
				return err
			}
		}
	}
}

// serve runs s on a free loopback port until the test ends and returns its
// address.
func serve(tb testing.TB, s *grpc.Server) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go s.Serve(lis)
	tb.Cleanup(s.Stop)
	return lis.Addr().String()
}

// startUpstream serves u on loopback, plaintext or with creds.
func startUpstream(tb testing.TB, u *upstream, opts ...grpc.ServerOption) string {
	s := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(s, u)
	return serve(tb, s)
}

// frameCount is what the front's stream wrapper saw of the relayed frames.
type frameCount struct {
	recv, sent           atomic.Int64 // frames
	recvBytes, sentBytes atomic.Int64
	other                atomic.Int64 // messages that were not *grpcproxy.Frame
	// refuseAfter, when positive, makes RecvMsg refuse (RESOURCE_EXHAUSTED,
	// as a budget would) once that many frames were received, without
	// ending the stream.
	refuseAfter atomic.Int64
}

// countingStream wraps the handler's stream like the metering interceptor
// will, counting frames.
type countingStream struct {
	grpc.ServerStream
	ctx context.Context
	n   *frameCount
}

func (s *countingStream) Context() context.Context { return s.ctx }

func (s *countingStream) RecvMsg(m any) error {
	if n := s.n.refuseAfter.Load(); n > 0 && s.n.recv.Load() >= n {
		return status.Error(codes.ResourceExhausted, "budget exceeded")
	}
	err := s.ServerStream.RecvMsg(m)
	if f, ok := m.(*grpcproxy.Frame); !ok {
		s.n.other.Add(1)
	} else if err == nil {
		s.n.recv.Add(1)
		s.n.recvBytes.Add(int64(len(f.Payload)))
	}
	return err
}

func (s *countingStream) SendMsg(m any) error {
	if f, ok := m.(*grpcproxy.Frame); ok {
		s.n.sent.Add(1)
		s.n.sentBytes.Add(int64(len(f.Payload)))
	} else {
		s.n.other.Add(1)
	}
	return s.ServerStream.SendMsg(m)
}

// front is the gateway under test: a gRPC server with the proxy's codec and
// handler, an identity interceptor that builds the call state from the
// test-tenant, test-agent and test-sensitive metadata, and the health
// service (a protobuf service on the same server).
type front struct {
	proxy  *grpcproxy.Proxy
	conn   *grpc.ClientConn
	client testpb.TestServiceClient
	states chan *call.State // each proxied call's state, once it ended
	frames frameCount
}

func startFront(tb testing.TB, o grpcproxy.Options, opts ...grpc.ServerOption) *front {
	tb.Helper()
	p, err := grpcproxy.New(o)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	f := &front{proxy: p, states: make(chan *call.State, 1024)}
	identity := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		first := func(k string) string {
			if v := md.Get(k); len(v) > 0 {
				return v[0]
			}
			return ""
		}
		st := &call.State{Tenant: first("test-tenant"), Agent: first("test-agent"), Sensitive: first("test-sensitive") == "1"}
		err := handler(srv, &countingStream{ServerStream: ss, ctx: call.NewContext(ss.Context(), st), n: &f.frames})
		if _, ok := p.Lookup(info.FullMethod); ok {
			f.states <- st
		}
		return err
	}
	s := grpc.NewServer(append([]grpc.ServerOption{
		grpc.ForceServerCodecV2(grpcproxy.Codec()),
		grpc.UnknownServiceHandler(p.Handler()),
		grpc.StreamInterceptor(identity),
	}, opts...)...)
	healthpb.RegisterHealthServer(s, health.NewServer())
	addr := serve(tb, s)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	f.conn, f.client = conn, testpb.NewTestServiceClient(conn)
	return f
}

// state returns the call state of the last proxied call.
func (f *front) state(tb testing.TB) *call.State {
	tb.Helper()
	select {
	case st := <-f.states:
		return st
	case <-time.After(5 * time.Second):
		tb.Fatal("no call state recorded")
		return nil
	}
}

// testingSet writes the FileDescriptorSet of grpc_testing's test.proto,
// dependencies first, and returns its path.
func testingSet(tb testing.TB) string {
	tb.Helper()
	fd, err := protoregistry.GlobalFiles.FindFileByPath("grpc/testing/test.proto")
	if err != nil {
		tb.Fatal(err)
	}
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imports := f.Imports()
		for i := 0; i < imports.Len(); i++ {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	add(fd)
	return writeSet(tb, "testing.binpb", set)
}

// writeSet marshals set into a temporary file and returns its path.
func writeSet(tb testing.TB, name string, set *descriptorpb.FileDescriptorSet) string {
	tb.Helper()
	b, err := proto.Marshal(set)
	if err != nil {
		tb.Fatal(err)
	}
	return writeFile(tb, name, b)
}

func writeFile(tb testing.TB, name string, b []byte) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// routed returns Options routing grpc.testing.TestService to backend "up"
// at addr.
func routed(tb testing.TB, addr string) grpcproxy.Options {
	return grpcproxy.Options{
		DescriptorSets: []string{testingSet(tb)},
		Services:       map[string]string{"grpc.testing.TestService": "up"},
		Backends:       map[string]grpcproxy.Backend{"up": {Target: addr}},
	}
}

// itoa is strconv.Itoa, for test names.
func itoa(i int) string { return strconv.Itoa(i) }

// tlsCreds is a convenience for TLS servers in tests.
func tlsCreds(cfg *tls.Config) grpc.ServerOption { return grpc.Creds(credentials.NewTLS(cfg)) }
