package promptlog

import (
	"encoding/json"
	"slices"
	"strings"

	"google.golang.org/grpc"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/promptlog"
)

// stream is a streamed chat call that may be logged: its request decides
// (RecvMsg), and when it is logged, its sent chunks make the answer.
type stream struct {
	grpc.ServerStream
	c        *Config
	st       *call.State
	received bool
	// w and e are set when the call is logged.
	w *promptlog.Writer
	e *promptlog.Entry
	// sent is set once a chunk reached the client.
	sent bool
	acc  answer
}

// RecvMsg implements [grpc.ServerStream.RecvMsg]: the first request
// received, whose policies the governance interceptor has resolved by
// now, decides whether the call is logged, and its messages are encoded
// then, as the service receives them.
func (s *stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.received {
		return nil
	}
	s.received = true
	if w := s.c.writer(s.st); w != nil {
		if s.e = newEntry(s.st, m); s.e != nil {
			s.w = w
		}
	}
	return nil
}

// SendMsg implements [grpc.ServerStream.SendMsg]: a logged call's chunk
// is added to the answer once it was sent. What it holds is read before
// it is sent, since the receiver may own it afterwards.
func (s *stream) SendMsg(m any) error {
	c, ok := m.(*flexwayv1.ChatCompletionChunk)
	if s.e == nil || !ok {
		return s.ServerStream.SendMsg(m)
	}
	mark := len(s.acc.pending)
	for _, ch := range c.GetChoices() {
		d := ch.GetDelta()
		s.acc.pending = append(s.acc.pending, delta{
			index: ch.GetIndex(), content: deltaText(d), refusal: rawString(d.GetExtraFields()["refusal"]),
			toolCalls: d.GetExtraFields()["tool_calls"],
		})
	}
	err := s.ServerStream.SendMsg(m)
	if err != nil {
		s.acc.pending = s.acc.pending[:mark]
		return err
	}
	s.sent = true
	s.acc.commit()
	return nil
}

// deltaText is a delta's content text: its string, or its text parts
// joined.
func deltaText(d *flexwayv1.ChatMessage) string {
	if parts := d.GetParts(); parts != nil {
		var b strings.Builder
		for _, p := range parts.GetParts() {
			b.WriteString(p.GetText())
		}
		return b.String()
	}
	return d.GetText()
}

// rawString decodes a raw JSON string ("" for anything else).
func rawString(raw string) string {
	if raw == "" || raw[0] != '"' {
		return ""
	}
	var s string
	_ = json.Unmarshal([]byte(raw), &s)
	return s
}

// delta is what one chunk's choice adds to the answer.
type delta struct {
	index            int32
	content, refusal string
	toolCalls        string // raw JSON, "" when none
}

// answer accumulates a stream's answer per choice.
type answer struct {
	pending []delta // read from the chunk being sent
	choices []*choice
}

// choice is one choice's answer so far.
type choice struct {
	index            int32
	content, refusal strings.Builder
	toolCalls        []*toolCall
}

// toolCall is one tool call accumulated: id, type and name as first
// given, arguments concatenated.
type toolCall struct {
	index    int
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// toolCallDelta is one element of a delta's tool_calls.
type toolCallDelta struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// commit adds the pending deltas, sent, to the choices.
func (a *answer) commit() {
	for _, d := range a.pending {
		ch := a.choice(d.index)
		ch.content.WriteString(d.content)
		ch.refusal.WriteString(d.refusal)
		if emptyRaw(d.toolCalls) {
			continue
		}
		var tcs []toolCallDelta
		if json.Unmarshal([]byte(d.toolCalls), &tcs) != nil {
			continue
		}
		for i, tc := range tcs {
			at := i
			if tc.Index != nil {
				at = *tc.Index
			}
			t := ch.toolCall(at)
			if t.ID == "" {
				t.ID = tc.ID
			}
			if t.Type == "" {
				t.Type = tc.Type
			}
			if t.Function.Name == "" {
				t.Function.Name = tc.Function.Name
			}
			t.Function.Arguments += tc.Function.Arguments
		}
	}
	a.pending = a.pending[:0]
}

func (a *answer) choice(index int32) *choice {
	return findOrAdd(&a.choices, func(c *choice) bool { return c.index == index }, func() *choice { return &choice{index: index} })
}

func (c *choice) toolCall(index int) *toolCall {
	return findOrAdd(&c.toolCalls, func(t *toolCall) bool { return t.index == index }, func() *toolCall { return &toolCall{index: index} })
}

// findOrAdd returns the first element of *list that is, appending a new
// one when none is (the lists are a stream's few choices and tool calls).
func findOrAdd[T any](list *[]*T, is func(*T) bool, add func() *T) *T {
	for _, v := range *list {
		if is(v) {
			return v
		}
	}
	v := add()
	*list = append(*list, v)
	return v
}

// answer sets e's answer: one text-only choice as its text, anything
// else as an array of the choices' messages in index order.
func (a *answer) answer(e *promptlog.Entry) {
	if len(a.choices) == 0 {
		return
	}
	if c := a.choices[0]; len(a.choices) == 1 && c.refusal.Len() == 0 && len(c.toolCalls) == 0 {
		e.Answer = c.content.String()
		return
	}
	slices.SortFunc(a.choices, func(x, y *choice) int { return int(x.index) - int(y.index) })
	type message struct {
		Role      string      `json:"role"`
		Content   *string     `json:"content"`
		Refusal   string      `json:"refusal,omitempty"`
		ToolCalls []*toolCall `json:"tool_calls,omitempty"`
	}
	msgs := make([]message, len(a.choices))
	for i, c := range a.choices {
		msgs[i] = message{Role: "assistant", Refusal: c.refusal.String(), ToolCalls: c.toolCalls}
		if c.content.Len() > 0 || len(c.toolCalls) == 0 {
			s := c.content.String()
			msgs[i].Content = &s
		}
		slices.SortFunc(c.toolCalls, func(x, y *toolCall) int { return x.index - y.index })
	}
	b, err := json.Marshal(msgs)
	if err == nil {
		e.AnswerJSON = b
	}
}
