package main

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// This file is the Anthropic wire (--wire anthropic): POST /v1/messages as
// documented at https://docs.anthropic.com/en/api/messages and, for
// "stream": true, https://docs.anthropic.com/en/docs/build-with-claude/streaming.
// Shapes follow the recorded answers in server/backends/anthropic/testdata.

// anthropicRequest is the part of a Messages request the sample reads;
// other fields are accepted and ignored.
type anthropicRequest struct {
	Model         string             `json:"model"`
	MaxTokens     *int               `json:"max_tokens"`
	Messages      []anthropicMessage `json:"messages"`
	System        json.RawMessage    `json:"system"`
	Stream        bool               `json:"stream"`
	StopSequences []string           `json:"stop_sequences"`
	Temperature   *float64           `json:"temperature"`
	Tools         []struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	ToolChoice *struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
}

// anthropicMessage is one request message; Content is a string or an
// array of content blocks.
type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicInBlock is one request content block: text, image, tool_use or
// tool_result (whose content is a string or an array of blocks).
type anthropicInBlock struct {
	Type         string          `json:"type"`
	Text         string          `json:"text"`
	Content      json.RawMessage `json:"content"`
	CacheControl json.RawMessage `json:"cache_control"`
}

// anthropicMessageOut is a Message answer, its fields in the API's order.
type anthropicMessageOut struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []any          `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        anthropicUsage `json:"usage"`
}

// anthropicUsage is a Message's usage, in tokens (the sample's words).
// input_tokens excludes the cached tokens counted by the two cache fields.
type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

// anthropicText is a text content block.
type anthropicText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// anthropicToolUse is a tool_use content block.
type anthropicToolUse struct {
	Type  string         `json:"type"`
	ID    string         `json:"id"`
	Name  string         `json:"name"`
	Input map[string]any `json:"input"`
}

// anthropicErrorTypes maps a status to Anthropic's error type, per
// https://docs.anthropic.com/en/api/errors.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// writeAnthropicError writes status with Anthropic's error body,
// {"type":"error","error":{"type":...,"message":...},"request_id":...}.
func (h *handler) writeAnthropicError(w http.ResponseWriter, status int, message string) {
	body := struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
		RequestID string `json:"request_id"`
	}{Type: "error", RequestID: fmt.Sprintf("req_sample_%d", h.seq.Add(1))}
	body.Error.Type, body.Error.Message = anthropicErrorType(status), message
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, body)
}

// serveAnthropic checks the API key (when --require-key is set, see
// [anthropicKeyOK]) and
// anthropic-version, applies the header hooks and serves POST /v1/messages.
func (h *handler) serveAnthropic(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, message, _ string) { h.writeAnthropicError(w, status, message) }
	if k := h.opts.requireKey; k != "" && !anthropicKeyOK(r, k) {
		fail(http.StatusUnauthorized, "invalid x-api-key", "")
		return
	}
	if r.Header.Get("anthropic-version") == "" {
		fail(http.StatusBadRequest, "anthropic-version: header is required", "")
		return
	}
	if !headerHooks(r, fail) {
		return
	}
	if r.URL.Path != "/v1/messages" {
		fail(http.StatusNotFound, fmt.Sprintf("Not found: %s %s. This sample serves POST /v1/messages.", r.Method, r.URL.Path), "")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		fail(http.StatusMethodNotAllowed, fmt.Sprintf("Method %s is not allowed on /v1/messages; use POST.", r.Method), "")
		return
	}
	var req anthropicRequest
	if msg, status := readJSON(w, r, &req); msg != "" {
		fail(status, msg, "")
		return
	}
	if !wireModelHooks(r, req.Model, fail) {
		return
	}
	h.anthropicMessages(w, r, &req, fail)
}

// anthropicKeyOK reports whether r carries key as x-api-key or, as
// anthropic-sdk-go v2's option.WithAPIKey sends it, as a bearer token.
func anthropicKeyOK(r *http.Request, key string) bool {
	got := r.Header.Get("x-api-key")
	if got == "" {
		if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			got = strings.TrimSpace(token)
		}
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(key)) == 1
}

// readJSON reads r's JSON body into v. On failure it returns a message and
// the status to answer (400 or 413), for the wire's own error format.
func readJSON(w http.ResponseWriter, r *http.Request, v any) (string, int) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return fmt.Sprintf("Request body larger than %d bytes.", maxBodyBytes), http.StatusRequestEntityTooLarge
		}
		return "Could not read the request body.", http.StatusBadRequest
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Sprintf("The request body is not valid JSON: %v", err), http.StatusBadRequest
	}
	return "", 0
}

// anthropicMessages validates the request as the Messages API does and
// answers it, as JSON or as a stream.
func (h *handler) anthropicMessages(w http.ResponseWriter, r *http.Request, req *anthropicRequest, fail failFunc) {
	switch {
	case req.Model == "":
		fail(http.StatusBadRequest, "model: Field required", "")
		return
	case req.MaxTokens == nil:
		fail(http.StatusBadRequest, "max_tokens: Field required", "")
		return
	case *req.MaxTokens < 1:
		fail(http.StatusBadRequest, "max_tokens: Input should be greater than or equal to 1", "")
		return
	case req.Messages == nil:
		fail(http.StatusBadRequest, "messages: Field required", "")
		return
	case len(req.Messages) == 0:
		fail(http.StatusBadRequest, "messages: at least one message is required", "")
		return
	case req.Temperature != nil && (*req.Temperature < 0 || *req.Temperature > 1):
		fail(http.StatusBadRequest, "temperature: Input should be less than or equal to 1", "")
		return
	}
	var u anthropicUsage
	system, cached, err := anthropicContentText(req.System)
	if err != nil {
		fail(http.StatusBadRequest, "system: Input should be a valid string or a list of text blocks", "")
		return
	}
	// The sample plays a prompt cache: the system prompt is read from the
	// cache, blocks marked cache_control are written to it.
	u.CacheReadInputTokens = countWords(system) - cached
	u.CacheCreationInputTokens = cached
	lastUser, lastHasResult := "", false
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			fail(http.StatusBadRequest, fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i), "")
			return
		}
		text, cachedWords, err := anthropicContentText(m.Content)
		if err != nil {
			fail(http.StatusBadRequest, fmt.Sprintf("messages.%d.content: Input should be a valid string or a list of content blocks", i), "")
			return
		}
		u.InputTokens += countWords(text) - cachedWords + tokensPerMessage
		u.CacheCreationInputTokens += cachedWords
		if m.Role == "user" {
			lastUser, lastHasResult = text, bytes.Contains(m.Content, []byte(`"tool_result"`))
		}
	}

	model := h.resolveModel(req.Model)
	text, stop := answerText(wireAnswer(model, wireAnthropic, lastUser), req.MaxTokens, req.StopSequences)
	var tool *anthropicToolUse
	if stop.reason == "" && !lastHasResult {
		tools := make([]sampleTool, 0, len(req.Tools))
		for _, t := range req.Tools {
			tools = append(tools, sampleTool{name: t.Name, schema: t.InputSchema})
		}
		forced, anyTool := "", false
		if c := req.ToolChoice; c != nil {
			forced, anyTool = c.Name, c.Type == "any"
			if c.Type == "none" {
				tools = nil
			}
		}
		if t, ok := pickTool(tools, forced, anyTool, lastUser); ok {
			tool = &anthropicToolUse{Type: "tool_use", ID: fmt.Sprintf("toolu_sample_%d", h.seq.Add(1)), Name: t.name, Input: sampleArgs(t.schema, lastUser)}
			text += " Calling the tool " + t.name + "."
			stop.reason = "tool_use"
		}
	}
	if stop.reason == "" {
		stop.reason = "end_turn"
	}
	u.OutputTokens = countWords(text)
	if tool != nil {
		u.OutputTokens += 1 + len(tool.Input)
	}
	msg := anthropicMessageOut{
		ID: fmt.Sprintf("msg_sample_%d", h.seq.Add(1)), Type: "message", Role: "assistant", Model: model,
		Content: []any{anthropicText{Type: "text", Text: text}}, Usage: u,
	}
	if tool != nil {
		msg.Content = append(msg.Content, *tool)
	}
	if req.Stream {
		h.streamAnthropic(w, r, msg, text, tool, stop)
		return
	}
	msg.StopReason = &stop.reason
	if stop.sequence != "" {
		msg.StopSequence = &stop.sequence
	}
	writeJSON(w, http.StatusOK, msg)
}

// stopState is why an answer ended: Anthropic's stop_reason (the Gemini
// wire maps it) and the stop sequence that ended it, if any.
type stopState struct {
	reason, sequence string
}

// answerText cuts text at the first stop sequence (reason
// "stop_sequence") or after maxTokens words (reason "max_tokens"); reason
// is empty when neither applied.
func answerText(text string, maxTokens *int, stops []string) (string, stopState) {
	text, seq := cutStop(text, stops)
	var st stopState
	if seq != "" {
		st = stopState{reason: "stop_sequence", sequence: seq}
	}
	if cut, ok := cutWords(text, maxTokens); ok {
		return cut, stopState{reason: "max_tokens"}
	}
	return text, st
}

// anthropicContentText returns the text of a system prompt or message content (a
// string or an array of blocks: text, tool_result contents, "[an image]"
// for an image) and how many of its words are in blocks marked
// cache_control.
func anthropicContentText(raw json.RawMessage) (string, int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", 0, nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, 0, err
	}
	var blocks []anthropicInBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", 0, err
	}
	var texts []string
	cached := 0
	for _, b := range blocks {
		var t string
		switch b.Type {
		case "text":
			t = b.Text
		case "image", "document":
			t = "[an image]"
		case "tool_result":
			inner, _, err := anthropicContentText(b.Content)
			if err != nil {
				return "", 0, err
			}
			t = inner
		}
		if t == "" {
			continue
		}
		texts = append(texts, t)
		if len(b.CacheControl) > 0 && !bytes.Equal(b.CacheControl, []byte("null")) {
			cached += countWords(t)
		}
	}
	return strings.Join(texts, " "), cached, nil
}

// streamAnthropic writes msg as the Messages API's event stream:
// message_start (empty content, usage with output_tokens 1), a text block
// (content_block_start, a ping, the text in --chunks content_block_delta
// events, content_block_stop), the tool_use block if any (its input as
// input_json_delta fragments), message_delta (stop_reason, the final
// output_tokens), message_stop. Each frame is "event: TYPE\ndata: JSON\n\n".
func (h *handler) streamAnthropic(w http.ResponseWriter, r *http.Request, msg anthropicMessageOut, text string, tool *anthropicToolUse, stop stopState) {
	s := startSSE(w, r)
	send := func(event string, v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		return s.send(fmt.Appendf(nil, "event: %s\ndata: %s\n\n", event, b))
	}
	type block struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta any    `json:"delta"`
	}
	type startBlock struct {
		Type         string `json:"type"`
		Index        int    `json:"index"`
		ContentBlock any    `json:"content_block"`
	}
	type stopBlock struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	output := msg.Usage.OutputTokens
	start := msg
	start.Content = []any{}
	start.Usage.OutputTokens = 1
	if !send("message_start", struct {
		Type    string              `json:"type"`
		Message anthropicMessageOut `json:"message"`
	}{"message_start", start}) ||
		!send("content_block_start", startBlock{Type: "content_block_start", Index: 0, ContentBlock: anthropicText{Type: "text"}}) ||
		!s.send([]byte("event: ping\ndata: {\"type\": \"ping\"}\n\n")) {
		return
	}
	for _, piece := range splitChunks(text, h.opts.chunks) {
		if !s.pause(h) || !send("content_block_delta", block{Type: "content_block_delta", Index: 0, Delta: anthropicText{Type: "text_delta", Text: piece}}) {
			return
		}
	}
	if !send("content_block_stop", stopBlock{Type: "content_block_stop", Index: 0}) {
		return
	}
	if tool != nil {
		opening := *tool
		opening.Input = map[string]any{}
		args, _ := json.Marshal(tool.Input)
		half := len(args) / 2
		if !send("content_block_start", startBlock{Type: "content_block_start", Index: 1, ContentBlock: opening}) {
			return
		}
		for _, frag := range []string{"", string(args[:half]), string(args[half:])} {
			delta := struct {
				Type        string `json:"type"`
				PartialJSON string `json:"partial_json"`
			}{"input_json_delta", frag}
			if !send("content_block_delta", block{Type: "content_block_delta", Index: 1, Delta: delta}) {
				return
			}
		}
		if !send("content_block_stop", stopBlock{Type: "content_block_stop", Index: 1}) {
			return
		}
	}
	var seq *string
	if stop.sequence != "" {
		seq = &stop.sequence
	}
	delta := struct {
		Type  string `json:"type"`
		Delta struct {
			StopReason   string  `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		} `json:"delta"`
		Usage struct {
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}{Type: "message_delta"}
	delta.Delta.StopReason, delta.Delta.StopSequence, delta.Usage.OutputTokens = stop.reason, seq, output
	if !send("message_delta", delta) {
		return
	}
	send("message_stop", map[string]string{"type": "message_stop"})
}
