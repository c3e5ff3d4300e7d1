package openaiwire_test

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
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

// BenchmarkParseVisionRequest20MiBEscaped parses the image of
// BenchmarkParseVisionRequest20MiB written with every slash escaped (`\/`),
// as some JSON encoders write it.
func BenchmarkParseVisionRequest20MiBEscaped(b *testing.B) {
	body := bytes.ReplaceAll(visionRequest(20<<20), []byte("/"), []byte(`\/`))
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
// with at most one body's worth of allocation (the data: URI is copied into
// a Go string once), with and without escaped slashes in the URI.
func TestParseVisionRequestMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 20 MiB")
	}
	plain := visionRequest(20 << 20)
	tests := []struct {
		name string
		body []byte
	}{
		{name: "plain", body: plain},
		{name: "escaped_slashes", body: bytes.ReplaceAll(plain, []byte("/"), []byte(`\/`))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			req, err := openaiwire.ParseChatCompletionRequest(tt.body)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			url := req.GetMessages()[0].GetParts().GetParts()[1].GetImageUrl().GetUrl()
			if len(url) < 20<<20 || !strings.HasPrefix(url, "data:image/png;base64,") {
				t.Fatalf("url of %d bytes, want the whole data: URI", len(url))
			}
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("parsing %d bytes allocated %d bytes (%.2f× the body)", len(tt.body), allocated, float64(allocated)/float64(len(tt.body)))
			if limit := uint64(len(tt.body)) * 2; allocated > limit {
				t.Errorf("parsing %d bytes allocated %d bytes, want at most %d (2× the body)", len(tt.body), allocated, limit)
			}
		})
	}
}

// embeddingResponse returns an embeddings response with one float vector
// of dims values, as OpenAI writes them.
func embeddingResponse(dims int) []byte {
	r := rand.New(rand.NewPCG(3, 4))
	b := []byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[`)
	for i := range dims {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, float64(float32(r.NormFloat64()*0.03)), 'g', -1, 32)
	}
	return append(b, `]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`...)
}

func BenchmarkParseEmbeddingResponse1536(b *testing.B) {
	body := embeddingResponse(1536)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := openaiwire.ParseEmbeddingResponse(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendEmbeddingResponse1536(b *testing.B) {
	r, err := openaiwire.ParseEmbeddingResponse(embeddingResponse(1536))
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = openaiwire.AppendEmbeddingResponse(buf[:0], r)
	}
	b.SetBytes(int64(len(buf)))
}
