package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/jsonstring"
)

// Usage is an answer's token counts as the ledger needs them, in tokens.
// Input counts the uncached input only (Anthropic's input_tokens); every
// input token is Input + CacheRead + CacheWrite.
type Usage struct {
	Input      int64 // input_tokens: input neither read from nor written to the cache
	Output     int64 // output_tokens
	CacheRead  int64 // cache_read_input_tokens
	CacheWrite int64 // cache_creation_input_tokens
	// Reported is set once an answer carried input_tokens or
	// output_tokens: without it the usage is unknown (the gateway
	// estimates it), never zero.
	Reported bool
}

// wireUsage is a Message's usage; a nil field was absent.
type wireUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

// merge sets every field present in w: the last value wins, never a sum.
func (u *Usage) merge(w *wireUsage) {
	if w == nil {
		return
	}
	set := func(dst *int64, src *int64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&u.Input, w.InputTokens)
	set(&u.Output, w.OutputTokens)
	set(&u.CacheRead, w.CacheReadInputTokens)
	set(&u.CacheWrite, w.CacheCreationInputTokens)
	if w.InputTokens != nil || w.OutputTokens != nil {
		u.Reported = true
	}
}

// Canonical returns u as the client sees it: prompt_tokens counts every
// input token (input + cache read + cache write), completion_tokens the
// output, prompt_tokens_details.cached_tokens the cache reads and, when
// there were any, cache_creation_input_tokens (Anthropic's own name, as
// LiteLLM and others relay it in OpenAI's usage) the cache writes: the
// core prices both tiers from these two fields. Counts are clamped
// ([backends.ClampUsage]): none negative, none wrapped. Nil when the
// usage was not reported ([Usage.Reported]).
func (u Usage) Canonical() *flexwayv1.Usage {
	if !u.Reported {
		return nil
	}
	write := max(u.CacheWrite, 0)
	prompt := backends.AddTokens(backends.AddTokens(u.Input, u.CacheRead), write)
	prompt, completion, total, read := backends.ClampUsage(prompt, u.Output, 0, u.CacheRead)
	write = min(write, prompt-read)
	extra := map[string]string{"prompt_tokens_details": `{"cached_tokens":` + strconv.FormatInt(read, 10) + `}`}
	if write > 0 {
		extra["cache_creation_input_tokens"] = strconv.FormatInt(write, 10)
	}
	return &flexwayv1.Usage{
		PromptTokens:     prompt,
		CompletionTokens: completion,
		TotalTokens:      total,
		ExtraFields:      extra,
	}
}

// wireContent is a response content block.
type wireContent struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Thinking string          `json:"thinking"`
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
}

// wireMessageAnswer is a Message object
// (https://docs.anthropic.com/en/api/messages, "Response").
type wireMessageAnswer struct {
	ID         string        `json:"id"`
	Type       string        `json:"type"`
	Role       string        `json:"role"`
	Model      string        `json:"model"`
	Content    []wireContent `json:"content"`
	StopReason string        `json:"stop_reason"`
	Usage      *wireUsage    `json:"usage"`
}

// Decode reads a Message answer (the 2xx body of POST /v1/messages) as a
// chat completion with one choice created at created (Unix seconds): text
// blocks joined as the content (null when there is none), thinking blocks
// joined as reasoning_content, tool_use blocks as tool_calls (input as the
// arguments string), stop_reason as finish_reason per [FinishReason], and
// usage per [Usage.Canonical]; the typed usage is returned for the ledger.
// A body that is not a Message (garbage, an error object) is an
// upstream_error.
func Decode(body []byte, created int64) (*flexwayv1.ChatCompletion, Usage, error) {
	var m wireMessageAnswer
	var err error
	if !scanAnswer(body, &m) {
		m = wireMessageAnswer{}
		err = json.Unmarshal(body, &m)
	}
	if err != nil || m.Type != "message" {
		if err == nil {
			err = fmt.Errorf("answer type %q, not message", m.Type)
		}
		return nil, Usage{}, faults.Wrap(faults.UpstreamError, err, "the upstream sent an unreadable answer")
	}
	// One text or thinking block, the usual answer, is used as it is;
	// several are joined. The buffers start on the stack.
	var text, thinking joined
	var callsBuf [512]byte
	calls := callsBuf[:0]
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			text.add(b.Text)
		case "thinking":
			thinking.add(b.Thinking)
		case "tool_use":
			input := b.Input
			if len(input) == 0 {
				input = json.RawMessage("{}")
			}
			if len(calls) > 0 {
				calls = append(calls, ',')
			} else {
				calls = append(calls, '[')
			}
			calls = appendToolCall(calls, -1, b.ID, b.Name, input)
		}
	}
	msg := &flexwayv1.ChatMessage{Role: "assistant"}
	if text.n > 0 {
		msg.Content = &flexwayv1.ChatMessage_Text{Text: text.String()}
	} else {
		msg.Content = &flexwayv1.ChatMessage_Null{}
	}
	if len(calls) > 0 {
		setExtra(&msg.ExtraFields, "tool_calls", string(append(calls, ']')))
	}
	if t := thinking.String(); t != "" {
		var buf [256]byte
		setExtra(&msg.ExtraFields, "reasoning_content", string(appendJSONString(buf[:0], t)))
	}
	finish := FinishReason(m.StopReason)
	var u Usage
	u.merge(m.Usage)
	return &flexwayv1.ChatCompletion{
		Id:      m.ID,
		Object:  "chat.completion",
		Created: created,
		Model:   m.Model,
		Choices: []*flexwayv1.ChatCompletionChoice{{Index: 0, Message: msg, FinishReason: &finish}},
		Usage:   u.Canonical(),
	}, u, nil
}

// joined is the concatenation of the strings added, copied only when
// there are several.
type joined struct {
	n     int
	first string
	buf   []byte
}

func (j *joined) add(s string) {
	switch j.n {
	case 0:
		j.first = s
	case 1:
		j.buf = append(append(j.buf, j.first...), s...)
	default:
		j.buf = append(j.buf, s...)
	}
	j.n++
}

// String returns the concatenation.
func (j *joined) String() string {
	if j.n <= 1 {
		return j.first
	}
	return string(j.buf)
}

func setExtra(m *map[string]string, k, v string) {
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[k] = v
}

// appendToolCall writes one OpenAI tool call: with its index when index
// is not negative (a stream fragment), with arguments being args as a
// JSON string.
func appendToolCall(dst []byte, index int, id, name string, args []byte) []byte {
	dst = append(dst, '{')
	if index >= 0 {
		dst = append(dst, `"index":`...)
		dst = strconv.AppendInt(dst, int64(index), 10)
		dst = append(dst, ',')
	}
	dst = append(dst, `"id":`...)
	dst = appendJSONString(dst, id)
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = appendJSONString(dst, name)
	dst = append(dst, `,"arguments":`...)
	dst = appendJSONString(dst, string(args))
	return append(dst, "}}"...)
}

// unknownStops logs once each unknown stop_reason.
var unknownStops sync.Map

// logUnknown is where an unknown stop_reason is reported, once per value
// (cut to 64 bytes), as a warning of the default slog logger; a variable
// so that tests can observe it.
var logUnknown = func(kind, value string) {
	slog.Warn("anthropic backend: unknown value read as stop", "field", kind, "value", value)
}

// FinishReason maps an Anthropic stop_reason to OpenAI's finish_reason:
// end_turn, stop_sequence and pause_turn → stop, max_tokens → length,
// tool_use → tool_calls, refusal → content_filter; none ("") → stop;
// any other value → stop, reported once per value.
func FinishReason(stop string) string {
	switch stop {
	case "end_turn", "stop_sequence", "pause_turn", "":
		return "stop"
	case "max_tokens":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	v := stop
	if len(v) > 64 {
		v = v[:64]
	}
	if _, seen := unknownStops.LoadOrStore(v, true); !seen {
		logUnknown("stop_reason", v)
	}
	return "stop"
}

// wireError is an error answer: {"type":"error","error":{"type","message"}}
// (https://docs.anthropic.com/en/api/errors).
type wireError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// openAIErrorTypes maps Anthropic's error types to OpenAI's for a relayed
// 4xx.
var openAIErrorTypes = map[string]string{
	"invalid_request_error": "invalid_request_error",
	"not_found_error":       "invalid_request_error",
	"request_too_large":     "invalid_request_error",
	"rate_limit_error":      "rate_limit_error",
	"permission_error":      "permission_error",
	"authentication_error":  "authentication_error",
}

// errorStatus is the HTTP status Anthropic documents for each error type,
// used for an error event in a stream.
var errorStatus = map[string]int{
	"invalid_request_error": 400,
	"authentication_error":  401,
	"permission_error":      403,
	"not_found_error":       404,
	"request_too_large":     413,
	"rate_limit_error":      429,
	"api_error":             500,
	"overloaded_error":      529,
}

// DecodeError maps a non-2xx answer of POST /v1/messages, status being
// its HTTP status, retryAfter its Retry-After in seconds (0 when none) and
// body its bytes, to a *faults.Error:
//
//   - 401 or 403, or an authentication_error / permission_error type: the
//     upstream refusing the gateway's own credentials, an upstream_error
//     (502) wrapping [backends.ErrUpstreamAuth], its message naming
//     neither the backend nor the upstream's text;
//   - 429 or rate_limit_error: the status relayed (upstream_status 429)
//     with Retry-After, in OpenAI's envelope;
//   - 529, overloaded_error, api_error and every 5xx or other status: an
//     upstream_error (502) the fallback rules act on, Retry-After kept;
//     the body, maybe garbage or HTML, is never kept;
//   - any other 4xx: upstream_status with the status kept and the
//     upstream's message in OpenAI's envelope
//     {"error":{"message","type","param":null,"code"}}, the type mapped
//     (invalid_request_error, not_found_error, request_too_large →
//     invalid_request_error) and code being Anthropic's type; a 4xx
//     body that is not Anthropic's error object keeps its status with a
//     message saying only the status.
func DecodeError(status int, retryAfter int64, body []byte) *faults.Error {
	var we wireError
	parsed := json.Unmarshal(bytes.TrimSpace(body), &we) == nil && we.Type == "error" && we.Error.Type != ""
	etype := ""
	if parsed {
		etype = we.Error.Type
	}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden ||
		etype == "authentication_error" || etype == "permission_error":
		return &faults.Error{
			Reason:  faults.UpstreamError,
			Message: "the backend refused the gateway's credentials",
			Err:     fmt.Errorf("anthropic upstream status %d, error type %q: %w", status, cut(etype), backends.ErrUpstreamAuth),
		}
	case status == http.StatusTooManyRequests || etype == "rate_limit_error":
		if status < 400 || status > 499 {
			status = http.StatusTooManyRequests
		}
		return relayed(status, retryAfter, etype, we.Error.Message, parsed)
	case status < 400 || status > 499 || etype == "overloaded_error" || etype == "api_error":
		return &faults.Error{
			Reason:            faults.UpstreamError,
			Message:           fmt.Sprintf("upstream answered %d", status),
			RetryAfterSeconds: retryAfter,
			Err:               fmt.Errorf("anthropic upstream status %d, error type %q, %d body bytes", status, cut(etype), len(body)),
		}
	}
	return relayed(status, retryAfter, etype, we.Error.Message, parsed)
}

// relayed is an upstream 4xx relayed in OpenAI's envelope.
func relayed(status int, retryAfter int64, etype, message string, parsed bool) *faults.Error {
	otype, ok := openAIErrorTypes[etype]
	if !ok {
		otype = "invalid_request_error"
	}
	if !parsed || message == "" {
		message = fmt.Sprintf("upstream answered %d", status)
	}
	env := []byte(`{"error":{"message":`)
	env = appendJSONString(env, message)
	env = append(env, `,"type":`...)
	env = appendJSONString(env, otype)
	env = append(env, `,"param":null,"code":`...)
	if etype == "" {
		env = append(env, "null"...)
	} else {
		env = appendJSONString(env, etype)
	}
	env = append(env, "}}"...)
	return &faults.Error{
		Reason:              faults.UpstreamStatus,
		Message:             fmt.Sprintf("upstream answered %d", status),
		RetryAfterSeconds:   retryAfter,
		UpstreamHTTPStatus:  status,
		UpstreamContentType: "application/json",
		UpstreamBody:        env,
	}
}

// cut bounds a logged upstream string to 64 bytes.
func cut(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

// appendJSONString writes s as a JSON string (per [jsonstring.Append]).
func appendJSONString(dst []byte, s string) []byte { return jsonstring.Append(dst, s) }
