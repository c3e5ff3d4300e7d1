package main

import (
	"testing"

	ocrv1 "github.com/flexway/flexway/examples/ocr/gen/acme/ocr/v1"
)

// TestAttack16PerByteStreamRequestsPerMinute: requests_per_minute counts
// admitted calls, so one per-byte proxied stream is one request whatever
// its size. A per-byte call reserves again each time its bytes outgrow
// what it holds (twice ahead), and every such reservation holds one
// request in the requests_per_minute window: with a cap of 2 and a
// budget in euros far from its end, a single 60-page stream is cut part
// way with RESOURCE_EXHAUSTED rate_limited, by its own growth.
func TestAttack16PerByteStreamRequestsPerMinute(t *testing.T) {
	addr, _ := startOCR(t)
	g := startGateway(t, ocrConfig(t, addr, ocrDescriptorSet(t), false, "    default: {eur_per_month: 100, requests_per_minute: 2}"))
	stream, err := ocrv1.NewOcrServiceClient(grpcConn(t, g)).StreamRecognize(withKey(t, demoKey), &ocrv1.StreamRecognizeRequest{Pages: make([][]byte, 60)})
	if err != nil {
		t.Fatal(err)
	}
	pages := 0
	for {
		if _, err = stream.Recv(); err != nil {
			break
		}
		pages++
	}
	if pages != 60 {
		c, reason, _, msg := grpcReason(err)
		t.Fatalf("one stream, the only call of the minute under requests_per_minute 2, was cut after %d of 60 pages: %s %s %s", pages, c, reason, msg)
	}
}
