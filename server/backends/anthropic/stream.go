package anthropic

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/jsonscan"
	"github.com/flexway/flexway/server/faults"
)

// streamEvent is one event's data, for every event type of
// https://docs.anthropic.com/en/docs/build-with-claude/streaming.
type streamEvent struct {
	Type         string             `json:"type"`
	Index        int                `json:"index"`
	Message      *wireMessageAnswer `json:"message"`
	ContentBlock *wireContent       `json:"content_block"`
	Delta        struct {
		Type        string  `json:"type"`
		Text        string  `json:"text"`
		PartialJSON string  `json:"partial_json"`
		Thinking    string  `json:"thinking"`
		StopReason  *string `json:"stop_reason"`
	} `json:"delta"`
	Usage *wireUsage `json:"usage"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// maxBlocks bounds the content blocks of one answer the decoder tracks.
const maxBlocks = 1 << 16

// Stream decodes one call's Messages stream into OpenAI chat completion
// chunks. Feed it every event with [Stream.Event] in order, then call
// [Stream.End] at the body's end. It is not safe for concurrent use.
//
// The chunks: message_start → a chunk with role assistant and empty
// content; text_delta → content; thinking_delta → reasoning_content (in
// the delta's extra_fields); a tool_use block's start → a tool call
// fragment with index, id, type and function.name (arguments ""), each
// non-empty input_json_delta → a fragment with index and
// function.arguments only; the first message_delta with a stop_reason →
// the one chunk carrying finish_reason (per [FinishReason]) with an
// empty delta; message_stop → a chunk with no choices and the usage
// (per [Usage.Canonical]). choices[0].index is always 0; a tool call's
// index counts tool calls only, from 0, whatever blocks came before.
// Usage is cumulative: message_start and every message_delta carry
// totals, the last value of each field wins. ping, content_block_stop,
// signature and citation deltas and unknown event types emit nothing.
type Stream struct {
	created  int64
	id       string
	model    string
	usage    Usage
	started  bool
	content  bool
	done     bool
	finished bool
	tools    int
	toolOf   []int // content block index → tool call index, or -1
	ev       streamEvent
	buf      []byte
	sc       jsonscan.Scanner
	typ      []byte // the fast path's event type
	dtyp     []byte // its delta's type
	val      []byte // its delta's text, partial_json or thinking
}

// NewStream returns the decoder of one stream whose chunks say created
// (Unix seconds).
func NewStream(created int64) *Stream { return &Stream{created: created} }

// Done reports whether message_stop was read.
func (s *Stream) Done() bool { return s.done }

// Content reports whether a chunk with content (text, reasoning or a tool
// call) was emitted: after it, a failure is a cut stream rather than one
// the fallback rules may act on.
func (s *Stream) Content() bool { return s.content }

// Usage returns the usage read so far.
func (s *Stream) Usage() Usage { return s.usage }

// Event decodes one event, name being its SSE event field (maybe empty:
// the data's type decides) and data its data. It returns the chunk to
// send, or nil when the event emits none. Errors are *faults.Error: an
// `error` event maps per [DecodeError] with the status Anthropic
// documents for its type (overloaded_error → an upstream_error the
// fallback rules act on); data that is not a JSON event, or a content
// event before message_start, is an upstream_error.
func (s *Stream) Event(name, data []byte) (*flexwayv1.ChatCompletionChunk, error) {
	if fastPath && string(name) != "error" {
		if c, ok := s.fast(data); ok {
			return c, nil
		}
	}
	ev := &s.ev
	*ev = streamEvent{}
	if err := json.Unmarshal(data, ev); err != nil {
		if string(name) == "error" {
			return nil, DecodeError(500, 0, data)
		}
		return nil, faults.Wrap(faults.UpstreamError, err, "the upstream sent an unreadable stream event")
	}
	if ev.Type == "error" || string(name) == "error" {
		status, ok := errorStatus[ev.Error.Type]
		if !ok {
			status = 500
		}
		return nil, DecodeError(status, 0, data)
	}
	if s.done {
		return nil, nil
	}
	switch ev.Type {
	case "ping", "content_block_stop":
		return nil, nil
	case "message_start":
		if s.started || ev.Message == nil {
			return nil, s.bad("a second or empty message_start")
		}
		s.started = true
		s.id, s.model = ev.Message.ID, ev.Message.Model
		s.usage.merge(ev.Message.Usage)
		c := s.chunk(&flexwayv1.ChatMessage{Role: "assistant", Content: &flexwayv1.ChatMessage_Text{}})
		return c, nil
	}
	if !s.started {
		if ev.Type == "" || ev.Type == "message_stop" || ev.Type == "message_delta" || ev.Type == "content_block_start" || ev.Type == "content_block_delta" {
			return nil, s.bad(fmt.Sprintf("event %q before message_start", cut(ev.Type)))
		}
		return nil, nil
	}
	switch ev.Type {
	case "content_block_start":
		if ev.Index < 0 || ev.Index >= maxBlocks || ev.ContentBlock == nil {
			return nil, s.bad("a content block index out of range")
		}
		for len(s.toolOf) <= ev.Index {
			s.toolOf = append(s.toolOf, -1)
		}
		switch ev.ContentBlock.Type {
		case "tool_use":
			k := s.tools
			s.tools++
			s.toolOf[ev.Index] = k
			s.content = true
			s.buf = append(s.buf[:0], '[')
			s.buf = appendToolCall(s.buf, k, ev.ContentBlock.ID, ev.ContentBlock.Name, nil)
			s.buf = append(s.buf, ']')
			return s.extraChunk("tool_calls"), nil
		case "text":
			if t := ev.ContentBlock.Text; t != "" {
				s.content = true
				return s.chunk(&flexwayv1.ChatMessage{Content: &flexwayv1.ChatMessage_Text{Text: t}}), nil
			}
		}
		return nil, nil
	case "content_block_delta":
		switch ev.Delta.Type {
		case "text_delta":
			if ev.Delta.Text == "" {
				return nil, nil
			}
			s.content = true
			return s.chunk(&flexwayv1.ChatMessage{Content: &flexwayv1.ChatMessage_Text{Text: ev.Delta.Text}}), nil
		case "thinking_delta":
			if ev.Delta.Thinking == "" {
				return nil, nil
			}
			s.content = true
			s.buf = appendJSONString(s.buf[:0], ev.Delta.Thinking)
			return s.extraChunk("reasoning_content"), nil
		case "input_json_delta":
			if ev.Index < 0 || ev.Index >= len(s.toolOf) || s.toolOf[ev.Index] < 0 {
				return nil, s.bad("input_json_delta outside a tool_use block")
			}
			if ev.Delta.PartialJSON == "" {
				return nil, nil
			}
			s.buf = s.appendArguments(s.buf[:0], s.toolOf[ev.Index], []byte(ev.Delta.PartialJSON))
			return s.extraChunk("tool_calls"), nil
		}
		return nil, nil
	case "message_delta":
		s.usage.merge(ev.Usage)
		if ev.Delta.StopReason == nil || s.finished {
			return nil, nil
		}
		s.finished = true
		finish := FinishReason(*ev.Delta.StopReason)
		c := s.chunk(&flexwayv1.ChatMessage{})
		c.Choices[0].FinishReason = &finish
		return c, nil
	case "message_stop":
		s.done = true
		if !s.usage.Reported {
			// No usage came: the gateway estimates it; no chunk of
			// zeros is made up.
			return nil, nil
		}
		return &flexwayv1.ChatCompletionChunk{
			Id: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model,
			Choices: []*flexwayv1.ChatCompletionChunkChoice{}, Usage: s.usage.Canonical(),
		}, nil
	}
	return nil, nil
}

// fastPath turns [Stream.fast] on; tests turn it off to check that both
// paths decode alike.
var fastPath = true

// fast decodes the stream's hot events (content_block_delta of text,
// thinking and tool input, ping, content_block_stop) without
// encoding/json; ok false leaves the event to the general path, which
// decides everything fast does not read exactly, errors included.
func (s *Stream) fast(data []byte) (c *flexwayv1.ChatCompletionChunk, ok bool) {
	sc := &s.sc
	sc.Reset(data)
	s.typ, s.dtyp, s.val = s.typ[:0], s.dtyp[:0], s.val[:0]
	index, hasVal := -1, false
	sc.Object(func(key []byte) {
		switch string(key) {
		case "type":
			s.typ = sc.Str(s.typ[:0])
		case "index":
			if index = int(sc.Int()); index < 0 || index >= maxBlocks {
				sc.Fail()
			}
		case "delta":
			sc.Object(func(key []byte) {
				switch string(key) {
				case "type":
					s.dtyp = sc.Str(s.dtyp[:0])
				case "text", "partial_json", "thinking":
					if hasVal {
						sc.Fail()
						return
					}
					hasVal = true
					s.val = sc.Str(s.val[:0])
				default:
					sc.Fail()
				}
			})
		default:
			sc.Fail()
		}
	})
	if !sc.Done() {
		return nil, false
	}
	switch string(s.typ) {
	case "ping", "content_block_stop":
		return nil, true
	case "content_block_delta":
	default:
		return nil, false
	}
	if !s.started || s.done || index < 0 {
		return nil, false
	}
	switch string(s.dtyp) {
	case "text_delta":
		if len(s.val) == 0 {
			return nil, true
		}
		s.content = true
		b := s.box()
		b.Text.Text = string(s.val)
		b.Delta.Content = &b.Text
		return &b.Chunk, true
	case "thinking_delta":
		if len(s.val) == 0 {
			return nil, true
		}
		s.content = true
		s.buf = appendJSONString(s.buf[:0], string(s.val))
		return s.extraChunk("reasoning_content"), true
	case "input_json_delta":
		if index >= len(s.toolOf) || s.toolOf[index] < 0 {
			return nil, false
		}
		if len(s.val) == 0 {
			return nil, true
		}
		s.buf = s.appendArguments(s.buf[:0], s.toolOf[index], s.val)
		return s.extraChunk("tool_calls"), true
	}
	return nil, false
}

// appendArguments writes the tool_calls of an arguments fragment.
func (s *Stream) appendArguments(dst []byte, tool int, frag []byte) []byte {
	dst = append(dst, `[{"index":`...)
	dst = strconv.AppendInt(dst, int64(tool), 10)
	dst = append(dst, `,"function":{"arguments":`...)
	dst = appendJSONString(dst, string(frag))
	return append(dst, "}}]"...)
}

// box is a new chunk of s's id, model and created with one choice (index
// 0) and an empty delta.
func (s *Stream) box() *backends.ChunkBox { return backends.NewChunkBox(s.id, s.model, s.created, 0) }

// End is called at the body's end: nil after message_stop; otherwise an
// upstream_error (a cut stream once [Stream.Content] is true).
func (s *Stream) End() error {
	if s.done {
		return nil
	}
	return faults.Wrap(faults.UpstreamError, io.ErrUnexpectedEOF, "the upstream's stream ended before message_stop")
}

func (s *Stream) bad(what string) error {
	return faults.Wrap(faults.UpstreamError, fmt.Errorf("anthropic stream: %s", what), "the upstream sent an unreadable stream event")
}

// chunk is a chunk of one choice (index 0) with delta d.
func (s *Stream) chunk(d *flexwayv1.ChatMessage) *flexwayv1.ChatCompletionChunk {
	b := s.box()
	b.Choice.Delta = d
	return &b.Chunk
}

// extraChunk is a chunk whose delta holds s.buf as its extra field key.
func (s *Stream) extraChunk(key string) *flexwayv1.ChatCompletionChunk {
	b := s.box()
	b.Delta.ExtraFields = map[string]string{key: string(s.buf)}
	return &b.Chunk
}
