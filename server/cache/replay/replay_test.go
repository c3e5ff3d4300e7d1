package replay_test

import (
	"strings"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/cache/replay"
	"github.com/flexway/flexway/server/openaiwire"
)

func parseChunks(t *testing.T, bodies ...string) []*flexwayv1.ChatCompletionChunk {
	t.Helper()
	var out []*flexwayv1.ChatCompletionChunk
	for _, b := range bodies {
		ch, err := openaiwire.ParseChatCompletionChunk([]byte(b))
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		out = append(out, ch)
	}
	return out
}

func encodeChunks(chs []*flexwayv1.ChatCompletionChunk) string {
	var b strings.Builder
	for _, ch := range chs {
		b.Write(openaiwire.AppendChatCompletionChunk(nil, ch))
		b.WriteByte('\n')
	}
	return b.String()
}

// TestCompletionFromStream: content and a tool call's arguments are
// joined per choice and call index, with the first id and name, the last
// finish_reason and the usage chunk's usage.
func TestCompletionFromStream(t *testing.T) {
	chunks := parseChunks(t,
		`{"id":"c1","object":"chat.completion.chunk","created":5,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`,
		`{"id":"c1","object":"chat.completion.chunk","created":5,"model":"m","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null},{"index":1,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"t1","type":"function","function":{"name":"get","arguments":"{\"ci"}}]}}]}`,
		`{"id":"c1","object":"chat.completion.chunk","created":5,"model":"m","choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ty\":1}"}}]},"finish_reason":"tool_calls"},{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"id":"c1","object":"chat.completion.chunk","created":5,"model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`,
	)
	c, ok := replay.Completion(chunks)
	if !ok {
		t.Fatal("not replayable")
	}
	got := string(openaiwire.AppendChatCompletion(nil, c))
	want := `{"id":"c1","object":"chat.completion","created":5,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"},{"index":1,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"get","arguments":"{\"city\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12},"system_fingerprint":"fp"}`
	if got != want {
		t.Errorf("Completion =\n%s\nwant\n%s", got, want)
	}
}

// TestChunksFromCompletion: a JSON answer streams as one chunk with the
// message and one with the finish_reason per choice, tool calls given
// their indexes; the stream assembles back into the same answer.
func TestChunksFromCompletion(t *testing.T) {
	c, err := openaiwire.ParseChatCompletion([]byte(`{"id":"c2","object":"chat.completion","created":7,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi there","refusal":null},"finish_reason":"stop"},{"index":1,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`))
	if err != nil {
		t.Fatal(err)
	}
	chs, ok := replay.Chunks(c)
	if !ok {
		t.Fatal("not replayable")
	}
	want := `{"id":"c2","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi there"},"finish_reason":null}]}
{"id":"c2","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}
{"id":"c2","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":1,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":null}]}
{"id":"c2","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":1,"delta":{},"finish_reason":"tool_calls"}]}
`
	if got := encodeChunks(chs); got != want {
		t.Errorf("Chunks =\n%s\nwant\n%s", got, want)
	}
	back, ok := replay.Completion(chs)
	if !ok {
		t.Fatal("chunks not replayable as JSON")
	}
	back.Usage = c.Usage
	c.Choices[0].Message.ExtraFields = nil // refusal: null carries nothing
	if a, b := string(openaiwire.AppendChatCompletion(nil, back)), string(openaiwire.AppendChatCompletion(nil, c)); a != b {
		t.Errorf("round trip =\n%s\nwant\n%s", a, b)
	}
}

// TestNotReplayable: members with no counterpart in the other mode make
// the entry a miss there.
func TestNotReplayable(t *testing.T) {
	for _, b := range []string{
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"logprobs":{"content":[]},"finish_reason":"stop"}]}`,
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x","reasoning":"r"},"finish_reason":"stop"}]}`,
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"id":"no index"}]},"finish_reason":"stop"}]}`,
	} {
		if _, ok := replay.Completion(parseChunks(t, b)); ok {
			t.Errorf("%s: replayable as JSON", b)
		}
	}
	for _, b := range []string{
		`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"x","audio":{"id":"a"}},"finish_reason":"stop"}]}`,
		`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"logprobs":{"content":[]},"finish_reason":"stop"}]}`,
		`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[]}`,
	} {
		c, err := openaiwire.ParseChatCompletion([]byte(b))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := replay.Chunks(c); ok {
			t.Errorf("%s: replayable as a stream", b)
		}
	}
}
