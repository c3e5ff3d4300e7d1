// Package sse reads Server-Sent Events, the stream framing of the
// anthropic, gemini and a2a backend kinds: one reader, one set of rules
// (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation).
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// MaxEventBytes bounds one event (its data lines together, and any one
// line), in bytes: 64 MiB, the openai kind's bound.
const MaxEventBytes = 64 << 20

// ErrEventTooLarge is returned by [Reader.Next] for an event or a line over
// [MaxEventBytes].
var ErrEventTooLarge = errors.New("sse: event over 64 MiB")

// Reader reads Server-Sent Events (text/event-stream, per
// https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
// lines end with LF or CRLF (a lone CR, which no upstream sends, is not
// taken as a line end); a leading BOM is skipped; `data`
// lines of one event are joined with LF; `event` names it; comments and
// other fields are ignored; a blank line ends an event, and an event
// without data is not returned. It is not safe for concurrent use.
type Reader struct {
	r       *bufio.Reader
	line    []byte
	data    []byte
	event   []byte
	hasData bool
	first   bool
}

// NewReader reads events from r through a bufio.Reader of size bytes
// (bufio's default when size is not positive).
func NewReader(r io.Reader, size int) *Reader {
	if size <= 0 {
		size = 4096
	}
	return &Reader{r: bufio.NewReaderSize(r, size)}
}

// Next returns the next event's name (empty when it has none) and data,
// both valid until the next call. At the body's end it returns io.EOF, or
// io.ErrUnexpectedEOF when an event was begun but not ended by a blank
// line; a read error is returned as it is.
func (e *Reader) Next() (event, data []byte, err error) {
	e.data, e.event, e.hasData = e.data[:0], e.event[:0], false
	begun := false
	for {
		line, err := e.readLine()
		if err != nil {
			if err == io.EOF && (begun || len(line) > 0) {
				return nil, nil, io.ErrUnexpectedEOF
			}
			return nil, nil, err
		}
		if len(line) == 0 {
			if e.hasData {
				return e.event, e.data, nil
			}
			e.event, begun = e.event[:0], false
			continue
		}
		begun = true
		if line[0] == ':' {
			continue
		}
		name, value, found := bytes.Cut(line, []byte{':'})
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(name) {
		case "data":
			if len(e.data)+1+len(value) > MaxEventBytes {
				return nil, nil, ErrEventTooLarge
			}
			if e.hasData {
				e.data = append(e.data, '\n')
			}
			e.data = append(e.data, value...)
			e.hasData = true
		case "event":
			e.event = append(e.event[:0], value...)
		}
	}
}

// readLine returns the next LF-terminated line without its LF or CRLF,
// valid until the next call; an unterminated last line comes with io.EOF.
func (e *Reader) readLine() ([]byte, error) {
	e.line = e.line[:0]
	for {
		frag, err := e.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if len(e.line)+len(frag) > MaxEventBytes {
				return nil, ErrEventTooLarge
			}
			e.line = append(e.line, frag...)
			continue
		}
		line := frag
		if len(e.line) > 0 {
			e.line = append(e.line, frag...)
			line = e.line
		}
		if err != nil {
			return line, err
		}
		line = line[:len(line)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if !e.first {
			e.first = true
			line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
		}
		return line, nil
	}
}
