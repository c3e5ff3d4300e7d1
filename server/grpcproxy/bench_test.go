package grpcproxy_test

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// benchUnary runs UnaryCall from concurrency goroutines (64, or 1 for the
// latency of a call alone) and reports the p50 and p99 latency of one call,
// in microseconds.
func benchUnary(b *testing.B, client testpb.TestServiceClient, concurrency int) {
	req := &testpb.SimpleRequest{ResponseSize: 256, Payload: &testpb.Payload{Body: make([]byte, 256)}}
	ctx := context.Background()
	for range 100 { // connect and warm up
		if _, err := client.UnaryCall(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	var (
		mu  sync.Mutex
		all []time.Duration
	)
	run := func(next func() bool) {
		var lat []time.Duration
		for next() {
			start := time.Now()
			if _, err := client.UnaryCall(ctx, req); err != nil {
				b.Error(err)
				return
			}
			lat = append(lat, time.Since(start))
		}
		mu.Lock()
		all = append(all, lat...)
		mu.Unlock()
	}
	b.ResetTimer()
	if concurrency == 1 {
		run(b.Loop)
	} else {
		// RunParallel starts parallelism × GOMAXPROCS goroutines.
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((concurrency + procs - 1) / procs)
		b.RunParallel(func(pb *testing.PB) { run(pb.Next) })
	}
	b.StopTimer()
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Nanoseconds())/1e3, "p50-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds())/1e3, "p99-µs")
	}
}

// concurrencies are the unary benchmarks' sub-benchmarks.
var concurrencies = []int{64, 1}

func dial(b *testing.B, addr string) *grpc.ClientConn {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return conn
}

// BenchmarkUnaryDirect is the baseline: the client calls the upstream.
func BenchmarkUnaryDirect(b *testing.B) {
	client := testpb.NewTestServiceClient(dial(b, startUpstream(b, newUpstream())))
	for _, c := range concurrencies {
		b.Run("c="+itoa(c), func(b *testing.B) { benchUnary(b, client, c) })
	}
}

// BenchmarkUnaryProxied is the same call through the proxy; the added p50
// is the proxy's overhead.
func BenchmarkUnaryProxied(b *testing.B) {
	f := startFront(b, routed(b, startUpstream(b, newUpstream())))
	go func() { // drain the call states the front records
		for range f.states {
		}
	}()
	for _, c := range concurrencies {
		b.Run("c="+itoa(c), func(b *testing.B) { benchUnary(b, f.client, c) })
	}
}

// streamUpstream sends the same 1 MiB message once per ResponseParameters,
// so that the benchmark measures the relay, not the upstream.
type streamUpstream struct {
	testpb.UnimplementedTestServiceServer
	msg *testpb.StreamingOutputCallResponse
}

func (u *streamUpstream) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for range req.GetResponseParameters() {
		if err := ss.Send(u.msg); err != nil {
			return err
		}
	}
	return nil
}

const mib = 1 << 20

func benchServerStream(b *testing.B, client testpb.TestServiceClient) {
	req := &testpb.StreamingOutputCallRequest{}
	for range b.N {
		req.ResponseParameters = append(req.ResponseParameters, &testpb.ResponseParameters{Size: mib})
	}
	b.SetBytes(mib)
	b.ResetTimer()
	stream, err := client.StreamingOutputCall(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		resp, err := stream.Recv()
		if err != nil {
			b.Fatalf("Recv %d: %v", i, err)
		}
		if n := len(resp.GetPayload().GetBody()); n != mib {
			b.Fatalf("message %d: %d bytes", i, n)
		}
	}
	if _, err := stream.Recv(); err == nil {
		b.Fatal("more messages than asked")
	}
}

func startStreamUpstream(b *testing.B) string {
	s := grpc.NewServer()
	testpb.RegisterTestServiceServer(s, &streamUpstream{msg: &testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: pattern(mib, 5)}}})
	return serve(b, s)
}

// BenchmarkServerStream1MiB streams 1 MiB messages through the proxy.
func BenchmarkServerStream1MiB(b *testing.B) {
	o := routed(b, startStreamUpstream(b))
	o.MaxMessageBytes = 2 * mib
	f := startFront(b, o)
	benchServerStream(b, f.client)
}

// BenchmarkServerStream1MiBDirect is the baseline without the proxy.
func BenchmarkServerStream1MiBDirect(b *testing.B) {
	benchServerStream(b, testpb.NewTestServiceClient(dial(b, startStreamUpstream(b))))
}
