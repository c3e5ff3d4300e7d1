package gemini

import (
	"testing"

	"github.com/flexway/flexway/server/openaiwire"
)

// BenchmarkEncodeDecode is a typical non-streamed call's translation: a
// system prompt, a user turn and a tool, encoded; a text answer with
// usage, decoded.
func BenchmarkEncodeDecode(b *testing.B) {
	req, err := openaiwire.ParseChatCompletionRequest(benchRequest)
	if err != nil {
		b.Fatal(err)
	}
	answer := readFixture(&testing.T{}, "decode", "text.gemini.json")
	encode := func(b *testing.B) {
		if _, _, err := Encode(req, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	decode := func(b *testing.B) {
		if _, err := Decode(answer, testCall); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		run  []func(*testing.B)
	}{{"both", []func(*testing.B){encode, decode}}, {"encode", []func(*testing.B){encode}}, {"decode", []func(*testing.B){decode}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, f := range c.run {
					f(b)
				}
			}
		})
	}
}

// BenchmarkStreamChunk is one text event of a stream in steady state:
// Feed of a typical streamGenerateContent event with usageMetadata.
func BenchmarkStreamChunk(b *testing.B) {
	data := []byte(`{"candidates": [{"content": {"parts": [{"text": " quick brown"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 1200,"candidatesTokenCount": 3,"totalTokenCount": 1203,"cachedContentTokenCount": 1000},"modelVersion": "gemini-2.5-flash","responseId": "sse-text"}`)
	s := NewStream(testCall)
	if _, err := s.Feed(nil, data); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := s.Feed(nil, data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenAIKindBaseline is what the openai kind spends on the same
// call (encoding the request, parsing an answer of the same content), the
// baseline the "at most 10 µs over openai" is measured against.
func BenchmarkOpenAIKindBaseline(b *testing.B) {
	req, err := openaiwire.ParseChatCompletionRequest(benchRequest)
	if err != nil {
		b.Fatal(err)
	}
	answer := readFixture(&testing.T{}, "decode", "text.openai.json")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := openaiwire.AppendChatCompletionRequest(nil, req, openaiwire.Upstream{Model: "gemini-2.5-flash"}); err != nil {
			b.Fatal(err)
		}
		if _, err := openaiwire.ParseChatCompletion(answer); err != nil {
			b.Fatal(err)
		}
	}
}

var benchRequest = []byte(`{"model":"gemini-2.5-flash","messages":[
		{"role":"system","content":"You are a helpful assistant."},
		{"role":"user","content":"Summarise the plot of Hamlet in two sentences."}],
		"max_tokens":200,"temperature":0.3,
		"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"],"additionalProperties":false}}}]}`)
