package gemini

import (
	"bytes"
	"strconv"
	"sync"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/jsonstring"
	"google.golang.org/protobuf/types/known/structpb"
)

// Call is what a decoder writes into every answer that the wire does not
// say.
type Call struct {
	// Model is the model named in the answer when the wire names none
	// (Gemini's modelVersion wins when present).
	Model string
	// Created is the answer's creation time, in Unix seconds.
	Created int64
}

// FinishReason maps a Gemini Candidate.FinishReason
// (https://ai.google.dev/api/generate-content#FinishReason) to OpenAI's:
// STOP → stop, MAX_TOKENS → length, SAFETY, RECITATION, BLOCKLIST,
// PROHIBITED_CONTENT, SPII and IMAGE_SAFETY → content_filter, anything
// else (OTHER, LANGUAGE, MALFORMED_FUNCTION_CALL, unknown values) → stop.
// A candidate holding a functionCall finishes with tool_calls instead,
// whatever its finishReason.
func FinishReason(reason string, hasCall bool) string {
	if hasCall {
		return "tool_calls"
	}
	switch reason {
	case "MAX_TOKENS":
		return "length"
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY":
		return "content_filter"
	}
	return "stop"
}

// Decode reads a generateContent answer body
// (https://ai.google.dev/api/generate-content#generatecontentresponse) as a
// chat completion: one choice per candidate, text parts joined as the
// content, thought parts joined as reasoning_content, functionCall parts as
// tool_calls (ids from [ToolCallID], carrying any thoughtSignature), the
// finish reason per [FinishReason], usage as usage() maps it. A 200 with
// promptFeedback.blockReason and no candidates is one choice with null
// content and finish_reason content_filter.
//
// The body is read by the stream's scanner (a generateContent answer and a
// stream event have the same shape).
//
// Errors: a *faults.Error with reason upstream_error (502) when the body
// is not a generateContent answer (no candidate and no blockReason, an
// error envelope, invalid JSON, a candidate index over 127).
func Decode(body []byte, call Call) (*flexwayv1.ChatCompletion, error) {
	e := scans.Get().(*eventScan)
	defer putScan(e)
	if err := e.scan(bytes.TrimSpace(body)); err != nil || e.hasError {
		return nil, faults.Wrap(faults.UpstreamError, err, "the Gemini upstream sent an unreadable answer")
	}
	out := &flexwayv1.ChatCompletion{Id: string(e.responseID), Object: "chat.completion", Created: call.Created, Model: call.Model}
	if len(e.model) > 0 {
		out.Model = string(e.model)
	}
	if out.Id == "" {
		out.Id = "chatcmpl-" + ToolCallID("")[len("call_"):]
	}
	if e.ncands == 0 {
		if len(e.blockReason) == 0 {
			return nil, faults.New(faults.UpstreamError, "the Gemini upstream answered no candidate")
		}
		fr := "content_filter"
		out.Choices = []*flexwayv1.ChatCompletionChoice{{
			Message:      &flexwayv1.ChatMessage{Role: "assistant", Content: &flexwayv1.ChatMessage_Null{Null: structpb.NullValue_NULL_VALUE}},
			FinishReason: &fr,
		}}
	}
	for _, c := range e.cands[:e.ncands] {
		if c.index < 0 || c.index >= maxStreamCandidates {
			return nil, faults.New(faults.UpstreamError, "the Gemini upstream sent a candidate index out of range")
		}
		msg := &flexwayv1.ChatMessage{Role: "assistant"}
		if len(c.text) > 0 || len(c.calls) == 0 {
			msg.Content = &flexwayv1.ChatMessage_Text{Text: string(c.text)}
		} else {
			msg.Content = &flexwayv1.ChatMessage_Null{Null: structpb.NullValue_NULL_VALUE}
		}
		if len(c.thought) > 0 {
			setExtra(&msg.ExtraFields, "reasoning_content", string(jsonstring.Append(nil, string(c.thought))))
		}
		if len(c.calls) > 0 {
			calls := []byte{'['}
			for j, call := range c.calls {
				if j > 0 {
					calls = append(calls, ',')
				}
				calls = appendToolCall(calls, -1, call.name, call.args, call.sig)
			}
			setExtra(&msg.ExtraFields, "tool_calls", string(append(calls, ']')))
		}
		fr := FinishReason(string(c.finish), len(c.calls) > 0)
		out.Choices = append(out.Choices, &flexwayv1.ChatCompletionChoice{Index: int32(c.index), Message: msg, FinishReason: &fr})
	}
	if e.hasUsage {
		out.Usage = usage(&e.usage)
	}
	return out, nil
}

// scans are the scanners of Decode, kept between answers for their
// buffers (the answer's strings are copied out of them).
var scans = sync.Pool{New: func() any { return new(eventScan) }}

// putScan returns e to scans unless an answer grew it past 64 KiB.
func putScan(e *eventScan) {
	if cap(e.strs) <= 64<<10 {
		scans.Put(e)
	}
}

func setExtra(m *map[string]string, k, v string) {
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[k] = v
}

// appendToolCall appends one OpenAI tool call object for a functionCall
// (its name, its args as raw JSON, the thoughtSignature of its part) to
// dst, with "index" when index >= 0 (a stream delta).
func appendToolCall[S string | []byte](dst []byte, index int, name S, args []byte, sig S) []byte {
	dst = append(dst, '{')
	if index >= 0 {
		dst = append(dst, `"index":`...)
		dst = strconv.AppendInt(dst, int64(index), 10)
		dst = append(dst, ',')
	}
	dst = append(dst, `"id":`...)
	dst = jsonstring.Append(dst, ToolCallID(string(sig)))
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = jsonstring.Append(dst, string(name))
	dst = append(dst, `,"arguments":`...)
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	dst = jsonstring.Append(dst, string(args))
	return append(dst, "}}"...)
}

// usage maps Gemini's usageMetadata
// (https://ai.google.dev/api/generate-content#UsageMetadata) to OpenAI's
// usage: prompt_tokens = promptTokenCount (which already includes
// cachedContentTokenCount), completion_tokens = candidatesTokenCount +
// thoughtsTokenCount (thoughts are billed as output), total_tokens =
// the larger of totalTokenCount and their sum; prompt_tokens_details.cached_tokens =
// cachedContentTokenCount and completion_tokens_details.reasoning_tokens =
// thoughtsTokenCount, each written when not zero; counts clamped as
// [backends.ClampUsage] says (cached never over prompt). Nil when m is nil.
func usage(m *gUsageMetadata) *flexwayv1.Usage {
	if m == nil {
		return nil
	}
	prompt, completion, total, cached := backends.ClampUsage(m.PromptTokenCount,
		backends.AddTokens(m.CandidatesTokenCount, m.ThoughtsTokenCount), m.TotalTokenCount, m.CachedContentTokenCount)
	u := &flexwayv1.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: total}
	if cached > 0 {
		u.ExtraFields = map[string]string{"prompt_tokens_details": `{"cached_tokens":` + strconv.FormatInt(cached, 10) + `}`}
	}
	if m.ThoughtsTokenCount > 0 {
		setExtra(&u.ExtraFields, "completion_tokens_details", `{"reasoning_tokens":`+strconv.FormatInt(m.ThoughtsTokenCount, 10)+`}`)
	}
	return u
}
