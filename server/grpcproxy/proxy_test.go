package grpcproxy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/grpcproxy"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantUpMD checks the header and trailer the upstream always sets.
func wantUpMD(t *testing.T, header, trailer metadata.MD) {
	t.Helper()
	if got := header.Get("x-up-header"); !slices.Equal(got, []string{"hv"}) {
		t.Errorf("header x-up-header = %q, want [hv] (header %v)", got, header)
	}
	if got := trailer.Get("x-up-trailer"); !slices.Equal(got, []string{"tv"}) {
		t.Errorf("trailer x-up-trailer = %q, want [tv] (trailer %v)", got, trailer)
	}
}

func TestUnaryRelaysBytesHeaderAndTrailer(t *testing.T) {
	up := newUpstream()
	f := startFront(t, routed(t, startUpstream(t, up)))
	body := pattern(100_000, 9)
	var header, trailer metadata.MD
	resp, err := f.client.UnaryCall(ctxT(t), &testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}},
		grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatalf("UnaryCall: %v", err)
	}
	want := &testpb.SimpleResponse{Payload: &testpb.Payload{Body: body}, Username: "from-upstream"}
	if d := cmp.Diff(want, resp, protocmp.Transform()); d != "" {
		t.Errorf("response (-want +got):\n%s", d)
	}
	wantUpMD(t, header, trailer)
	if got := up.calls.Load(); got != 1 {
		t.Errorf("upstream calls = %d, want 1", got)
	}
	st := f.state(t)
	if got, want := st.Outcome(), (call.Outcome{Backend: "up", Served: true}); got != want {
		t.Errorf("outcome = %+v, want %+v", got, want)
	}
	// The handler used the stream it was given, with frames only.
	reqSize := int64(proto.Size(&testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}}))
	if got := [4]int64{f.frames.recv.Load(), f.frames.recvBytes.Load(), f.frames.sent.Load(), f.frames.sentBytes.Load()}; got != [4]int64{1, reqSize, 1, int64(proto.Size(want))} {
		t.Errorf("frames recv, recv bytes, sent, sent bytes = %v, want [1 %d 1 %d]", got, reqSize, proto.Size(want))
	}
	if n := f.frames.other.Load(); n != 0 {
		t.Errorf("%d messages were not frames", n)
	}
}

func TestServerStreamRelaysEveryMessage(t *testing.T) {
	up := newUpstream()
	f := startFront(t, routed(t, startUpstream(t, up)))
	sizes := []int32{0, 1, 100, 70_000, 3}
	req := &testpb.StreamingOutputCallRequest{}
	for _, s := range sizes {
		req.ResponseParameters = append(req.ResponseParameters, &testpb.ResponseParameters{Size: s})
	}
	stream, err := f.client.StreamingOutputCall(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	var sent int64
	for i, s := range sizes {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		if want := pattern(int(s), byte(i)); !bytes.Equal(resp.GetPayload().GetBody(), want) {
			t.Errorf("message %d: %d bytes, want %d pattern bytes", i, len(resp.GetPayload().GetBody()), s)
		}
		sent += int64(proto.Size(resp))
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("after the last message: %v, want io.EOF", err)
	}
	header, _ := stream.Header()
	wantUpMD(t, header, stream.Trailer())
	if got := [2]int64{f.frames.sent.Load(), f.frames.sentBytes.Load()}; got != [2]int64{int64(len(sizes)), sent} {
		t.Errorf("frames sent, bytes = %v, want [%d %d]", got, len(sizes), sent)
	}
	if got := f.state(t).Outcome(); !got.Served || got.Backend != "up" {
		t.Errorf("outcome = %+v, want served by up", got)
	}
}

func TestClientStreamRelaysEveryMessage(t *testing.T) {
	up := newUpstream()
	f := startFront(t, routed(t, startUpstream(t, up)))
	stream, err := f.client.StreamingInputCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var bodies [][]byte
	for i, n := range []int{10, 0, 200_000, 1} {
		b := pattern(n, byte(i+3))
		bodies = append(bodies, b)
		if err := stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: b}}); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		t.Fatalf("CloseAndRecv: %v", err)
	}
	if got, want := resp.GetAggregatedPayloadSize(), int32(200_011); got != want {
		t.Errorf("aggregated size = %d, want %d", got, want)
	}
	up.mu.Lock()
	got := up.received
	up.mu.Unlock()
	// An empty body arrives as nil: compare contents.
	if len(got) != len(bodies) {
		t.Fatalf("upstream received %d messages, want %d", len(got), len(bodies))
	}
	for i := range bodies {
		if !bytes.Equal(got[i], bodies[i]) {
			t.Errorf("message %d differs: %d bytes, want %d", i, len(got[i]), len(bodies[i]))
		}
	}
	if n := f.frames.recv.Load(); n != 4 {
		t.Errorf("frames received = %d, want 4", n)
	}
}

func TestBidiStreamPingPong(t *testing.T) {
	up := newUpstream()
	f := startFront(t, routed(t, startUpstream(t, up)))
	stream, err := f.client.FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	// Each answer is awaited before the next request: the relay must run
	// both directions concurrently, not collect the requests first.
	for i := range 5 {
		body := pattern(1000*i, byte(i))
		if err := stream.Send(&testpb.StreamingOutputCallRequest{
			Payload:            &testpb.Payload{Body: body},
			ResponseParameters: []*testpb.ResponseParameters{{Size: int32(i + 1)}},
		}); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
		echo, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv echo %d: %v", i, err)
		}
		if !bytes.Equal(echo.GetPayload().GetBody(), body) {
			t.Errorf("echo %d: %d bytes, want %d", i, len(echo.GetPayload().GetBody()), len(body))
		}
		extra, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		if !bytes.Equal(extra.GetPayload().GetBody(), pattern(i+1, 0)) {
			t.Errorf("message %d: got %v", i, extra.GetPayload().GetBody())
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("after CloseSend: %v, want io.EOF (upstream saw the half-close)", err)
	}
	wantUpMD(t, mustHeader(t, stream), stream.Trailer())
}

func mustHeader(t *testing.T, s grpc.ClientStream) metadata.MD {
	t.Helper()
	h, err := s.Header()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// wantStatus checks the code, message and ErrorInfo the upstream sent.
func wantStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code || st.Message() != msg {
		t.Fatalf("status = %v %q, want %v %q", st.Code(), st.Message(), code, msg)
	}
	want := []any{&errdetails.ErrorInfo{Reason: "upstream_reason", Domain: "up.test", Metadata: map[string]string{"k": "v"}}}
	if d := cmp.Diff(want, st.Details(), protocmp.Transform()); d != "" {
		t.Errorf("details (-want +got):\n%s", d)
	}
}

func TestUpstreamStatusComesBackAsSent(t *testing.T) {
	up := newUpstream()
	f := startFront(t, routed(t, startUpstream(t, up)))

	t.Run("unary", func(t *testing.T) {
		var header, trailer metadata.MD
		_, err := f.client.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.FailedPrecondition), Message: "page unreadable"}},
			grpc.Header(&header), grpc.Trailer(&trailer))
		wantStatus(t, err, codes.FailedPrecondition, "page unreadable")
		wantUpMD(t, header, trailer)
		if got, want := f.state(t).Outcome(), (call.Outcome{Backend: "up", Served: false}); got != want {
			t.Errorf("outcome = %+v, want %+v (an error before any message did not serve)", got, want)
		}
	})
	t.Run("after messages", func(t *testing.T) {
		stream, err := f.client.StreamingOutputCall(ctxT(t), &testpb.StreamingOutputCallRequest{
			ResponseParameters: []*testpb.ResponseParameters{{Size: 5}, {Size: 6}},
			ResponseStatus:     &testpb.EchoStatus{Code: int32(codes.Aborted), Message: "model reloaded"},
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if _, err := stream.Recv(); err != nil {
				t.Fatalf("Recv %d: %v", i, err)
			}
		}
		_, err = stream.Recv()
		wantStatus(t, err, codes.Aborted, "model reloaded")
		wantUpMD(t, mustHeader(t, stream), stream.Trailer())
		if got, want := f.state(t).Outcome(), (call.Outcome{Backend: "up", Served: true}); got != want {
			t.Errorf("outcome = %+v, want %+v (messages reached the caller)", got, want)
		}
	})
}

func TestDeadlinePropagates(t *testing.T) {
	up := newUpstream()
	f := startFront(t, routed(t, startUpstream(t, up)))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	start := time.Now()
	_, err := f.client.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: waitBody}})
	if code := status.Code(err); code != codes.DeadlineExceeded {
		t.Fatalf("code = %v (%v), want DeadlineExceeded", code, err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("the call took %v with a 300ms deadline", el)
	}
	select {
	case w := <-up.waits:
		if !w.hasDeadline {
			t.Fatal("the upstream saw no deadline")
		}
		// The deadline crosses two hops as grpc-timeout, each receiver
		// adding its own clock's reading: equal within a few milliseconds.
		if d := w.deadline.Sub(deadline); d < -100*time.Millisecond || d > 50*time.Millisecond {
			t.Errorf("upstream deadline is %v after the client's, want within [-100ms, 50ms]", d)
		}
		// It ends at the deadline: by its own timer (deadline exceeded) or by
		// the gateway's cancellation when the gateway's own timer fires first.
		if !errors.Is(w.err, context.DeadlineExceeded) && !errors.Is(w.err, context.Canceled) {
			t.Errorf("upstream context ended with %v", w.err)
		}
		if d := w.ended.Sub(deadline); d < -100*time.Millisecond || d > time.Second {
			t.Errorf("upstream context ended %v after the client's deadline", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream never saw its context end")
	}
}

func TestCancellationPropagates(t *testing.T) {
	up := newUpstream()
	f := startFront(t, routed(t, startUpstream(t, up)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := f.client.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte("hello")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the call reached the upstream
		t.Fatal(err)
	}
	if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: waitBody}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the wait begin
	cancel()
	select {
	case w := <-up.waits:
		if !errors.Is(w.err, context.Canceled) {
			t.Errorf("upstream context ended with %v, want canceled", w.err)
		}
		if w.hasDeadline {
			t.Errorf("upstream saw a deadline %v; the client set none", w.deadline)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling the client did not cancel the upstream")
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("client Recv after cancel: %v, want Canceled", err)
	}
	if got := f.state(t).Outcome(); !got.Served {
		t.Errorf("outcome = %+v: a message had reached the caller", got)
	}
}

func TestUnroutedIsUnimplemented(t *testing.T) {
	up := newUpstream()
	f := startFront(t, routed(t, startUpstream(t, up)))
	_, err := testpb.NewReconnectServiceClient(f.conn).Start(ctxT(t), &testpb.ReconnectParams{})
	if st := status.Convert(err); st.Code() != codes.Unimplemented || st.Message() != "unknown service grpc.testing.ReconnectService" {
		t.Errorf("unrouted service: %v %q, want Unimplemented", st.Code(), st.Message())
	}
	err = f.conn.Invoke(ctxT(t), "/grpc.testing.TestService/NoSuchMethod", &testpb.Empty{}, &testpb.Empty{})
	if st := status.Convert(err); st.Code() != codes.Unimplemented || st.Message() != "unknown method NoSuchMethod for service grpc.testing.TestService" {
		t.Errorf("unknown method: %v %q, want Unimplemented", st.Code(), st.Message())
	}
	if n := up.calls.Load(); n != 0 {
		t.Errorf("upstream calls = %d, want 0", n)
	}
	// The gateway's own protobuf services still work on the same server.
	resp, err := healthpb.NewHealthClient(f.conn).Check(ctxT(t), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health Check through Codec: %v, %v", resp, err)
	}
}

func TestOversizedMessageIsResourceExhausted(t *testing.T) {
	up := newUpstream()
	o := routed(t, startUpstream(t, up))
	o.MaxMessageBytes = 64 << 10
	f := startFront(t, o)

	_, err := f.client.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 100 << 10})
	if code := status.Code(err); code != codes.ResourceExhausted {
		t.Errorf("oversized response: %v, want ResourceExhausted", err)
	}
	_, err = f.client.UnaryCall(ctxT(t), &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 100<<10)}})
	if code := status.Code(err); code != codes.ResourceExhausted {
		t.Errorf("oversized request: %v, want ResourceExhausted", err)
	}
	stream, err := f.client.StreamingInputCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: []byte("ok")}})
	_ = stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 100<<10)}})
	if _, err := stream.CloseAndRecv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversized request in a stream: %v, want ResourceExhausted", err)
	}
	// Just under the limit passes, and the gateway still serves.
	resp, err := f.client.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 60 << 10})
	if err != nil || len(resp.GetPayload().GetBody()) != 60<<10 {
		t.Fatalf("a call under the limit: %v", err)
	}
}

func TestCallerErrorEndsTheUpstreamCall(t *testing.T) {
	up := newUpstream()
	// The gateway's own receive limit is below the proxy's: the caller's
	// stream fails on the gateway while the upstream call is open.
	f := startFront(t, routed(t, startUpstream(t, up)), grpc.MaxRecvMsgSize(1024))
	stream, err := f.client.StreamingInputCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: []byte("small")}}); err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 2048)}})
	start := time.Now()
	_, err = stream.CloseAndRecv()
	if code := status.Code(err); code != codes.ResourceExhausted {
		t.Fatalf("code = %v (%v), want ResourceExhausted", code, err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("the refusal took %v: the upstream call was left waiting", el)
	}
}

func TestInterceptorRefusalMidStreamEndsTheUpstreamCall(t *testing.T) {
	up := newUpstream()
	f := startFront(t, routed(t, startUpstream(t, up)))
	f.frames.refuseAfter.Store(1)
	stream, err := f.client.FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	// The interceptor refuses the frame after the first: the relay stops
	// reading the caller at once, so the echo of "one" may or may not
	// arrive before the refusal.
	start := time.Now()
	if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte("one")}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		_, err := stream.Recv()
		if err == nil && i == 0 {
			continue
		}
		if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != "budget exceeded" {
			t.Fatalf("Recv %d = %v, want the interceptor's ResourceExhausted", i, err)
		}
		break
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("the refusal took %v", el)
	}
	select {
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream call was not cancelled")
	case <-waitCtxEnd(up):
	}
}

// waitCtxEnd is closed when the upstream's FullDuplexCall has returned.
func waitCtxEnd(up *upstream) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for up.active.Load() != 0 {
			time.Sleep(5 * time.Millisecond)
		}
		close(done)
	}()
	return done
}

func TestUnreachableBackendIsNotServed(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there any more
	o := routed(t, addr)
	o.Backends = map[string]grpcproxy.Backend{"down": {Target: addr}}
	o.Services = map[string]string{"grpc.testing.TestService": "down"}
	f := startFront(t, o)
	_, err = f.client.UnaryCall(ctxT(t), &testpb.SimpleRequest{})
	wantFault(t, err, codes.Unavailable, faults.UpstreamError)
	if msg := status.Convert(err).Message(); msg != "backend down is unavailable" {
		t.Errorf("message = %q: the transport's error must not reach the caller", msg)
	}
	if got, want := f.state(t).Outcome(), (call.Outcome{Backend: "down", Served: false}); got != want {
		t.Errorf("outcome = %+v, want %+v", got, want)
	}
}

func TestCallAfterCloseIsUnavailable(t *testing.T) {
	up := newUpstream()
	f := startFront(t, routed(t, startUpstream(t, up)))
	if err := f.proxy.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.proxy.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_, err := f.client.UnaryCall(ctxT(t), &testpb.SimpleRequest{})
	wantFault(t, err, codes.Unavailable, faults.Unavailable)
}

func TestUpstreamEndingFirstEndsTheClientStream(t *testing.T) {
	up := newUpstream()
	f := startFront(t, routed(t, startUpstream(t, up)))
	stream, err := f.client.FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&testpb.StreamingOutputCallRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.OutOfRange), Message: "done early"}}); err != nil {
		t.Fatal(err)
	}
	// The client has not half-closed; the upstream's end still ends the call.
	_, err = stream.Recv()
	wantStatus(t, err, codes.OutOfRange, "done early")
}
