package anthropic

import (
	"os"
	"testing"

	"github.com/flexway/flexway/server/openaiwire"
)

// BenchmarkCall is a typical non-streamed call's translation: the OpenAI
// request parsed elsewhere (not measured), encoded to the Messages body,
// and the Message answer decoded.
func BenchmarkCall(b *testing.B) {
	data, err := os.ReadFile("testdata/encode/tools_round.openai.json")
	if err != nil {
		b.Fatal(err)
	}
	req, err := openaiwire.ParseChatCompletionRequest(data)
	if err != nil {
		b.Fatal(err)
	}
	answer, err := os.ReadFile("testdata/decode/tool_use.json")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Encode(req, "claude-sonnet-4-5", testOptions); err != nil {
			b.Fatal(err)
		}
		if _, _, err := Decode(answer, 1700000000); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamChunk is the decoding of one text_delta event, the
// steady state of a stream (the SSE framing not included).
func BenchmarkStreamChunk(b *testing.B) {
	s := NewStream(0)
	if _, err := s.Event(nil, []byte(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","usage":{"input_tokens":25,"output_tokens":1}}}`)); err != nil {
		b.Fatal(err)
	}
	name := []byte("content_block_delta")
	text := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello, world, this is a"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if c, err := s.Event(name, text); err != nil || c == nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamToolChunk is one input_json_delta event.
func BenchmarkStreamToolChunk(b *testing.B) {
	s := NewStream(0)
	_, _ = s.Event(nil, []byte(`{"type":"message_start","message":{"id":"msg_1","type":"message","model":"m","usage":{}}}`))
	_, _ = s.Event(nil, []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}`))
	data := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if c, err := s.Event(nil, data); err != nil || c == nil {
			b.Fatal(err)
		}
	}
}
