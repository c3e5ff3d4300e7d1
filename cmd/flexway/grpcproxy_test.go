package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	ocrv1 "github.com/flexway/flexway/examples/ocr/gen/acme/ocr/v1"
)

// ocrModel is the OCR example's model, in the test process.
type ocrModel struct {
	ocrv1.UnimplementedOcrServiceServer
}

func (ocrModel) Recognize(_ context.Context, req *ocrv1.RecognizeRequest) (*ocrv1.RecognizeResponse, error) {
	return &ocrv1.RecognizeResponse{Text: fmt.Sprintf("%d bytes", len(req.GetImage()))}, nil
}

func (ocrModel) Translate(_ context.Context, req *ocrv1.TranslateRequest) (*ocrv1.TranslateResponse, error) {
	return &ocrv1.TranslateResponse{Text: strings.ToUpper(req.GetText())}, nil
}

func (ocrModel) StreamRecognize(req *ocrv1.StreamRecognizeRequest, s ocrv1.OcrService_StreamRecognizeServer) error {
	for i, p := range req.GetPages() {
		if err := s.Send(&ocrv1.StreamRecognizeResponse{Page: int32(i + 1), Text: fmt.Sprintf("page of %d bytes", len(p))}); err != nil {
			return err
		}
	}
	return nil
}

func (ocrModel) Health(context.Context, *ocrv1.HealthRequest) (*ocrv1.HealthResponse, error) {
	return &ocrv1.HealthResponse{Status: "ok"}, nil
}

// startOCR serves the OCR model on a free loopback port until stop or the
// test's end.
func startOCR(t *testing.T) (addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	ocrv1.RegisterOcrServiceServer(s, ocrModel{})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String(), s.Stop
}

// ocrDescriptorSet writes the OCR service's FileDescriptorSet (with its
// imports), as `buf build` would, and returns its path.
func ocrDescriptorSet(t *testing.T) string {
	t.Helper()
	var fds descriptorpb.FileDescriptorSet
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		for i := 0; i < fd.Imports().Len(); i++ {
			add(fd.Imports().Get(i).FileDescriptor)
		}
		fds.File = append(fds.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(ocrv1.File_acme_ocr_v1_ocr_proto)
	b, err := proto.Marshal(&fds)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ocr.binpb")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// ocrConfig routes acme.ocr.v1.OcrService to the OCR model at addr, with
// the given budget block.
func ocrConfig(t *testing.T, addr, set string, external bool, budget string) string {
	t.Helper()
	t.Setenv("FLEXWAY_TEST_ADMIN_KEY", testAdminKey)
	return testConfig{
		AdminKey: true,
		Keys:     []testKey{acmeBot},
		Backend:  "chat",
		Budget:   budget,
		GRPCServices: &testGRPC{DescriptorSets: []string{set},
			Services: map[string]string{"acme.ocr.v1.OcrService": "ocr"}},
		Backends: []testBackend{
			{Name: "chat", URL: "http://127.0.0.1:1/v1", Internal: true},
			{Name: "ocr", Kind: "grpc", URL: addr, Internal: !external, Auth: "{type: none}"},
		},
	}.yaml()
}

// TestProxiedModelMetered: the OCR example's methods through Flexway with
// the generated client: per call charged exactly price / 1000, per byte
// exactly the request and response message bytes at price per 1,000
// bytes, an unmetered method still authenticated, a failing upstream
// charges nothing, and the call past the cap is refused.
func TestProxiedModelMetered(t *testing.T) {
	addr, stop := startOCR(t)
	// 50 mEUR a month: room for a few calls, then a refusal.
	g := startGateway(t, ocrConfig(t, addr, ocrDescriptorSet(t), false, "    default: {eur_per_month: 0.05}"))
	client := ocrv1.NewOcrServiceClient(grpcConn(t, g))
	ctx := withKey(t, demoKey)
	eur := func() int64 { return usageOf(t, g, "")["eur_per_month"].Committed }

	rec, err := client.Recognize(ctx, &ocrv1.RecognizeRequest{Image: make([]byte, 3000)})
	if err != nil || rec.GetText() != "3000 bytes" {
		t.Fatalf("Recognize: %v, %v", rec, err)
	}
	if got := eur(); got != 2_000_000 {
		t.Fatalf("after one Recognize: %d nano-euros, want 2,000,000 (2 EUR per 1,000 calls)", got)
	}

	treq := &ocrv1.TranslateRequest{Text: "bonjour tout le monde", Language: "en"}
	tr, err := client.Translate(ctx, treq)
	if err != nil {
		t.Fatal(err)
	}
	bytes := int64(proto.Size(treq) + proto.Size(tr))
	want := 2_000_000 + ceilDiv(bytes*10_000_000, 1000) // 0.01 EUR per 1,000 bytes
	if got := eur(); got != want {
		t.Fatalf("after Translate (%d bytes): %d nano-euros, want %d", bytes, got, want)
	}

	sreq := &ocrv1.StreamRecognizeRequest{Pages: [][]byte{make([]byte, 100), make([]byte, 250)}}
	stream, err := client.StreamRecognize(ctx, sreq)
	if err != nil {
		t.Fatal(err)
	}
	sbytes := int64(proto.Size(sreq))
	for {
		page, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sbytes += int64(proto.Size(page))
	}
	want += ceilDiv(sbytes*10_000_000, 1000)
	if got := eur(); got != want {
		t.Fatalf("after StreamRecognize (%d bytes): %d nano-euros, want %d", sbytes, got, want)
	}

	// Unmetered, but not anonymous.
	if h, err := client.Health(ctx, &ocrv1.HealthRequest{}); err != nil || h.GetStatus() != "ok" {
		t.Fatalf("Health: %v, %v", h, err)
	}
	if _, err := client.Health(withKey(t, ""), &ocrv1.HealthRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Health without a key: %v, want UNAUTHENTICATED", err)
	}
	if got := eur(); got != want {
		t.Fatalf("Health charged: %d, want %d", got, want)
	}

	// Recognize until the cap refuses: exactly when the next 2 mEUR would
	// not fit, before the upstream.
	for want+2_000_000 <= 50_000_000 {
		if _, err := client.Recognize(ctx, &ocrv1.RecognizeRequest{}); err != nil {
			t.Fatalf("Recognize with %d of 50,000,000 nano-euros used: %v", want, err)
		}
		want += 2_000_000
	}
	_, err = client.Recognize(ctx, &ocrv1.RecognizeRequest{})
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(fmt.Sprint(st.Details()), "budget_exceeded") {
		t.Fatalf("Recognize past the cap: %v, want RESOURCE_EXHAUSTED budget_exceeded", err)
	}
	if got := eur(); got != want {
		t.Fatalf("committed %d, want %d", got, want)
	}

	// A failing upstream charges nothing.
	stop()
	if _, err := client.Translate(ctx, treq); err == nil {
		t.Fatal("Translate to a stopped model succeeded")
	}
	if got := eur(); got != want {
		t.Fatalf("a failed call charged: %d, want %d", got, want)
	}
	if u := usageOf(t, g, "")["eur_per_month"]; u.Reserved != 0 {
		t.Fatalf("reserved %d after the calls", u.Reserved)
	}
}

// TestProxiedSensitiveAndUnrouted: a sensitive call to a service served
// only by an external backend is PERMISSION_DENIED, never sent; an
// unrouted service is UNIMPLEMENTED; deadlines reach the upstream.
func TestProxiedSensitiveAndUnrouted(t *testing.T) {
	addr, _ := startOCR(t)
	g := startGateway(t, ocrConfig(t, addr, ocrDescriptorSet(t), true, "    default: {eur_per_month: 1}"))
	conn := grpcConn(t, g)
	client := ocrv1.NewOcrServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(withKey(t, demoKey), "flexway-sensitive", "true")
	_, err := client.Recognize(ctx, &ocrv1.RecognizeRequest{})
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || !strings.Contains(fmt.Sprint(st.Details()), "sensitive_no_internal_backend") {
		t.Fatalf("sensitive call to an external model: %v, want PERMISSION_DENIED sensitive_no_internal_backend", err)
	}
	if u := usageOf(t, g, "")["eur_per_month"]; u.Committed != 0 || u.Reserved != 0 {
		t.Fatalf("a refused call left %+v", u)
	}
	// Not sensitive: served.
	if _, err := client.Recognize(withKey(t, demoKey), &ocrv1.RecognizeRequest{}); err != nil {
		t.Fatalf("plain call: %v", err)
	}
	err = conn.Invoke(withKey(t, demoKey), "/acme.other.v1.Nope/Do", &ocrv1.HealthRequest{}, &ocrv1.HealthResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("unrouted service: %v, want UNIMPLEMENTED", err)
	}
	dctx, cancel := context.WithTimeout(withKey(t, demoKey), time.Nanosecond)
	defer cancel()
	if _, err := client.Recognize(dctx, &ocrv1.RecognizeRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("expired deadline: %v, want DEADLINE_EXCEEDED", err)
	}
}

// TestProxiedThroughGrpcurl: grpcurl, given the descriptor set, calls the
// OCR model through Flexway.
func TestProxiedThroughGrpcurl(t *testing.T) {
	grpcurl := grpcurlPath(t)
	addr, _ := startOCR(t)
	set := ocrDescriptorSet(t)
	g := startGateway(t, ocrConfig(t, addr, set, false, "    default: {eur_per_month: 1}"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, grpcurl, "-plaintext", "-protoset", set,
		"-H", "authorization: Bearer "+demoKey, "-d", `{"text":"hello","language":"fr"}`,
		g.GRPC, "acme.ocr.v1.OcrService/Translate").CombinedOutput()
	if err != nil {
		t.Fatalf("grpcurl: %v\n%s", err, out)
	}
	var resp struct{ Text string }
	if err := json.Unmarshal(out, &resp); err != nil || resp.Text != "HELLO" {
		t.Fatalf("grpcurl answer %s (%v)", out, err)
	}
	if got := usageOf(t, g, "")["eur_per_month"].Committed; got == 0 {
		t.Fatal("the grpcurl call was not charged")
	}
}

// TestPerByteStreamHeldToTheCap: a per-byte stream whose answers would take
// the tenant past its cap ends with RESOURCE_EXHAUSTED before the message
// that would pass it; what passed is charged, never more than the cap.
func TestPerByteStreamHeldToTheCap(t *testing.T) {
	addr, _ := startOCR(t)
	// 0.005 EUR at 0.01 EUR per 1,000 bytes: 500 bytes.
	g := startGateway(t, ocrConfig(t, addr, ocrDescriptorSet(t), false, "    default: {eur_per_month: 0.005}"))
	client := ocrv1.NewOcrServiceClient(grpcConn(t, g))
	stream, err := client.StreamRecognize(withKey(t, demoKey), &ocrv1.StreamRecognizeRequest{Pages: make([][]byte, 60)})
	if err != nil {
		t.Fatal(err)
	}
	pages := 0
	for {
		_, err = stream.Recv()
		if err != nil {
			break
		}
		pages++
	}
	if status.Code(err) != codes.ResourceExhausted || pages == 0 || pages >= 60 {
		t.Fatalf("after %d pages: %v; want RESOURCE_EXHAUSTED part way", pages, err)
	}
	u := usageOf(t, g, "")["eur_per_month"]
	if u.Committed > 5_000_000 || u.Committed == 0 || u.Reserved != 0 {
		t.Fatalf("committed %d of 5,000,000 nano-euros, reserved %d", u.Committed, u.Reserved)
	}
}

// TestProxiedServiceReflection: reflection on the gRPC port lists and
// describes a proxied specialised-model service from its descriptor set,
// and grpcurl calls it with nothing but reflection (no -protoset); the
// gateway's own services stay listed.
func TestProxiedServiceReflection(t *testing.T) {
	grpcurl := grpcurlPath(t)
	addr, _ := startOCR(t)
	g := startGateway(t, ocrConfig(t, addr, ocrDescriptorSet(t), false, "    default: {eur_per_month: 1}"))
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, grpcurl, append([]string{"-plaintext"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	list := run(g.GRPC, "list")
	for _, svc := range []string{"acme.ocr.v1.OcrService", "flexway.v1.ChatService", "grpc.health.v1.Health"} {
		if !strings.Contains(list, svc+"\n") {
			t.Errorf("grpcurl list lacks %s:\n%s", svc, list)
		}
	}
	methods := run(g.GRPC, "list", "acme.ocr.v1.OcrService")
	for _, m := range []string{"Recognize", "Translate", "StreamRecognize", "Health"} {
		if !strings.Contains(methods, "acme.ocr.v1.OcrService."+m+"\n") {
			t.Errorf("grpcurl list acme.ocr.v1.OcrService lacks %s:\n%s", m, methods)
		}
	}
	desc := run(g.GRPC, "describe", "acme.ocr.v1.TranslateRequest")
	if !strings.Contains(desc, "string text = ") {
		t.Errorf("grpcurl describe acme.ocr.v1.TranslateRequest:\n%s", desc)
	}
	out := run("-H", "authorization: Bearer "+demoKey, "-d", `{"text":"hello","language":"fr"}`,
		g.GRPC, "acme.ocr.v1.OcrService/Translate")
	var resp struct{ Text string }
	if err := json.Unmarshal([]byte(out), &resp); err != nil || resp.Text != "HELLO" {
		t.Fatalf("grpcurl answer %s (%v)", out, err)
	}
}
