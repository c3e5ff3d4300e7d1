// Package replay turns a stored answer of the response cache (issue 18)
// into the caller's mode: a hit is answered "in the caller's mode,
// whichever mode filled the entry". A streaming caller of an entry a JSON
// call filled gets [Chunks]: per choice, one chunk with the role, the
// content and the tool calls (each given its index, as OpenAI's deltas
// carry them), then one with the finish_reason; a JSON caller of an entry
// a stream filled gets [Completion]: the deltas concatenated per choice
// (content, refusal, tool calls by index with their arguments joined),
// the last model, system_fingerprint and usage seen.
//
// Only what both shapes carry is translated: a message or delta with any
// other member (audio, annotations, reasoning, logprobs: whatever a
// model adds that has no fixed counterpart in the other mode) makes the
// entry not replayable in that mode (ok false), which the cache treats as
// a miss; JSON null members and empty strings carry nothing and are
// dropped. Shapes are OpenAI's
// (https://platform.openai.com/docs/api-reference/chat/object and
// .../chat/streaming).
package replay

import (
	"encoding/json"
	"slices"
	"strings"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// toolCall is one entry of a message's tool_calls, and of a delta's with
// Index.
type toolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// nullish reports whether a member's raw JSON carries nothing.
func nullish(raw string) bool {
	raw = strings.TrimSpace(raw)
	return raw == "null" || raw == `""` || raw == "[]" || raw == ""
}

// Chunks is the stream of c: for each choice, a chunk with its message's
// role, content, refusal and tool calls, then a chunk with its
// finish_reason; id, created, model and system_fingerprint as in c. No
// usage chunk: the caller adds one when the request asked for it. ok is
// false when a message carries something a delta cannot (parts, audio,
// annotations, any member other than tool_calls and refusal).
func Chunks(c *flexwayv1.ChatCompletion) (chunks []*flexwayv1.ChatCompletionChunk, ok bool) {
	fp, hasFP := c.GetExtraFields()["system_fingerprint"]
	chunk := func(choice *flexwayv1.ChatCompletionChunkChoice) *flexwayv1.ChatCompletionChunk {
		ch := &flexwayv1.ChatCompletionChunk{Id: c.GetId(), Object: "chat.completion.chunk", Created: c.GetCreated(), Model: c.GetModel(),
			Choices: []*flexwayv1.ChatCompletionChunkChoice{choice}}
		if hasFP {
			ch.ExtraFields = map[string]string{"system_fingerprint": fp}
		}
		return ch
	}
	for _, choice := range c.GetChoices() {
		for _, v := range choice.GetExtraFields() {
			if !nullish(v) {
				return nil, false // logprobs and the like
			}
		}
		m := choice.GetMessage()
		d := &flexwayv1.ChatMessage{Role: m.GetRole()}
		if d.Role == "" {
			d.Role = "assistant"
		}
		switch cont := m.GetContent().(type) {
		case *flexwayv1.ChatMessage_Text:
			d.Content = &flexwayv1.ChatMessage_Text{Text: cont.Text}
		case nil, *flexwayv1.ChatMessage_Null:
		default:
			return nil, false
		}
		for k, v := range m.GetExtraFields() {
			switch {
			case nullish(v):
			case k == "refusal":
				setExtra(d, k, v)
			case k == "tool_calls":
				var calls []toolCall
				if err := json.Unmarshal([]byte(v), &calls); err != nil {
					return nil, false
				}
				for i := range calls {
					calls[i].Index = &i
				}
				b, _ := json.Marshal(calls)
				setExtra(d, k, string(b))
			default:
				return nil, false
			}
		}
		chunks = append(chunks, chunk(&flexwayv1.ChatCompletionChunkChoice{Index: choice.GetIndex(), Delta: d}))
		end := &flexwayv1.ChatCompletionChunkChoice{Index: choice.GetIndex(), Delta: &flexwayv1.ChatMessage{}}
		if choice.FinishReason != nil {
			r := choice.GetFinishReason()
			end.FinishReason = &r
		}
		chunks = append(chunks, chunk(end))
	}
	return chunks, len(chunks) > 0
}

func setExtra(m *flexwayv1.ChatMessage, k, v string) {
	if m.ExtraFields == nil {
		m.ExtraFields = map[string]string{}
	}
	m.ExtraFields[k] = v
}

// assembling is one choice of [Completion] being put together.
type assembling struct {
	index   int32
	role    string
	content strings.Builder
	refusal strings.Builder
	calls   []toolCall
	finish  *string
	text    bool // some content was a string
}

// Completion is the JSON answer the stream chunks make: per choice index
// (in the order first seen), the content and refusal concatenated, the
// tool calls by their index with the arguments joined and the first id,
// type and name, the last finish_reason; the last model, created and
// system_fingerprint of the chunks, the first id, and the usage of the
// usage chunk. ok is false when a chunk carries something the answer
// cannot (logprobs, reasoning, audio, parts, any other member), or a
// tool call delta that does not decode.
func Completion(chunks []*flexwayv1.ChatCompletionChunk) (c *flexwayv1.ChatCompletion, ok bool) {
	c = &flexwayv1.ChatCompletion{Object: "chat.completion"}
	var choices []*assembling
	for _, ch := range chunks {
		if c.Id == "" {
			c.Id = ch.GetId()
		}
		if ch.GetModel() != "" {
			c.Model = ch.GetModel()
		}
		if ch.GetCreated() != 0 {
			c.Created = ch.GetCreated()
		}
		if u := ch.GetUsage(); u != nil {
			c.Usage = u
		}
		for k, v := range ch.GetExtraFields() {
			switch {
			case k == "system_fingerprint" || k == "service_tier":
				if !nullish(v) {
					setCompletionExtra(c, k, v)
				}
			case k == "usage" || nullish(v):
			default:
				return nil, false
			}
		}
		for _, choice := range ch.GetChoices() {
			i := slices.IndexFunc(choices, func(a *assembling) bool { return a.index == choice.GetIndex() })
			if i < 0 {
				i = len(choices)
				choices = append(choices, &assembling{index: choice.GetIndex()})
			}
			a := choices[i]
			for _, v := range choice.GetExtraFields() {
				if !nullish(v) {
					return nil, false
				}
			}
			if choice.FinishReason != nil {
				r := choice.GetFinishReason()
				a.finish = &r
			}
			d := choice.GetDelta()
			if d.GetRole() != "" {
				a.role = d.GetRole()
			}
			switch cont := d.GetContent().(type) {
			case *flexwayv1.ChatMessage_Text:
				a.content.WriteString(cont.Text)
				a.text = true
			case nil, *flexwayv1.ChatMessage_Null:
			default:
				return nil, false
			}
			for k, v := range d.GetExtraFields() {
				switch {
				case nullish(v):
				case k == "refusal":
					var s string
					if json.Unmarshal([]byte(v), &s) != nil {
						return nil, false
					}
					a.refusal.WriteString(s)
				case k == "tool_calls":
					var calls []toolCall
					if json.Unmarshal([]byte(v), &calls) != nil {
						return nil, false
					}
					for _, tc := range calls {
						if tc.Index == nil {
							return nil, false
						}
						j := slices.IndexFunc(a.calls, func(x toolCall) bool { return *x.Index == *tc.Index })
						if j < 0 {
							a.calls = append(a.calls, tc)
							continue
						}
						x := &a.calls[j]
						x.ID = cmpOr(x.ID, tc.ID)
						x.Type = cmpOr(x.Type, tc.Type)
						x.Function.Name = cmpOr(x.Function.Name, tc.Function.Name)
						x.Function.Arguments += tc.Function.Arguments
					}
				default:
					return nil, false
				}
			}
		}
	}
	if len(choices) == 0 {
		return nil, false
	}
	for _, a := range choices {
		m := &flexwayv1.ChatMessage{Role: cmpOr(a.role, "assistant")}
		if a.text || len(a.calls) == 0 {
			m.Content = &flexwayv1.ChatMessage_Text{Text: a.content.String()}
		} else {
			m.Content = &flexwayv1.ChatMessage_Null{}
		}
		if a.refusal.Len() > 0 {
			b, _ := json.Marshal(a.refusal.String())
			setExtra(m, "refusal", string(b))
		}
		if len(a.calls) > 0 {
			for i := range a.calls {
				a.calls[i].Index = nil
			}
			b, _ := json.Marshal(a.calls)
			setExtra(m, "tool_calls", string(b))
		}
		c.Choices = append(c.Choices, &flexwayv1.ChatCompletionChoice{Index: a.index, Message: m, FinishReason: a.finish})
	}
	return c, true
}

func setCompletionExtra(c *flexwayv1.ChatCompletion, k, v string) {
	if c.ExtraFields == nil {
		c.ExtraFields = map[string]string{}
	}
	c.ExtraFields[k] = v
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
