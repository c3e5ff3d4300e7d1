package a2a

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestSSEReader covers the SSE framing the stream decoder relies on: LF and
// CRLF line ends, a BOM, comments and unknown fields ignored, multi-line
// data joined with LF, event names, events without data skipped, an event
// cut by the body's end dropped, and the event bound.
func TestSSEReader(t *testing.T) {
	body := "\xEF\xBB\xBF: comment\r\nid: 7\r\nretry: 10\r\ndata: a\r\ndata:b\r\n\r\n" +
		"event: error\nfoo: bar\ndata: {}\n\n" +
		"event: ping\n\n" +
		"data: \n\n" +
		"data: cut"
	r := NewSSEReader(strings.NewReader(body))
	for _, want := range []struct{ event, data string }{{"", "a\nb"}, {"error", "{}"}, {"", ""}} {
		event, data, err := r.Next()
		if err != nil || string(event) != want.event || string(data) != want.data {
			t.Fatalf("got %q %q %v, want %q %q", event, data, err, want.event, want.data)
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("a cut event: got %v, want io.EOF", err)
	}

	long := "data: " + strings.Repeat("x", MaxEventBytes) + "\n\n"
	if _, _, err := NewSSEReader(strings.NewReader(long)).Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("an event over the bound: got %v", err)
	}
	boom := errors.New("boom")
	if _, _, err := NewSSEReader(io.MultiReader(bytes.NewReader([]byte("data: x\n")), errReader{boom})).Next(); !errors.Is(err, boom) {
		t.Fatalf("a read error: got %v", err)
	}
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
