package gemini

import (
	"bytes"
	"encoding/json"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
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
// An event with a finishReason and no parts is still read.
type Stream struct {
	call    Call
	id      string
	model   string
	resp    gResponse
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
	if string(event) == "error" || isErrorEnvelope(data) {
		return nil, faults.New(faults.UpstreamError, "the Gemini upstream reported an error in its stream")
	}
	if len(data) == 0 {
		return nil, nil
	}
	// encoding/json decodes into a reused slice element without zeroing
	// it first: a field an earlier event set would leak into this one.
	clear(s.resp.Candidates[:cap(s.resp.Candidates)])
	s.resp = gResponse{Candidates: s.resp.Candidates[:0]}
	if err := json.Unmarshal(data, &s.resp); err != nil {
		return nil, faults.Wrap(faults.UpstreamError, err, "the Gemini upstream sent an unreadable stream event")
	}
	if s.id == "" {
		s.id = s.resp.ResponseID
		if s.id == "" {
			s.id = "chatcmpl-" + ToolCallID("")[len("call_"):]
		}
	}
	if s.resp.ModelVersion != "" {
		s.model = s.resp.ModelVersion
	}
	if u := s.resp.UsageMetadata; u != nil {
		s.usage, s.hasUse = *u, true
	}
	if fb := s.resp.PromptFeedback; fb != nil && fb.BlockReason != "" && len(s.resp.Candidates) == 0 {
		s.blocked = true
	}
	var chunk *flexwayv1.ChatCompletionChunk
	for i := range s.resp.Candidates {
		c := &s.resp.Candidates[i]
		if c.Index < 0 || c.Index >= maxStreamCandidates {
			return nil, faults.New(faults.UpstreamError, "the Gemini upstream sent a candidate index out of range")
		}
		for int(c.Index) >= len(s.cands) {
			s.cands = append(s.cands, candidateState{})
		}
		st := &s.cands[c.Index]
		if c.FinishReason != "" {
			st.finish = c.FinishReason
		}
		delta := s.delta(st, c)
		if delta == nil {
			continue
		}
		if chunk == nil {
			chunk = s.newChunk()
		}
		chunk.Choices = append(chunk.Choices, &flexwayv1.ChatCompletionChunkChoice{Index: c.Index, Delta: delta})
	}
	return chunk, nil
}

// delta is the chunk delta of one candidate's parts, nil when they hold
// nothing.
func (s *Stream) delta(st *candidateState, c *gCandidate) *flexwayv1.ChatMessage {
	var text, thought string
	s.scratch = s.scratch[:0]
	hasCalls := false
	for _, p := range c.Content.Parts {
		switch {
		case p.FunctionCall != nil:
			if !hasCalls {
				s.scratch = append(s.scratch, '[')
			} else {
				s.scratch = append(s.scratch, ',')
			}
			s.scratch = appendToolCall(s.scratch, st.calls, p)
			hasCalls = true
			st.calls++
		case p.Thought:
			thought += p.Text
		default:
			text += p.Text
		}
	}
	if text == "" && thought == "" && !hasCalls {
		return nil
	}
	d := &flexwayv1.ChatMessage{}
	if !st.started {
		st.started = true
		d.Role = "assistant"
	}
	if text != "" {
		d.Content = &flexwayv1.ChatMessage_Text{Text: text}
	}
	if thought != "" {
		setExtra(&d.ExtraFields, "reasoning_content", string(jsonstring.Append(nil, thought)))
	}
	if hasCalls {
		setExtra(&d.ExtraFields, "tool_calls", string(append(s.scratch, ']')))
	}
	return d
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

// isErrorEnvelope reports whether data is Google's error envelope: a JSON
// object with a non-null top-level "error".
func isErrorEnvelope(data []byte) bool {
	if len(data) == 0 || data[0] != '{' || !bytes.Contains(data, []byte(`"error"`)) {
		return false
	}
	var probe struct {
		Error json.RawMessage `json:"error"`
	}
	return json.Unmarshal(data, &probe) == nil && len(probe.Error) > 0 && string(probe.Error) != "null"
}
