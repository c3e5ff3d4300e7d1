package gemini

import (
	"bytes"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/jsonstring"
)

// maxStreamCandidates bounds the candidate index a stream accepts (n is at
// most 128 on the OpenAI surface).
const maxStreamCandidates = 128

// Stream is the state machine of one streamGenerateContent?alt=sse answer
// (https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent):
// each event's data is one GenerateContentResponse. It is not safe for
// concurrent use; one per call.
//
// Content, reasoning (thought parts) and tool calls are emitted as they
// come, one chunk per event that holds any; the finish reasons and the
// usage are held until [Stream.End], because Gemini's usageMetadata is
// cumulative on every event (the last wins, never a sum) and a
// functionCall anywhere in the answer makes the finish reason tool_calls.
// An event with a finishReason and no parts is still read. Events are read
// by a hand-written scanner that keeps its buffers from event to event:
// a text event costs the canonical chunk's own allocations only.
type Stream struct {
	call    Call
	id      string
	model   string
	scan    eventScan
	cands   []candidateState
	usage   gUsageMetadata
	hasUse  bool
	blocked bool
	scratch []byte
}

type candidateState struct {
	started bool   // a delta was emitted (role sent)
	finish  string // Gemini's finishReason, once seen
	calls   int    // tool calls emitted: the next one's index
}

// NewStream returns the decoder of one streamed call.
func NewStream(call Call) *Stream {
	return &Stream{call: call, model: call.Model}
}

// Feed reads one event, event being its name and data its data, and
// returns the chunk it makes, or nil when it makes none (usage or finish
// only, an empty event).
//
// Errors, each a *faults.Error with reason upstream_error: an event named
// `error` or whose data is Google's error envelope (a failure the fallback
// rules may act on before any content, a cut stream after), data that is
// not a GenerateContentResponse, or a candidate index over 127.
func (s *Stream) Feed(event, data []byte) (*flexwayv1.ChatCompletionChunk, error) {
	data = bytes.TrimSpace(data)
	if string(event) == "error" {
		return nil, faults.New(faults.UpstreamError, "the Gemini upstream reported an error in its stream")
	}
	if len(data) == 0 {
		return nil, nil
	}
	e := &s.scan
	if err := e.scan(data); err != nil {
		return nil, faults.Wrap(faults.UpstreamError, err, "the Gemini upstream sent an unreadable stream event")
	}
	if e.hasError {
		return nil, faults.New(faults.UpstreamError, "the Gemini upstream reported an error in its stream")
	}
	if s.id == "" {
		s.id = string(e.responseID)
		if s.id == "" {
			s.id = "chatcmpl-" + ToolCallID("")[len("call_"):]
		}
	}
	if len(e.model) > 0 && string(e.model) != s.model {
		s.model = string(e.model)
	}
	if e.hasUsage {
		s.usage, s.hasUse = e.usage, true
	}
	if len(e.blockReason) > 0 && e.ncands == 0 {
		s.blocked = true
	}
	var chunk *flexwayv1.ChatCompletionChunk
	for i := range e.ncands {
		c := &e.cands[i]
		if c.index < 0 || c.index >= maxStreamCandidates {
			return nil, faults.New(faults.UpstreamError, "the Gemini upstream sent a candidate index out of range")
		}
		for int(c.index) >= len(s.cands) {
			s.cands = append(s.cands, candidateState{})
		}
		st := &s.cands[c.index]
		if len(c.finish) > 0 && string(c.finish) != st.finish {
			st.finish = string(c.finish)
		}
		if len(c.text) == 0 && len(c.thought) == 0 && len(c.calls) == 0 {
			continue
		}
		var d *flexwayv1.ChatMessage
		var text *flexwayv1.ChatMessage_Text
		if chunk == nil {
			// The first choice, the only one of a usual event, comes in
			// one allocation with its chunk.
			b := backends.NewChunkBox(s.id, s.model, s.call.Created, int32(c.index))
			chunk, d, text = &b.Chunk, &b.Delta, &b.Text
		} else {
			d, text = &flexwayv1.ChatMessage{}, &flexwayv1.ChatMessage_Text{}
			chunk.Choices = append(chunk.Choices, &flexwayv1.ChatCompletionChunkChoice{Index: int32(c.index), Delta: d})
		}
		s.delta(st, c, d, text)
	}
	return chunk, nil
}

// delta fills d, the chunk delta of one candidate's parts (some text, a
// thought or a call), text being the content d may point to.
func (s *Stream) delta(st *candidateState, c *scanCandidate, d *flexwayv1.ChatMessage, text *flexwayv1.ChatMessage_Text) {
	if !st.started {
		st.started = true
		d.Role = "assistant"
	}
	if len(c.text) > 0 {
		text.Text = string(c.text)
		d.Content = text
	}
	if len(c.thought) > 0 {
		s.scratch = jsonstring.Append(s.scratch[:0], string(c.thought))
		setExtra(&d.ExtraFields, "reasoning_content", string(s.scratch))
	}
	if len(c.calls) > 0 {
		s.scratch = append(s.scratch[:0], '[')
		for j, call := range c.calls {
			if j > 0 {
				s.scratch = append(s.scratch, ',')
			}
			s.scratch = appendToolCall(s.scratch, st.calls, call.name, call.args, call.sig)
			st.calls++
		}
		setExtra(&d.ExtraFields, "tool_calls", string(append(s.scratch, ']')))
	}
}

func (s *Stream) newChunk() *flexwayv1.ChatCompletionChunk {
	return &flexwayv1.ChatCompletionChunk{Id: s.id, Object: "chat.completion.chunk", Created: s.call.Created, Model: s.model}
}

// End is called at the body's end; it returns the last chunk: one choice
// per candidate with its finish reason (per [FinishReason]; tool_calls when
// the candidate emitted any tool call; content_filter for a prompt blocked
// with promptFeedback.blockReason) and the usage from the last
// usageMetadata.
//
// Errors: a *faults.Error with reason upstream_error when the body ended
// before every candidate had its finishReason (a cut stream).
func (s *Stream) End() (*flexwayv1.ChatCompletionChunk, error) {
	if s.id == "" {
		return nil, faults.New(faults.UpstreamError, "the Gemini upstream's stream ended before any event")
	}
	chunk := s.newChunk()
	if s.blocked && len(s.cands) == 0 {
		fr := "content_filter"
		chunk.Choices = append(chunk.Choices, &flexwayv1.ChatCompletionChunkChoice{Delta: &flexwayv1.ChatMessage{Role: "assistant"}, FinishReason: &fr})
	}
	for i := range s.cands {
		st := &s.cands[i]
		if st.finish == "" {
			return nil, faults.New(faults.UpstreamError, "the Gemini upstream's stream ended before candidate %d finished", i)
		}
		fr := FinishReason(st.finish, st.calls > 0)
		d := &flexwayv1.ChatMessage{}
		if !st.started {
			d.Role = "assistant"
		}
		chunk.Choices = append(chunk.Choices, &flexwayv1.ChatCompletionChunkChoice{Index: int32(i), Delta: d, FinishReason: &fr})
	}
	if len(chunk.Choices) == 0 {
		return nil, faults.New(faults.UpstreamError, "the Gemini upstream's stream ended without a candidate")
	}
	if s.hasUse {
		chunk.Usage = usage(&s.usage)
	}
	return chunk, nil
}
