package a2a

import (
	"bytes"
	"encoding/json"
	"io"
	"unicode/utf8"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends/jsonscan"
	"github.com/flexway/flexway/server/faults"
)

// StreamDecoder turns the events of one `message/stream` call into chat
// completion chunks. It is a small state machine fed one SSE event at a
// time; it is not safe for concurrent use. Each event's data is one
// JSON-RPC response whose result is a Message, a Task, a
// TaskStatusUpdateEvent or a TaskArtifactUpdateEvent
// (https://a2a-protocol.org/v0.3.0/specification/#72-messagestream):
//   - a Message: its text is the whole answer: one chunk with the content
//     and finish_reason "stop", and the stream is done;
//   - a Task: its id becomes the chunks' id; a task already completed or
//     asking for input is answered as [Decode] would, one chunk; a task
//     `submitted` or `working` gives no chunk;
//   - an artifact-update: its text parts, as a content delta (a new
//     artifact after content is separated by "\n"; `append` chunks are
//     continuations);
//   - a status-update: `working`/`submitted` give no chunk (progress
//     messages are not the answer); `completed` (its status message's text
//     when no content came before), `input-required` and `auth-required`
//     (the agent's question) give the last chunk with finish_reason "stop";
//     `failed`, `rejected`, `canceled`, `auth-required` without a status
//     message text and unknown states are errors as in [Decode]; a `final`
//     event ends the stream.
//
// Every event must carry the request's JSON-RPC id
// ([DecodeOptions.RequestID]; null only on an error object), else it is
// a [faults.UpstreamError].
//
// Every chunk has choices[0].index 0, object "chat.completion.chunk", id
// "a2a-" + the task (or message) id, and the decoder's model and created;
// the first one carries role "assistant". No chunk carries usage: an agent
// reports none, the caller estimates it.
type StreamDecoder struct {
	o            DecodeOptions
	id           string
	lastArtifact string
	roleSent     bool
	content      bool
	done         bool
	buf          []byte
	scan         jsonscan.Scanner // the fast path's, kept from event to event
	resp         rpcResponse
	res          result
	slowOnly     bool // tests: decode every event with encoding/json
}

// NewStreamDecoder returns the decoder of one call's stream.
func NewStreamDecoder(o DecodeOptions) *StreamDecoder {
	o.RequestID = requestID(o.RequestID)
	return &StreamDecoder{o: o}
}

// Done reports whether the stream's final event was decoded: the stream
// is complete, and later events are ignored.
func (d *StreamDecoder) Done() bool { return d.done }

// ContentSent reports whether a chunk with content was returned: an error
// after it cuts the client's stream, one before it is a failure the
// fallback rules may act on.
func (d *StreamDecoder) ContentSent() bool { return d.content }

// Feed decodes one SSE event (its name, empty when none, and its data) and
// returns the chunk it yields, or nil for an event that yields none. It
// returns io.EOF once the stream is done (the event that ends it returns
// its chunk first). Errors are *faults.Error: a JSON-RPC error object, or
// an event named "error", maps as in [Decode]; an event whose id is not the
// request's as in [Decode] (every event answers the one message/stream
// request); a failed, rejected or canceled task, or auth-required without
// a status message text, as in [Decode]; unreadable data is
// [faults.UpstreamError].
// After an error the decoder must not be fed again.
func (d *StreamDecoder) Feed(event, data []byte) (*flexwayv1.ChatCompletionChunk, error) {
	if d.done {
		return nil, io.EOF
	}
	if len(event) == 0 && !d.slowOnly {
		if c, ok := d.fastArtifact(data); ok {
			return c, nil
		}
	}
	d.resp = rpcResponse{}
	if err := json.Unmarshal(data, &d.resp); err != nil {
		return nil, faults.Wrap(faults.UpstreamError, err, "upstream "+d.o.Backend+" sent an unreadable stream event")
	}
	if d.resp.Error != nil {
		if err := d.o.checkID(d.resp.ID, true); err != nil {
			return nil, err
		}
		return nil, rpcFault(d.o.Backend, d.resp.Error)
	}
	if string(event) == "error" {
		return nil, faults.New(faults.UpstreamError, "upstream %s reported an error in its stream", d.o.Backend)
	}
	if err := d.o.checkID(d.resp.ID, false); err != nil {
		return nil, err
	}
	d.res = result{}
	if len(d.resp.Result) == 0 || json.Unmarshal(d.resp.Result, &d.res) != nil {
		return nil, faults.New(faults.UpstreamError, "upstream %s sent a stream event with neither a result nor an error", d.o.Backend)
	}
	r := &d.res
	switch r.Kind {
	case "artifact-update":
		d.setID(r.TaskID)
		if r.Artifact == nil {
			return nil, nil
		}
		newArtifact := r.Artifact.ArtifactID != d.lastArtifact
		d.lastArtifact = r.Artifact.ArtifactID
		d.buf = joinPartsBytes(d.buf[:0], r.Artifact.Parts)
		if len(d.buf) == 0 {
			return nil, nil
		}
		if d.content && !r.Append && newArtifact {
			// A new artifact after content starts on its own line.
			d.buf = append(d.buf, 0)
			copy(d.buf[1:], d.buf)
			d.buf[0] = '\n'
		}
		return d.chunk(string(d.buf), false), nil
	case "status-update":
		d.setID(r.TaskID)
		return d.status(r.Status, r.Final)
	case "task":
		d.setID(r.ID)
		if r.Status == nil {
			return nil, faults.New(faults.UpstreamError, "upstream %s answered a task without a status", d.o.Backend)
		}
		switch normState(r.Status.State) {
		case stateSubmitted, stateWorking:
			return nil, nil
		}
		text, _, err := answerText(r, d.o.Backend)
		if err != nil {
			return nil, err
		}
		return d.last(text), nil
	case "message", "":
		if r.Kind == "" && r.Parts == nil {
			break
		}
		d.setID(r.MessageID)
		return d.last(joinParts(r.Parts)), nil
	}
	return nil, faults.New(faults.UpstreamError, "upstream %s sent a stream result of kind %q", d.o.Backend, cut(r.Kind, 32))
}

// status decodes a status-update.
func (d *StreamDecoder) status(st *status, final bool) (*flexwayv1.ChatCompletionChunk, error) {
	if st == nil {
		return nil, faults.New(faults.UpstreamError, "upstream %s sent a status update without a status", d.o.Backend)
	}
	switch s := normState(st.State); s {
	case stateSubmitted, stateWorking:
		if final {
			return d.last(""), nil
		}
		return nil, nil
	case stateCompleted:
		text := ""
		if !d.content {
			text = joinParts(partsOf(st.Message))
		}
		return d.last(text), nil
	case stateInputRequired, stateAuthRequired:
		text := joinParts(partsOf(st.Message))
		if text == "" && s == stateAuthRequired {
			return nil, taskError(d.o.Backend, s, st.Message)
		}
		if d.content && text != "" {
			text = "\n" + text
		}
		return d.last(text), nil
	default:
		return nil, taskError(d.o.Backend, s, st.Message)
	}
}

// setID keeps the first id the stream names.
func (d *StreamDecoder) setID(id string) {
	if d.id == "" && id != "" {
		d.id = "a2a-" + id
	}
}

// last is the stream's last chunk: text (maybe empty) and finish "stop".
func (d *StreamDecoder) last(text string) *flexwayv1.ChatCompletionChunk {
	d.done = true
	return d.chunk(text, true)
}

// stopReason is the finish_reason of every A2A answer.
var stopReason = "stop"

// chunkBlock holds a chunk and the messages it points to, allocated at
// once: a chunk costs two allocations, this block and its text.
type chunkBlock struct {
	c       flexwayv1.ChatCompletionChunk
	choice  flexwayv1.ChatCompletionChunkChoice
	delta   flexwayv1.ChatMessage
	text    flexwayv1.ChatMessage_Text
	choices [1]*flexwayv1.ChatCompletionChunkChoice
	finish  string
}

// chunk builds a chunk of content text, with the finish reason when last.
// The chunk is the caller's: the decoder keeps no reference to it.
func (d *StreamDecoder) chunk(text string, last bool) *flexwayv1.ChatCompletionChunk {
	b := &chunkBlock{}
	if !d.roleSent {
		b.delta.Role = "assistant"
		d.roleSent = true
	}
	if text != "" {
		b.text.Text = text
		b.delta.Content = &b.text
		d.content = true
	}
	b.choice.Delta = &b.delta
	if last {
		b.finish = stopReason
		b.choice.FinishReason = &b.finish
	}
	b.choices[0] = &b.choice
	b.c.Id, b.c.Object, b.c.Created, b.c.Model = d.id, "chat.completion.chunk", d.o.Created, d.o.Model
	b.c.Choices = b.choices[:]
	return &b.c
}

// The JSON member names encoding/json would match (case-insensitively)
// to a field of rpcResponse, result, artifact and answerPart: a member the
// fast path does not read exactly by its name, but which matches one of
// these, is left to encoding/json.
var (
	responseFields = []string{"jsonrpc", "id", "result", "error"}
	resultFields   = []string{"kind", "messageId", "role", "parts", "id", "status", "artifacts", "history", "taskId", "final", "artifact", "append", "lastChunk"}
	artifactFields = []string{"artifactId", "parts"}
	partFields     = []string{"kind", "text", "data"}
)

// other handles a member the fast path does not read: skipped when
// encoding/json ignores it too, else the input is left to encoding/json.
func other(s *jsonscan.Scanner, key []byte, fields []string) {
	for _, f := range fields {
		if bytes.EqualFold(key, []byte(f)) {
			s.Fail()
			return
		}
	}
	s.Skip()
}

// once marks the scanner bad when a member comes twice (encoding/json
// would merge or replace; the fast path does not try).
func once(s *jsonscan.Scanner, seen *bool) {
	if *seen {
		s.Fail()
	}
	*seen = true
}

// fastArtifact decodes, without reflection, the stream's steady state: an
// unnamed event holding a JSON-RPC result of kind artifact-update whose
// parts are text (or file) parts. ok is false for anything else, which
// [StreamDecoder.Feed] decodes with encoding/json, to the same result (the
// fuzz target checks it).
func (d *StreamDecoder) fastArtifact(data []byte) (c *flexwayv1.ChatCompletionChunk, ok bool) {
	var kind, taskID, artifactID []byte
	var appendFlag, seenKind, seenTask, seenAppend, seenLast, seenArt bool
	d.buf = d.buf[:0]
	r := &d.scan
	ok = fastResult(r, data, d.o.RequestID, func() {
		r.Object(func(key []byte) {
			switch string(key) {
			case "kind":
				once(r, &seenKind)
				kind = strNoEscape(r)
			case "taskId":
				once(r, &seenTask)
				taskID = strNoEscape(r)
			case "append":
				once(r, &seenAppend)
				appendFlag = r.Bool()
			case "lastChunk":
				once(r, &seenLast)
				r.Bool()
			case "artifact":
				once(r, &seenArt)
				var seenID, seenParts bool
				r.Object(func(key []byte) {
					switch string(key) {
					case "artifactId":
						once(r, &seenID)
						artifactID = strNoEscape(r)
					case "parts":
						once(r, &seenParts)
						d.buf = fastParts(r, d.buf)
					default:
						other(r, key, artifactFields)
					}
				})
			default:
				other(r, key, resultFields)
			}
		})
	})
	if !ok || string(kind) != "artifact-update" || !seenArt {
		return nil, false
	}
	if d.id == "" && len(taskID) > 0 {
		d.id = "a2a-" + string(taskID)
	}
	newArtifact := string(artifactID) != d.lastArtifact
	if newArtifact {
		d.lastArtifact = string(artifactID)
	}
	if len(d.buf) == 0 {
		return nil, true
	}
	if d.content && !appendFlag && newArtifact {
		d.buf = append(d.buf, 0)
		copy(d.buf[1:], d.buf)
		d.buf[0] = '\n'
	}
	return d.chunk(string(d.buf), false), true
}

// fastResult reads a JSON-RPC response with s, without reflection,
// calling result with s at its result, which result must consume; ok is
// false unless it has a result, a null or absent error, the id want (a
// string without escapes) and everything read well, the rest being left
// to encoding/json.
func fastResult(s *jsonscan.Scanner, data []byte, want string, result func()) (ok bool) {
	s.Reset(data)
	var seenRes, seenErr, seenRPC, seenID bool
	s.Object(func(key []byte) {
		switch string(key) {
		case "id":
			once(s, &seenID)
			if string(strNoEscape(s)) != want {
				s.Fail()
			}
		case "result":
			once(s, &seenRes)
			if s.Peek() == 'n' {
				s.Fail() // a null result is no answer
				return
			}
			result()
		case "error":
			once(s, &seenErr)
			if !s.Null() {
				s.Fail()
			}
		case "jsonrpc":
			once(s, &seenRPC)
			if _, esc := s.Raw(); esc {
				s.Fail()
			}
		default:
			other(s, key, responseFields)
		}
	})
	return s.Done() && seenRes && seenID
}

// fastParts reads a parts array, appending the text of its text parts to
// dst as [joinPartsBytes] does; a part that is neither text nor file marks
// the scanner bad.
func fastParts(a *jsonscan.Scanner, dst []byte) []byte {
	a.Array(func() {
		var pkind, text []byte
		var esc, hasText, seenKind, seenData bool
		a.Object(func(key []byte) {
			switch string(key) {
			case "kind":
				once(a, &seenKind)
				pkind = strNoEscape(a)
			case "text":
				once(a, &hasText)
				text, esc = a.Raw()
			case "data":
				once(a, &seenData)
				a.Skip()
			default:
				other(a, key, partFields)
			}
		})
		switch {
		case a.Bad(), string(pkind) == "file":
		case string(pkind) == "text" && hasText:
			if len(text) == 0 {
				return
			}
			if len(dst) > 0 {
				dst = append(dst, '\n')
			}
			if !esc && utf8.Valid(text) {
				dst = append(dst, text...)
				return
			}
			dst = jsonscan.Unescape(dst, text)
		default:
			a.Fail()
		}
	})
	return dst
}

// strNoEscape reads a string that must hold no escape and be valid UTF-8
// (an id or a kind), else marks the scanner bad.
func strNoEscape(s *jsonscan.Scanner) []byte {
	raw, esc := s.Raw()
	if esc || !utf8.Valid(raw) {
		s.Fail()
	}
	return raw
}

// End is called when the body ended (the reader's io.EOF): nil when the
// stream is done, else the [faults.UpstreamError] of a stream cut before
// its final event.
func (d *StreamDecoder) End() error {
	if d.done {
		return nil
	}
	return faults.Wrap(faults.UpstreamError, io.ErrUnexpectedEOF, "upstream "+d.o.Backend+" stream ended before its final event")
}
