package gemini

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// MaxEventBytes bounds one Server-Sent Event's line and data (16 MiB).
const MaxEventBytes = 16 << 20

// ErrEventTooLarge is returned by [SSEReader.Next] for a line or an
// event's data over [MaxEventBytes].
var ErrEventTooLarge = errors.New("gemini: SSE event over 16 MiB")

// SSEReader splits a text/event-stream body into events, per
// https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation:
// lines end with LF, CRLF or CR-LF split across reads; a leading BOM is
// skipped; `data` lines of one event are joined with LF; `event` names it;
// comments and other fields are ignored; an event without data is not
// returned. An event still open at the body's end is returned (Gemini's
// last event may lack its blank line). It is not safe for concurrent use.
type SSEReader struct {
	r       *bufio.Reader
	line    []byte
	data    []byte
	event   []byte
	hasData bool
	started bool
	err     error
}

// NewSSEReader returns a reader of r's events.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{r: bufio.NewReaderSize(r, 4<<10)}
}

// Next returns the next event's name ("" when unnamed) and data, both valid
// until the next call; io.EOF at the body's end, [ErrEventTooLarge], or the
// body's read error.
func (s *SSEReader) Next() (event, data []byte, err error) {
	if s.err != nil {
		return nil, nil, s.err
	}
	for {
		line, err := s.readLine()
		if err != nil && (err != io.EOF || len(line) == 0) {
			if err == io.EOF && s.hasData {
				s.err = io.EOF
				return s.dispatch()
			}
			s.err = err
			return nil, nil, err
		}
		if len(line) == 0 {
			if s.hasData {
				return s.dispatch()
			}
			s.event = s.event[:0]
			continue
		}
		if ferr := s.field(line); ferr != nil {
			s.err = ferr
			return nil, nil, ferr
		}
		if err == io.EOF {
			s.err = io.EOF
			if s.hasData {
				return s.dispatch()
			}
			return nil, nil, io.EOF
		}
	}
}

func (s *SSEReader) dispatch() ([]byte, []byte, error) {
	s.hasData = false
	ev, data := s.event, s.data
	s.event, s.data = s.event[:0], s.data[:0]
	return ev, data, nil
}

func (s *SSEReader) field(line []byte) error {
	if line[0] == ':' {
		return nil
	}
	name, value, found := bytes.Cut(line, []byte{':'})
	if found && len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	switch string(name) {
	case "data":
		if len(s.data)+1+len(value) > MaxEventBytes {
			return ErrEventTooLarge
		}
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		s.hasData = true
	case "event":
		s.event = append(s.event[:0], value...)
	}
	return nil
}

// readLine returns the next line without its end; at the body's end the
// last unterminated line with io.EOF.
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
		if err == nil {
			line = line[:len(line)-1]
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
		}
		if !s.started {
			s.started = true
			line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
		}
		return line, err
	}
}
