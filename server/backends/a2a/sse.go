package a2a

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// MaxEventBytes bounds one SSE event (its data lines together, and any one
// line): 64 MiB, the openai kind's bound.
const MaxEventBytes = 64 << 20

// ErrEventTooLarge is returned by [SSEReader.Next] for an event or a line
// over [MaxEventBytes].
var ErrEventTooLarge = errors.New("a2a: SSE event over 64MiB")

// SSEReader reads Server-Sent Events (text/event-stream, per
// https://html.spec.whatwg.org/multipage/server-sent-events.html): lines end
// with LF or CRLF (a lone CR, which A2A servers do not write, is no line end);
// a leading BOM is skipped; `data` lines of one event are joined with LF;
// `event` names it; comments (`:`), `id`, `retry` and unknown fields are
// ignored; a blank line dispatches the event. It is not safe for concurrent
// use.
type SSEReader struct {
	r     *bufio.Reader
	line  []byte
	data  []byte
	event []byte
	has   bool
	first bool
}

// NewSSEReader returns a reader of the events of r, through a 4 KiB buffer.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{r: bufio.NewReaderSize(r, 4<<10)}
}

// Next returns the next event that has a data field: its name (empty when
// none was given) and its data, both valid until the next call. It returns
// io.EOF at the end of the body (an event the body ends inside of, without
// its blank line, is dropped, as the SSE spec says), [ErrEventTooLarge], or
// the read error.
func (s *SSEReader) Next() (event, data []byte, err error) {
	s.data, s.event, s.has = s.data[:0], s.event[:0], false
	for {
		line, err := s.readLine()
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				// The body ended inside a line: the event is incomplete.
				return nil, nil, io.EOF
			}
			return nil, nil, err
		}
		if len(line) == 0 {
			if s.has {
				return s.event, s.data, nil
			}
			s.event = s.event[:0]
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value, found := bytes.Cut(line, []byte{':'})
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(name) {
		case "data":
			if len(s.data)+1+len(value) > MaxEventBytes {
				return nil, nil, ErrEventTooLarge
			}
			if s.has {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			s.has = true
		case "event":
			s.event = append(s.event[:0], value...)
		}
	}
}

// readLine returns the next line without its LF or CRLF, valid until the
// next call; at the body's end the last unterminated line with io.EOF.
func (s *SSEReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		frag, err := s.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if len(s.line)+len(frag) > MaxEventBytes {
				return nil, ErrEventTooLarge
			}
			s.line = append(s.line, frag...)
			continue
		}
		line := frag
		if len(s.line) > 0 {
			s.line = append(s.line, frag...)
			line = s.line
		}
		if err != nil {
			if err == io.EOF {
				return line, io.EOF
			}
			return nil, err
		}
		line = line[:len(line)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if !s.first {
			s.first = true
			line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
		}
		return line, nil
	}
}
