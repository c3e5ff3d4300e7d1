package a2a

import (
	"testing"

	"github.com/flexway/flexway/server/openaiwire"
)

// BenchmarkUnaryCall is the translation of a typical non-streamed call:
// encode a short conversation, decode a completed Task with an artifact.
func BenchmarkUnaryCall(b *testing.B) {
	req := mustParse(b, `{"model":"agentx","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"What is the weather in Paris?"}]}`)
	answer := fixture(b, "send_task_completed_text.json")
	opts := Options{RequestID: "call-1"}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Encode(req, "agentx", opts); err != nil {
			b.Fatal(err)
		}
		if _, err := Decode(answer, decodeOpts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamChunk is the decoding of one artifact-update event (an
// `append` text chunk of a running artifact), the stream's steady state.
func BenchmarkStreamChunk(b *testing.B) {
	event := []byte(`{"jsonrpc":"2.0","id":"call-1","result":{"taskId":"225d6247-06ba-4cda-a08b-33ae35c8dcfa","contextId":"05217e44-7e9f-473e-ab4f-2c2dde50a2b1","kind":"artifact-update","artifact":{"artifactId":"9b6934dd-37e3-4eb1-8766-962efaab63a1","parts":[{"kind":"text","text":" the next few words"}]},"append":true,"lastChunk":false}}`)
	d := NewStreamDecoder(decodeOpts)
	if _, err := d.Feed(nil, event); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if c, err := d.Feed(nil, event); err != nil || c == nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode is the request half of BenchmarkUnaryCall.
func BenchmarkEncode(b *testing.B) {
	req := mustParse(b, `{"model":"agentx","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"What is the weather in Paris?"}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Encode(req, "agentx", Options{RequestID: "call-1"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeDataPart is Decode of an answer the fast path leaves to
// encoding/json (a data part).
func BenchmarkDecodeDataPart(b *testing.B) {
	answer := fixture(b, "send_task_completed.json")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(answer, decodeOpts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode is the answer half of BenchmarkUnaryCall.
func BenchmarkDecode(b *testing.B) {
	answer := fixture(b, "send_task_completed_text.json")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(answer, decodeOpts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenAIBaseline is what the openai kind spends on the same call
// (its request appended, a completion of the same text parsed), to read the
// figures above as "over the openai kind".
func BenchmarkOpenAIBaseline(b *testing.B) {
	req := mustParse(b, `{"model":"agentx","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"What is the weather in Paris?"}]}`)
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"agentx","choices":[{"index":0,"message":{"role":"assistant","content":"Why did the chicken cross the road?\nTo get to the other side!\nBa dum tss.","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":18,"total_tokens":38},"system_fingerprint":"fp_1"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := openaiwire.AppendChatCompletionRequest(nil, req, openaiwire.Upstream{Model: "agentx"}); err != nil {
			b.Fatal(err)
		}
		if _, err := openaiwire.ParseChatCompletion(answer); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenAIChunkBaseline is the openai kind's parse of one chunk.
func BenchmarkOpenAIChunkBaseline(b *testing.B) {
	chunk := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"agentx","choices":[{"index":0,"delta":{"content":" the next few words"},"logprobs":null,"finish_reason":null}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := openaiwire.ParseChatCompletionChunk(chunk); err != nil {
			b.Fatal(err)
		}
	}
}
