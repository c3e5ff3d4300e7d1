package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestReader: the SSE rules the reader follows, each input also read
// split at every byte boundary with a small buffer.
func TestReader(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // "event|data" per event
		end      error
	}{
		{"plain", "event: a\ndata: 1\n\n", []string{"a|1"}, io.EOF},
		{"crlf and bom", "\xEF\xBB\xBFevent: a\r\ndata: 1\r\n\r\n", []string{"a|1"}, io.EOF},
		{"data lines joined, no space", "data:x\ndata: y\n\n", []string{"|x\ny"}, io.EOF},
		{"comments and unknown fields", ": keep-alive\nid: 3\nretry: 10\nevent: b\ndata: 2\n\n", []string{"b|2"}, io.EOF},
		{"an event without data is not returned", "event: a\n\nevent: b\ndata: 2\n\n", []string{"b|2"}, io.EOF},
		{"a name does not outlive its event", "event: a\n\ndata: 2\n\n", []string{"|2"}, io.EOF},
		{"empty data", "data:\n\n", []string{"|"}, io.EOF},
		{"extra blank lines", "\n\ndata: 1\n\n\n\ndata: 2\n\n", []string{"|1", "|2"}, io.EOF},
		{"unended event", "data: 1\n\ndata: 2\n", []string{"|1"}, io.ErrUnexpectedEOF},
		{"unterminated line", "data: 1", nil, io.ErrUnexpectedEOF},
		{"empty", "", nil, io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i <= len(tc.in); i++ {
				r := io.MultiReader(strings.NewReader(tc.in[:i]), strings.NewReader(tc.in[i:]))
				er := NewReader(r, 16)
				var got []string
				var err error
				for {
					var name, data []byte
					name, data, err = er.Next()
					if err != nil {
						break
					}
					got = append(got, string(name)+"|"+string(data))
				}
				if strings.Join(got, ",") != strings.Join(tc.want, ",") || !errors.Is(err, tc.end) {
					t.Fatalf("split at %d: got %q, %v; want %q, %v", i, got, err, tc.want, tc.end)
				}
			}
		})
	}
}

func TestReaderTooLarge(t *testing.T) {
	big := "data: " + strings.Repeat("x", MaxEventBytes) + "\n\n"
	if _, _, err := NewReader(strings.NewReader(big), 0).Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("err = %v, want ErrEventTooLarge", err)
	}
	many := strings.Repeat("data: "+strings.Repeat("x", 1<<20)+"\n", 65) + "\n"
	if _, _, err := NewReader(bytes.NewReader([]byte(many)), 0).Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("err = %v, want ErrEventTooLarge", err)
	}
}

// TestReaderMixed: the framing the a2a and gemini decoders were first
// tested with, under the one rule: an event the body ends inside of is
// not returned, and the end says io.ErrUnexpectedEOF (a cut stream never
// looks complete); a read error is returned as it is.
func TestReaderMixed(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     string
	}{
		{"a2a", "\xEF\xBB\xBF: comment\r\nid: 7\r\nretry: 10\r\ndata: a\r\ndata:b\r\n\r\n" +
			"event: error\nfoo: bar\ndata: {}\n\n" + "event: ping\n\n" + "data: \n\n" + "data: cut", "|a\nb,error|{},|"},
		{"gemini", "\xEF\xBB\xBFdata: a\r\ndata:b\n: c\nid: 1\nevent: x\n\n\n\nevent: lost\n\ndata: last", "x|a\nb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tc.in), 0)
			var got []string
			var err error
			for {
				var ev, data []byte
				if ev, data, err = r.Next(); err != nil {
					break
				}
				got = append(got, string(ev)+"|"+string(data))
			}
			if strings.Join(got, ",") != tc.want || err != io.ErrUnexpectedEOF {
				t.Fatalf("events %q, %v; want %q, io.ErrUnexpectedEOF", strings.Join(got, ","), err, tc.want)
			}
		})
	}
	boom := errors.New("boom")
	if _, _, err := NewReader(io.MultiReader(bytes.NewReader([]byte("data: x\n")), errReader{boom}), 0).Next(); !errors.Is(err, boom) {
		t.Fatalf("a read error: got %v", err)
	}
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
