package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

const (
	// echoRunes is how much of the last user message an answer echoes.
	echoRunes = 80
	// tokensPerMessage is the per-message overhead in the prompt estimate.
	tokensPerMessage = 4
	// maxChoices bounds "n", as OpenAI does.
	maxChoices = 128
)

// chatRequest is the part of an OpenAI chat completion request the sample
// reads; other fields are accepted and ignored.
type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options"`
	N             *int           `json:"n"`
	// MaxTokens and MaxCompletionTokens limit each choice's answer, in the
	// sample's tokens (words); max_completion_tokens wins when both are
	// set, as at OpenAI.
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
}

// streamOptions is OpenAI's stream_options.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatMessage is one request message. Content is a string, an array of
// content parts, or null.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// contentPart is one element of an array content; only text parts count.
type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// chatCompletion is OpenAI's chat.completion object.
type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   usage        `json:"usage"`
}

// chatChoice is one choice of a [chatCompletion].
type chatChoice struct {
	Index        int              `json:"index"`
	Message      assistantMessage `json:"message"`
	Logprobs     *struct{}        `json:"logprobs"`
	FinishReason string           `json:"finish_reason"`
}

// assistantMessage is the message of a [chatChoice].
type assistantMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

// usage is OpenAI's token usage of a chat completion.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// chatChunk is OpenAI's chat.completion.chunk object, one streamed event.
type chatChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

// chunkChoice is one choice of a [chatChunk]; FinishReason is null until the
// last chunk.
type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Logprobs     *struct{}  `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

// chunkDelta is the increment a [chunkChoice] carries. A nil Content is
// omitted, an empty one is sent as "".
type chunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// chatCompletions serves POST /v1/chat/completions.
func (h *handler) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if !modelHooks(w, r, req.Model) {
		return
	}
	if req.Messages == nil {
		writeError(w, http.StatusBadRequest, "Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", "messages", "empty_array")
		return
	}
	n := 1
	if req.N != nil {
		n = *req.N
	}
	if n < 1 || n > maxChoices {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid 'n': expected a value from 1 to %d, but got %d instead.", maxChoices, n), "n", "invalid_value")
		return
	}

	promptTokens, lastUser := 0, ""
	for i, m := range req.Messages {
		text, err := messageText(m.Content)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid 'messages[%d].content': %v.", i, err), fmt.Sprintf("messages[%d].content", i), "invalid_type")
			return
		}
		promptTokens += countWords(text) + tokensPerMessage
		if m.Role == "user" {
			lastUser = text
		}
	}

	limit, param := req.MaxTokens, "max_tokens"
	if req.MaxCompletionTokens != nil {
		limit, param = req.MaxCompletionTokens, "max_completion_tokens"
	}
	if limit != nil && *limit < 1 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid '%s': expected a value of at least 1, but got %d instead.", param, *limit), param, "invalid_value")
		return
	}

	model := h.resolveModel(req.Model)
	text, finish := answer(model, lastUser), "stop"
	pieces := piecesOf(lastUser)
	if pieces != nil {
		text = strings.Join(pieces, "")
	}
	if limit != nil {
		// The answer honours the limit as a model does: cut after limit
		// tokens, finish_reason "length".
		if words := strings.Fields(text); len(words) > *limit {
			text, finish, pieces = strings.Join(words[:*limit], " "), "length", nil
		}
	}
	completionTokens := countWords(text) * n
	u := usage{PromptTokens: promptTokens, CompletionTokens: completionTokens, TotalTokens: promptTokens + completionTokens}
	id := fmt.Sprintf("chatcmpl-sample-%d", h.seq.Add(1))
	created := time.Now().Unix()

	if req.Stream {
		includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
		h.streamChat(w, r, chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model}, text, pieces, finish, n, u, includeUsage)
		return
	}
	resp := chatCompletion{ID: id, Object: "chat.completion", Created: created, Model: model, Usage: u}
	for i := range n {
		resp.Choices = append(resp.Choices, chatChoice{
			Index:        i,
			Message:      assistantMessage{Role: "assistant", Content: text},
			FinishReason: finish,
		})
	}
	writeJSON(w, http.StatusOK, resp)
}

// streamChat writes the answer as server-sent events, flushing after each:
// a role-only chunk, the content chunks each after the chunk delay, a finish
// chunk (finish_reason finish), the usage chunk if includeUsage, then [DONE]. Every step but usage
// and [DONE] sends one chunk per choice index. It stops when the client goes
// away. head carries the id, object, created time and model of every chunk.
// pieces, when set (the pieces mode, [piecesOf]), are the content chunks
// as given, in place of text split into --chunks.
func (h *handler) streamChat(w http.ResponseWriter, r *http.Request, head chatChunk, text string, pieces []string, finish string, n int, u usage, includeUsage bool) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)

	send := func(payload []byte) bool {
		if _, err := fmt.Fprintf(w, "data: %s\n\n", payload); err != nil {
			return false
		}
		_ = rc.Flush()
		return ctx.Err() == nil
	}
	sendChunk := func(c chatChunk) bool {
		b, err := json.Marshal(c)
		return err == nil && send(b)
	}
	step := func(delta chunkDelta, finish *string) bool {
		for i := range n {
			c := head
			c.Choices = []chunkChoice{{Index: i, Delta: delta, FinishReason: finish}}
			if !sendChunk(c) {
				return false
			}
		}
		return true
	}

	empty := ""
	if !step(chunkDelta{Role: "assistant", Content: &empty}, nil) {
		return
	}
	if pieces == nil {
		pieces = splitChunks(text, h.opts.chunks)
	}
	for _, piece := range pieces {
		if !sleep(ctx, h.opts.chunkDelay) {
			return
		}
		if !step(chunkDelta{Content: &piece}, nil) {
			return
		}
	}
	if !step(chunkDelta{}, &finish) {
		return
	}
	if includeUsage {
		c := head
		c.Choices = []chunkChoice{}
		c.Usage = &u
		if !sendChunk(c) {
			return
		}
	}
	send([]byte("[DONE]"))
}

// maxPieces bounds the pieces mode's pieces.
const maxPieces = 1024

// piecesOf is the pieces mode's trigger: a last user message that is
// exactly a JSON object {"pieces": ["…", …]} (nothing else in it, one to
// maxPieces strings) is answered with those strings concatenated, and
// streamed as exactly those content deltas, so that a text split across
// chunks at a chosen place (a card number across two, for a response
// guardrail) can be shown. nil for any other message: the usual echo.
func piecesOf(lastUser string) []string {
	t := strings.TrimSpace(lastUser)
	if !strings.HasPrefix(t, "{") || !strings.Contains(t, `"pieces"`) {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(t), &m) != nil || len(m) != 1 {
		return nil
	}
	var pieces []string
	if json.Unmarshal(m["pieces"], &pieces) != nil || len(pieces) == 0 || len(pieces) > maxPieces {
		return nil
	}
	return pieces
}

// answer is the sample's reply: it says what it is and echoes the first
// [echoRunes] characters of the last user message.
func answer(model, lastUser string) string {
	said := "You said nothing."
	if lastUser != "" {
		said = "You said: " + truncateRunes(lastUser, echoRunes)
	}
	return fmt.Sprintf("This is flexway-sample (model %s), a local sample model, not a real LLM. %s", model, said)
}

// truncateRunes returns the first max characters of s.
func truncateRunes(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	return string([]rune(s)[:max])
}

// countWords is the token estimate: the number of whitespace-separated
// words in s.
func countWords(s string) int {
	return len(strings.Fields(s))
}

// messageText returns the text of a message content: the string itself, the
// text parts of an array joined by spaces (an image part as "[an image]"),
// or "" for null.
func messageText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	case '[':
		var parts []contentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", fmt.Errorf("want an array of content parts: %w", err)
		}
		var texts []string
		for _, p := range parts {
			switch p.Type {
			case "text":
				texts = append(texts, p.Text)
			case "image_url":
				// The sample sees no pixels; it says an image came.
				texts = append(texts, "[an image]")
			}
		}
		return strings.Join(texts, " "), nil
	}
	return "", fmt.Errorf("want a string, an array of content parts or null")
}

// splitChunks splits s into k pieces whose concatenation is s. It cuts
// between words, each piece starting with the whitespace before its first
// word, as evenly as the word count allows; when s has fewer words than k it
// cuts between characters instead, and returns fewer than k pieces only if
// s has fewer than k characters.
func splitChunks(s string, k int) []string {
	// Word tokens: cut where a whitespace run that precedes a word starts.
	var cuts []int
	inWord, wordEnd := false, -1
	for i, r := range s {
		space := unicode.IsSpace(r)
		switch {
		case !space && !inWord:
			if wordEnd >= 0 {
				cuts = append(cuts, wordEnd)
			}
			inWord = true
		case space && inWord:
			wordEnd, inWord = i, false
		}
	}
	bounds := append(append([]int{0}, cuts...), len(s))
	if k > len(bounds)-1 {
		bounds = bounds[:0]
		for i := range s {
			bounds = append(bounds, i)
		}
		bounds = append(bounds, len(s))
	}
	tokens := len(bounds) - 1
	k = max(1, min(k, tokens))
	out := make([]string, 0, k)
	for i := range k {
		out = append(out, s[bounds[i*tokens/k]:bounds[(i+1)*tokens/k]])
	}
	return out
}
