package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"sync/atomic"
	"time"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// sseBufferBytes is the read buffer of a stream; longer lines are
// accumulated, up to maxAnswerBytes per event. A chunk event is usually
// well under 1 KiB and every open stream holds this buffer for its whole
// life, so it stays small (see the RSS-per-open-stream figure of make
// bench): it sits behind the connection's own 4 KiB read buffer, so a
// smaller one costs a copy per line, not a system call.
const sseBufferBytes = 1 << 10

// maxKeptBuffer is the largest line or event buffer a stream keeps for the
// next event.
const maxKeptBuffer = 1 << 20

// errStreamClosed is the request's cancellation cause when the stream is
// closed before its end.
var errStreamClosed = errors.New("upstream backend: stream closed")

// StreamChatCompletion sends req with stream on and
// stream_options.include_usage on to <url>/chat/completions, and returns
// once the upstream's response headers arrived with a 2xx status. It
// implements [backends.Backend.StreamChatCompletion]: a non-2xx status, or
// a 2xx answer declared as JSON or HTML rather than an event stream, is an
// error here, with Served filled on errors too. The returned stream is not
// safe for concurrent use, except that Close may be called while Recv
// waits; the caller must Close it.
func (b *Backend) StreamChatCompletion(ctx context.Context, req *flexwayv1.CreateChatCompletionRequest) (backends.ChunkStream, backends.Served, error) {
	served := b.served(ctx, req.GetModel())
	if b.wire != nil {
		s, err := b.translatedStream(ctx, req, served)
		return s, served, err
	}
	body, err := openaiwire.AppendChatCompletionRequest(nil, req, openaiwire.Upstream{Model: served.ModelSent, Stream: true})
	if err != nil {
		return nil, served, encodeError(err)
	}
	ex, err := b.send(ctx, b.chatURL, body, "text/event-stream")
	if err != nil {
		return nil, served, err
	}
	if mt, _, _ := mime.ParseMediaType(ex.resp.Header.Get("Content-Type")); mt == "application/json" || mt == "text/html" {
		fe := faults.New(faults.UpstreamError, "upstream %s answered %s, not an event stream", b.name, mt)
		if mt == "application/json" && unaskedCompletion(ex) {
			// A whole completion, no error: the upstream served, but not
			// as a stream, which only a field of the request can have
			// asked for.
			fe = faults.Wrap(faults.UpstreamError, backends.ErrRequestCaused,
				"upstream "+b.name+" answered a JSON completion to a call that asked for a stream; a field of the request may have asked it not to stream")
		}
		ex.release()
		return nil, served, fe
	}
	return &stream{ex: ex, r: bufio.NewReaderSize(ex.body, sseBufferBytes)}, served, nil
}

// unaskedCompletionBytes bounds the read of a JSON answer to a stream
// call, to tell a completion from an error object.
const unaskedCompletionBytes = 1 << 20

// unaskedCompletion reports whether the JSON answer of ex, a stream call,
// is a chat completion with choices rather than an error object (an
// unhealthy upstream's way to fail with a 2xx). Only what comes within
// the drain timeout is read: a slow body must not delay a fallback.
func unaskedCompletion(ex *exchange) bool {
	t := time.AfterFunc(drainTimeout, func() { ex.cancel(errDrainTimeout) })
	defer t.Stop()
	data, err := io.ReadAll(io.LimitReader(ex.body, unaskedCompletionBytes))
	if err != nil || isErrorAnswer(data, "choices") {
		return false
	}
	var probe struct {
		Choices []json.RawMessage `json:"choices"`
	}
	return json.Unmarshal(data, &probe) == nil && len(probe.Choices) > 0
}

// stream reads an upstream's Server-Sent Events (text/event-stream) as
// chat completion chunks. Lines end with LF or CRLF and have no length
// limit but the event bound; `data` lines of one event are joined with LF;
// comments and other fields are ignored; an event named `error`, or whose
// data is a JSON object with an `error` member, is an upstream error.
type stream struct {
	ex *exchange
	r  *bufio.Reader

	line    []byte // a line longer than the read buffer, being accumulated
	data    []byte // the current event's data
	hasData bool   // the current event has a data field
	event   []byte // the current event's type
	first   bool   // the first line was read (and its BOM stripped)
	err     error  // sticky: io.EOF after [DONE], else the failure
	closed  atomic.Bool
}

// Recv returns the next chunk as soon as its event is read. It implements
// [backends.ChunkStream.Recv]: io.EOF after `data: [DONE]`; a
// *faults.Error otherwise (UpstreamError for a cut, unreadable or
// error-carrying stream, UpstreamTimeout after Options.IdleTimeout of
// silence, Canceled when ctx was canceled or the stream closed).
func (s *stream) Recv() (*flexwayv1.ChatCompletionChunk, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.closed.Load() {
		s.err = faults.New(faults.Canceled, "the stream was closed")
		return nil, s.err
	}
	for {
		line, err := s.readLine()
		if err != nil && len(line) == 0 {
			return nil, s.fail(s.endError(err))
		}
		if err == nil && len(line) == 0 {
			chunk, err := s.dispatch()
			if err != nil {
				return nil, s.fail(err)
			}
			if chunk != nil {
				return chunk, nil
			}
			continue
		}
		if ferr := s.field(line); ferr != nil {
			return nil, s.fail(ferr)
		}
		if err != nil {
			// The body ended inside a line.
			return nil, s.fail(s.endError(err))
		}
	}
}

// Close releases the connection. It implements [backends.ChunkStream.Close]:
// a stream not read to `data: [DONE]` has its upstream request canceled.
func (s *stream) Close() error {
	if !s.closed.Swap(true) {
		s.ex.abort(errStreamClosed)
	}
	return nil
}

// fail records err as the stream's end and releases the exchange.
func (s *stream) fail(err error) error {
	s.err = err
	if err == io.EOF {
		s.ex.release()
	} else {
		s.ex.abort(errStreamClosed)
	}
	return err
}

// readLine returns the next line without its LF or CRLF. At the body's
// end it returns the last, unterminated line (maybe empty) with the read
// error. The line is valid until the next call.
func (s *stream) readLine() ([]byte, error) {
	if cap(s.line) > maxKeptBuffer {
		s.line = nil // a rare long line's buffer is not kept
	}
	s.line = s.line[:0]
	for {
		frag, err := s.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if len(s.line)+len(frag) > maxAnswerBytes {
				return nil, errEventTooLarge
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
			line = line[:len(line)-1] // the LF
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
		}
		if !s.first {
			s.first = true
			line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
		}
		return line, err
	}
}

var (
	errEventTooLarge = errors.New("upstream backend: SSE event over 64MiB")
	dataField        = []byte("data")
	eventField       = []byte("event")
	doneData         = []byte("[DONE]")
	errorEvent       = []byte("error")
	errorMember      = []byte(`"error"`)
)

// field applies one non-empty line to the current event.
func (s *stream) field(line []byte) error {
	if line[0] == ':' {
		return nil // a comment
	}
	name, value, found := bytes.Cut(line, []byte{':'})
	if found && len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	switch {
	case bytes.Equal(name, dataField):
		if len(s.data)+1+len(value) > maxAnswerBytes {
			return s.tooLarge()
		}
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		s.hasData = true
	case bytes.Equal(name, eventField):
		s.event = append(s.event[:0], value...)
	}
	return nil
}

// dispatch ends the current event: it returns its chunk, nil for an event
// without data, io.EOF for [DONE], or an error.
func (s *stream) dispatch() (*flexwayv1.ChatCompletionChunk, error) {
	data, hasData, event := s.data, s.hasData, s.event
	// The buffer is reused (openaiwire keeps no reference to its input),
	// unless a rare large event grew it.
	s.data, s.hasData, s.event = s.data[:0], false, s.event[:0]
	if cap(s.data) > maxKeptBuffer {
		s.data = nil
	}
	if bytes.Equal(event, errorEvent) {
		return nil, s.upstreamErrorEvent(data)
	}
	data = bytes.TrimSpace(data)
	if !hasData || len(data) == 0 {
		return nil, nil
	}
	if bytes.Equal(data, doneData) {
		return nil, io.EOF
	}
	if isErrorObject(data) {
		return nil, s.upstreamErrorEvent(data)
	}
	chunk, err := openaiwire.ParseChatCompletionChunk(data)
	if err != nil {
		return nil, faults.Wrap(faults.UpstreamError, err, "upstream "+s.ex.b.name+" sent an unreadable stream event")
	}
	return chunk, nil
}

// endError maps the end of the body (err from the last read) when no
// [DONE] came first, unless the event in progress is [DONE] itself, sent
// without its closing blank line.
func (s *stream) endError(err error) error {
	if err == io.EOF {
		if s.hasData && bytes.Equal(bytes.TrimSpace(s.data), doneData) {
			return io.EOF
		}
		return faults.Wrap(faults.UpstreamError, io.ErrUnexpectedEOF, "upstream "+s.ex.b.name+" stream ended before [DONE]")
	}
	if errors.Is(err, errEventTooLarge) {
		return s.tooLarge()
	}
	if s.closed.Load() && s.ex.parent.Err() == nil && errors.Is(context.Cause(s.ex.ctx), errStreamClosed) {
		return faults.Wrap(faults.Canceled, err, "the stream was closed")
	}
	fe := s.ex.readError(err)
	if fe.Reason == faults.UpstreamError {
		fe.Message = "upstream " + s.ex.b.name + " stream ended before [DONE]"
	}
	return fe
}

// tooLarge is the error of an event over 64 MiB, which the call's own n
// and max_tokens explain ([backends.ErrRequestCaused]).
func (s *stream) tooLarge() error {
	return faults.Wrap(faults.UpstreamError, backends.ErrRequestCaused,
		fmt.Sprintf("upstream %s sent a stream event over %d MiB; lower n or max_tokens", s.ex.b.name, maxAnswerBytes>>20))
}

// upstreamErrorEvent is the error of an upstream's in-stream error event.
func (s *stream) upstreamErrorEvent(data []byte) error {
	return faults.Wrap(faults.UpstreamError, errorObjectCause("error event", data), "upstream "+s.ex.b.name+" reported an error in its stream")
}

// errorObjectCause is the cause, for logs, of an upstream's OpenAI error
// object, what being "error event" or "error object": only the error's
// `type` and `code` (each cut to 64 bytes) and the data's size are kept,
// as its message may echo a prompt or a credential.
func errorObjectCause(what string, data []byte) error {
	var probe struct {
		Error struct {
			Type any `json:"type"`
			Code any `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(data, &probe)
	cut := func(v any) string {
		t := fmt.Sprint(v)
		if len(t) > 64 {
			t = t[:64]
		}
		return t
	}
	return fmt.Errorf("upstream %s: type %q, code %q, %d bytes", what, cut(probe.Error.Type), cut(probe.Error.Code), len(data))
}

// isErrorObject reports whether data is a JSON object with a non-null
// top-level "error" member.
func isErrorObject(data []byte) bool {
	return isErrorAnswer(data, "")
}

// isErrorAnswer reports whether data is a JSON object with a non-null
// top-level "error" member and, when result is not empty, without a
// result member of that name holding something (absent, null, [] and {}
// hold nothing). Data only pays for the full check when it holds the bytes
// `"error"`.
func isErrorAnswer(data []byte, result string) bool {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' || !bytes.Contains(data, errorMember) {
		return false
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(data, &probe) != nil {
		return false
	}
	if e, ok := probe["error"]; !ok || bytes.Equal(e, jsonNull) {
		return false
	}
	return result == "" || isEmptyJSON(probe[result])
}

var jsonNull = []byte("null")

// isEmptyJSON reports whether a JSON value is absent (nil), null, or an
// empty array or object.
func isEmptyJSON(v json.RawMessage) bool {
	if len(v) == 0 || bytes.Equal(v, jsonNull) {
		return true
	}
	if (v[0] == '[' || v[0] == '{') && len(bytes.TrimSpace(v[1:len(v)-1])) == 0 {
		return true
	}
	return false
}
