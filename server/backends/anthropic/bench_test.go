package anthropic

import (
	"os"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"

	"github.com/flexway/flexway/server/openaiwire"
)

// typicalCall is the benchmarks' call: a two-turn tool round trip and a
// Message answer with thinking, text and a tool call.
func typicalCall(b *testing.B) (*flexwayv1.CreateChatCompletionRequest, []byte) {
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
	return req, answer
}

// BenchmarkCall is a typical non-streamed call's translation: the OpenAI
// request parsed elsewhere (not measured), encoded to the Messages body,
// and the Message answer decoded.
func BenchmarkCall(b *testing.B) {
	req, answer := typicalCall(b)
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

// BenchmarkOpenAIKindCall is the baseline of BenchmarkCall: what the
// openai kind does for the same call (encode the request in OpenAI's
// format, parse an OpenAI completion of the same answer).
func BenchmarkOpenAIKindCall(b *testing.B) {
	req, answer := typicalCall(b)
	c, _, err := Decode(answer, 1700000000)
	if err != nil {
		b.Fatal(err)
	}
	completion := openaiwire.AppendChatCompletion(nil, c)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := openaiwire.AppendChatCompletionRequest(nil, req, openaiwire.Upstream{Model: "m"}); err != nil {
			b.Fatal(err)
		}
		if _, err := openaiwire.ParseChatCompletion(completion); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenAIKindChunk is the baseline of BenchmarkStreamChunk: the
// openai kind's parse of the same text chunk in OpenAI's format.
func BenchmarkOpenAIKindChunk(b *testing.B) {
	data := []byte(`{"id":"msg_1","object":"chat.completion.chunk","created":1700000000,"model":"claude-sonnet-4-5","choices":[{"index":0,"delta":{"content":"Hello, world, this is a"},"finish_reason":null}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := openaiwire.ParseChatCompletionChunk(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode is BenchmarkCall's encoding alone.
func BenchmarkEncode(b *testing.B) {
	req, _ := typicalCall(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Encode(req, "claude-sonnet-4-5", testOptions); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode is BenchmarkCall's decoding alone.
func BenchmarkDecode(b *testing.B) {
	_, answer := typicalCall(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decode(answer, 1700000000); err != nil {
			b.Fatal(err)
		}
	}
}
