package anthropic

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends/sse"
	"github.com/flexway/flexway/server/openaiwire"
	"google.golang.org/protobuf/proto"
)

// FuzzAnthropicStream feeds arbitrary bytes through the event reader and
// the stream decoder, and arbitrary event data straight to the decoder:
// no input may panic, and every chunk must encode.
func FuzzAnthropicStream(f *testing.F) {
	names, _ := filepath.Glob("testdata/stream/*.sse")
	for _, n := range names {
		if data, err := os.ReadFile(n); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":-1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"x\"}}\n\n"))
	f.Add([]byte("data: {\"type\":\"message_start\",\"message\":null}\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		er := sse.NewReader(bytes.NewReader(data), 16)
		s := NewStream(0)
		for {
			name, d, err := er.Next()
			if err != nil {
				_ = s.End()
				break
			}
			c, err := s.Event(name, d)
			if c != nil {
				_ = openaiwire.AppendChatCompletionChunk(nil, c)
			}
			if err != nil {
				break
			}
		}
		// The same bytes as one event's data, after a message_start, read
		// by the fast path and by encoding/json alike.
		var chunks [2]*flexwayv1.ChatCompletionChunk
		var errs [2]error
		for i, fast := range []bool{true, false} {
			fastPath = fast
			s = NewStream(0)
			_, _ = s.Event(nil, []byte(`{"type":"message_start","message":{"id":"m","type":"message","usage":{}}}`))
			_, _ = s.Event(nil, []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f"}}`))
			chunks[i], errs[i] = s.Event(nil, data)
		}
		fastPath = true
		if c := chunks[0]; c != nil {
			_ = openaiwire.AppendChatCompletionChunk(nil, c)
		}
		if (errs[0] == nil) != (errs[1] == nil) || !proto.Equal(chunks[0], chunks[1]) {
			t.Fatalf("fast path %v, %v; encoding/json %v, %v", chunks[0], errs[0], chunks[1], errs[1])
		}
	})
}
