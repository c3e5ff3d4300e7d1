package grpcproxy_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/flexway/flexway/server/grpcproxy"
)

// TestReflectionServesDescriptorSets: a routed service that this binary
// does not link (acme.ocr.v1, built by hand) is listed by reflection with
// the server's own services, and its file is served from the descriptor
// set.
func TestReflectionServesDescriptorSets(t *testing.T) {
	set := ocrSet(t, method("Recognize", nil, false, false))
	p, err := grpcproxy.New(grpcproxy.Options{
		DescriptorSets: []string{set},
		Services:       map[string]string{"acme.ocr.v1.OcrService": "ocr"},
		Backends:       map[string]grpcproxy.Backend{"ocr": {Target: "127.0.0.1:1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	s := grpc.NewServer(grpc.ForceServerCodecV2(grpcproxy.Codec()), grpc.UnknownServiceHandler(p.Handler()))
	healthpb.RegisterHealthServer(s, health.NewServer())
	grpcproxy.RegisterReflection(s, p)
	conn, err := grpc.NewClient(serve(t, s), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
		t.Helper()
		if err := info.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := info.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	list := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	var names []string
	for _, s := range list.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"acme.ocr.v1.OcrService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(names, want) {
			t.Errorf("services %v lack %s", names, want)
		}
	}
	for _, sym := range []string{"acme.ocr.v1.OcrService", "acme.ocr.v1.OcrService.Recognize", "acme.ocr.v1.Req"} {
		resp := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: sym}})
		files := resp.GetFileDescriptorResponse().GetFileDescriptorProto()
		if len(files) == 0 {
			t.Fatalf("file containing %s: %v", sym, resp.GetErrorResponse())
		}
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(files[0], &fd); err != nil || fd.GetName() != "acme/ocr/v1/ocr.proto" || fd.GetService()[0].GetMethod()[0].GetName() != "Recognize" {
			t.Fatalf("file containing %s: %v %v", sym, fd.GetName(), err)
		}
	}
	resp := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileByFilename{FileByFilename: "acme/ocr/v1/ocr.proto"}})
	if len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) != 1 {
		t.Fatalf("file acme/ocr/v1/ocr.proto: %v", resp)
	}
	resp = ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "acme.ocr.v1.Nope"}})
	if resp.GetErrorResponse() == nil {
		t.Fatalf("an unknown symbol was found: %v", resp)
	}
}
