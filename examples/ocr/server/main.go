// Command server is the OCR example's specialised model: a gRPC server of
// acme.ocr.v1.OcrService that pretends to read images. It is the upstream
// Flexway proxies in the README's "Meter a specialised model".
//
//	go run ./examples/ocr/server --listen 127.0.0.1:9300
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	ocrv1 "github.com/flexway/flexway/examples/ocr/gen/acme/ocr/v1"
)

// server implements ocrv1.OcrServiceServer. Its answers only describe the
// input: it is an example, not an OCR engine.
type server struct {
	ocrv1.UnimplementedOcrServiceServer
}

func (server) Recognize(_ context.Context, req *ocrv1.RecognizeRequest) (*ocrv1.RecognizeResponse, error) {
	return &ocrv1.RecognizeResponse{Text: fmt.Sprintf("example OCR: an image of %d bytes", len(req.GetImage()))}, nil
}

func (server) Translate(_ context.Context, req *ocrv1.TranslateRequest) (*ocrv1.TranslateResponse, error) {
	return &ocrv1.TranslateResponse{Text: "[" + req.GetLanguage() + "] " + strings.ToUpper(req.GetText())}, nil
}

func (server) StreamRecognize(req *ocrv1.StreamRecognizeRequest, stream ocrv1.OcrService_StreamRecognizeServer) error {
	for i, page := range req.GetPages() {
		if err := stream.Send(&ocrv1.StreamRecognizeResponse{Page: int32(i + 1), Text: fmt.Sprintf("example OCR: page %d, %d bytes", i+1, len(page))}); err != nil {
			return err
		}
	}
	return nil
}

func (server) Health(context.Context, *ocrv1.HealthRequest) (*ocrv1.HealthResponse, error) {
	return &ocrv1.HealthResponse{Status: "ok"}, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9300", "address to listen on")
	flag.Parse()
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	ocrv1.RegisterOcrServiceServer(s, server{})
	reflection.Register(s)
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		<-sig
		s.GracefulStop()
	}()
	fmt.Printf("example OCR model listening on %s (gRPC, plaintext)\n", lis.Addr())
	if err := s.Serve(lis); err != nil {
		log.Fatal(err)
	}
}
