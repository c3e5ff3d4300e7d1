package openaiwire_test

import (
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/openaiwire"
)

// addSeeds adds the golden inputs whose names start with prefix, and more,
// to the seed corpus.
func addSeeds(f *testing.F, prefix string, more ...string) {
	files, err := filepath.Glob(filepath.Join("testdata", prefix+"*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		f.Add(readTestdata(f, filepath.Base(file)))
	}
	for _, s := range more {
		f.Add([]byte(s))
	}
}

// FuzzParseChatCompletionRequest checks that parsing never panics and that
// a parsed request survives AppendChatCompletionRequest: the upstream body
// re-parses to the same message, except for what [openaiwire.Upstream]
// changes (stream_options dropped and stream false on a unary call;
// stream true and include_usage true on a streamed one).
func FuzzParseChatCompletionRequest(f *testing.F) {
	addSeeds(f, "chat_request_",
		smallRequest,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a\u0000\ud800"}],"name":null}],"n":null,"stream":null,"stream_options":{"include_usage":null,"x":1}}`,
		`{"model":"m","model":"n","messages":[{"role":"user","content":null,"content":"x"}],"max_tokens":1e2,"max_tokens":null}`,
		`{"mod\u0065l":"m","messages":[{"role":"tool","content":"x","\u0000":{}}]}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := openaiwire.ParseChatCompletionRequest(data)
		if err != nil {
			if req != nil {
				t.Fatalf("request and error: %v", err)
			}
			return
		}

		// A unary call: stream false if it was given, stream_options dropped.
		out, err := openaiwire.AppendChatCompletionRequest(nil, req, openaiwire.Upstream{Model: req.GetModel()})
		if err != nil {
			t.Fatalf("append: %v", err)
		}
		got, err := openaiwire.ParseChatCompletionRequest(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		want := proto.Clone(req).(*flexwayv1.CreateChatCompletionRequest)
		want.StreamOptions = nil
		delete(want.ExtraFields, "stream_options")
		if want.Stream != nil {
			want.Stream = proto.Bool(false)
		}
		if !proto.Equal(want, got) {
			t.Fatalf("unary round trip changed the request\n in: %s\nout: %s\nwant %v\n got %v", data, out, want, got)
		}

		// A streamed call: stream and include_usage true, other options kept.
		out, err = openaiwire.AppendChatCompletionRequest(nil, req, openaiwire.Upstream{Model: req.GetModel(), Stream: true})
		if err != nil {
			t.Fatalf("append streamed: %v", err)
		}
		got, err = openaiwire.ParseChatCompletionRequest(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		want = proto.Clone(req).(*flexwayv1.CreateChatCompletionRequest)
		want.Stream = proto.Bool(true)
		delete(want.ExtraFields, "stream")
		delete(want.ExtraFields, "stream_options")
		if want.StreamOptions == nil {
			want.StreamOptions = &flexwayv1.StreamOptions{}
		}
		want.StreamOptions.IncludeUsage = proto.Bool(true)
		delete(want.StreamOptions.ExtraFields, "include_usage")
		if !proto.Equal(want, got) {
			t.Fatalf("streamed round trip changed the request\n in: %s\nout: %s\nwant %v\n got %v", data, out, want, got)
		}
	})
}

// FuzzParseChatCompletionChunk checks that parsing an upstream chunk never
// panics and that AppendChatCompletionChunk re-parses to the same message.
func FuzzParseChatCompletionChunk(f *testing.F) {
	addSeeds(f, "chat_chunk_",
		`{"id":null,"choices":[{"index":null,"delta":null,"finish_reason":"stop"},{"delta":{"role":null,"content":[{"type":"refusal","refusal":"no"}]}}],"usage":{"prompt_tokens":null}}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := openaiwire.ParseChatCompletionChunk(data)
		if err != nil {
			return
		}
		out := openaiwire.AppendChatCompletionChunk(nil, c)
		if strings.ContainsAny(string(out), "\r\n") {
			t.Fatalf("chunk output holds a line break: %q", out)
		}
		got, err := openaiwire.ParseChatCompletionChunk(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		// Raw values holding line breaks are compacted on output, so the
		// messages are equal only without them; the output is stable anyway.
		if !strings.ContainsAny(string(data), "\r\n") && !proto.Equal(c, got) {
			t.Fatalf("round trip changed the chunk\n in: %s\nout: %s", data, out)
		}
		if again := openaiwire.AppendChatCompletionChunk(nil, got); string(again) != string(out) {
			t.Fatalf("second round trip differs\n%s\n%s", out, again)
		}
	})
}
