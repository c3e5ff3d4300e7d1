package gemini

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/flexway/flexway/server/backends/sse"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// replay feeds body through an SSEReader into a new Stream and returns
// one line per chunk (OpenAI's JSON), the last being End's chunk or
// "error: <reason>".
func replay(t testing.TB, body io.Reader) []string {
	defer counterIDs()()
	var out []string
	r := sse.NewReader(body, 0)
	s := NewStream(testCall)
	fail := func(err error) []string {
		fe, ok := errors.AsType[*faults.Error](err)
		if !ok {
			t.Fatalf("error %v is not a *faults.Error", err)
		}
		return append(out, "error: "+string(fe.Reason))
	}
	for {
		ev, data, err := r.Next()
		if err == io.EOF || err == io.ErrUnexpectedEOF { // the body's end, cut inside an event or not
			break
		}
		if err != nil {
			return fail(err)
		}
		chunk, err := s.Feed(ev, data)
		if err != nil {
			return fail(err)
		}
		if chunk != nil {
			out = append(out, string(openaiwire.AppendChatCompletionChunk(nil, chunk)))
		}
	}
	last, err := s.End()
	if err != nil {
		return fail(err)
	}
	return append(out, string(openaiwire.AppendChatCompletionChunk(nil, last)))
}

// TestStreamFixtures: each testdata/stream/<case>.sse decodes into the
// chunks of <case>.chunks, read whole, one byte at a time, and split in two
// reads at every byte boundary. Covers: usageMetadata cumulative, the last
// wins; a finishReason chunk without parts; a functionCall making
// tool_calls, tool call indexes from 0, ids carrying the thoughtSignature;
// MAX_TOKENS → length; SAFETY → content_filter; a blocked prompt without
// candidates → content_filter; thoughts → reasoning_content; a cut stream
// and an in-stream error → upstream_error; CRLF lines, comments, a last
// event without its blank line.
func TestStreamFixtures(t *testing.T) {
	cases, _ := filepath.Glob("testdata/stream/*.sse")
	if len(cases) == 0 {
		t.Fatal("no fixtures")
	}
	for _, c := range cases {
		name := strings.TrimSuffix(filepath.Base(c), ".sse")
		t.Run(name, func(t *testing.T) {
			body := readFixture(t, "stream", name+".sse")
			want := strings.Split(strings.TrimSpace(string(readFixture(t, "stream", name+".chunks"))), "\n")
			check := func(how string, got []string) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("%s: %d chunks, want %d:\n%s", how, len(got), len(want), strings.Join(got, "\n"))
				}
				for i := range got {
					if strings.HasPrefix(want[i], "error:") || strings.HasPrefix(got[i], "error:") {
						if got[i] != want[i] {
							t.Fatalf("%s: chunk %d %s, want %s", how, i, got[i], want[i])
						}
						continue
					}
					if !jsonEqual(t, []byte(got[i]), []byte(want[i])) {
						t.Fatalf("%s: chunk %d\n got %s\nwant %s", how, i, got[i], want[i])
					}
				}
			}
			check("whole", replay(t, bytes.NewReader(body)))
			check("byte by byte", replay(t, iotest.OneByteReader(bytes.NewReader(body))))
			for i := 1; i < len(body); i++ {
				check("split", replay(t, io.MultiReader(bytes.NewReader(body[:i]), bytes.NewReader(body[i:]))))
			}
		})
	}
}

// FuzzGeminiStream: no byte sequence makes the SSE reader or the stream
// decoder panic.
func FuzzGeminiStream(f *testing.F) {
	cases, _ := filepath.Glob("testdata/stream/*.sse")
	for _, c := range cases {
		f.Add(readFixture(&testing.T{}, "stream", filepath.Base(c)))
	}
	f.Add([]byte("data: {\"candidates\":[{\"index\":-1}]}\n\n"))
	f.Add([]byte("data: {\"candidates\":[{\"index\":99999999}]}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		r := sse.NewReader(bytes.NewReader(body), 0)
		s := NewStream(testCall)
		for {
			ev, data, err := r.Next()
			if err != nil {
				break
			}
			if _, err := s.Feed(ev, data); err != nil {
				return
			}
		}
		_, _ = s.End()
	})
}
