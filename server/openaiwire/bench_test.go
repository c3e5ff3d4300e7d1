package openaiwire_test

import (
	"runtime"
	"testing"

	"github.com/flexway/flexway/server/openaiwire"
)

func BenchmarkParseChatCompletionRequest(b *testing.B) {
	body := []byte(smallRequest)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := openaiwire.ParseChatCompletionRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendChatCompletionRequest(b *testing.B) {
	req, err := openaiwire.ParseChatCompletionRequest([]byte(smallRequest))
	if err != nil {
		b.Fatal(err)
	}
	u := openaiwire.Upstream{Model: "gpt-4o-mini-2024-07-18", Stream: true}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		if buf, err = openaiwire.AppendChatCompletionRequest(buf[:0], req, u); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkParseChatCompletionChunk(b *testing.B) {
	body := readTestdata(b, "chat_chunk_content.json")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := openaiwire.ParseChatCompletionChunk(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendChatCompletionChunk(b *testing.B) {
	c, err := openaiwire.ParseChatCompletionChunk(readTestdata(b, "chat_chunk_content.json"))
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = openaiwire.AppendChatCompletionChunk(buf[:0], c)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkParseVisionRequest20MiB(b *testing.B) {
	body := visionRequest(20 << 20)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := openaiwire.ParseChatCompletionRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendVisionRequest20MiB(b *testing.B) {
	body := visionRequest(20 << 20)
	req, err := openaiwire.ParseChatCompletionRequest(body)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, len(body)+1024)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if buf, err = openaiwire.AppendChatCompletionRequest(buf[:0], req, openaiwire.Upstream{Model: "gpt-4o"}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseVisionRequestMemory checks that a 20 MiB image request is parsed
// with at most one body's worth of extra allocation beyond the body (the
// data: URI is copied into a Go string once).
func TestParseVisionRequestMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 20 MiB")
	}
	body := visionRequest(20 << 20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req, err := openaiwire.ParseChatCompletionRequest(body)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(req.GetMessages()[0].GetParts().GetParts()[1].GetImageUrl().GetUrl()); got < 20<<20 {
		t.Fatalf("url of %d bytes, want the whole data: URI", got)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("parsing %d bytes allocated %d bytes (%.2f× the body)", len(body), allocated, float64(allocated)/float64(len(body)))
	if limit := uint64(len(body)) * 2; allocated > limit {
		t.Errorf("parsing %d bytes allocated %d bytes, want at most %d (2× the body)", len(body), allocated, limit)
	}
}
