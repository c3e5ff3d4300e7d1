// Command client calls the OCR example through Flexway with the generated
// client: one call of each metered method and the unmetered one.
//
//	go run ./examples/ocr/client --addr 127.0.0.1:9090 --key sk-flexway-demo
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	ocrv1 "github.com/flexway/flexway/examples/ocr/gen/acme/ocr/v1"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9090", "Flexway's gRPC listener")
	key := flag.String("key", "sk-flexway-demo", "your Flexway API key")
	flag.Parse()
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := ocrv1.NewOcrServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+*key)

	rec, err := client.Recognize(ctx, &ocrv1.RecognizeRequest{Image: make([]byte, 2048)})
	if err != nil {
		log.Fatalf("Recognize: %v", err)
	}
	fmt.Println("Recognize:", rec.GetText())

	tr, err := client.Translate(ctx, &ocrv1.TranslateRequest{Text: "hello", Language: "fr"})
	if err != nil {
		log.Fatalf("Translate: %v", err)
	}
	fmt.Println("Translate:", tr.GetText())

	stream, err := client.StreamRecognize(ctx, &ocrv1.StreamRecognizeRequest{Pages: [][]byte{make([]byte, 100), make([]byte, 200)}})
	if err != nil {
		log.Fatalf("StreamRecognize: %v", err)
	}
	for {
		page, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatalf("StreamRecognize: %v", err)
		}
		fmt.Printf("StreamRecognize: page %d: %s\n", page.GetPage(), page.GetText())
	}

	h, err := client.Health(ctx, &ocrv1.HealthRequest{})
	if err != nil {
		log.Fatalf("Health: %v", err)
	}
	fmt.Println("Health:", h.GetStatus())
}
