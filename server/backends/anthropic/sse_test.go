package anthropic

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestEventReader: the SSE rules the reader follows, each input also read
// split at every byte boundary with a small buffer.
func TestEventReader(t *testing.T) {
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
				er := NewEventReader(r, 16)
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

func TestEventReaderTooLarge(t *testing.T) {
	big := "data: " + strings.Repeat("x", maxEventBytes) + "\n\n"
	if _, _, err := NewEventReader(strings.NewReader(big), 0).Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("err = %v, want ErrEventTooLarge", err)
	}
	many := strings.Repeat("data: "+strings.Repeat("x", 1<<20)+"\n", 17) + "\n"
	if _, _, err := NewEventReader(bytes.NewReader([]byte(many)), 0).Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("err = %v, want ErrEventTooLarge", err)
	}
}
