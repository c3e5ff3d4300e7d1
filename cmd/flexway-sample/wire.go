package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// The wire formats the sample speaks, one per process (--wire).
const (
	// wireOpenAI is OpenAI's chat completions API, the default.
	wireOpenAI = "openai"
	// wireAnthropic is Anthropic's Messages API (POST /v1/messages).
	wireAnthropic = "anthropic"
	// wireGemini is Google's Gemini API (models/{model}:generateContent).
	wireGemini = "gemini"
	// wireA2A is the Agent2Agent protocol over JSON-RPC 2.0.
	wireA2A = "a2a"
)

// wires lists the --wire values, in the order the usage text gives them.
var wires = []string{wireOpenAI, wireAnthropic, wireGemini, wireA2A}

// wireTitles names each wire in the sample's answers, so that a newcomer
// reading an answer through the gateway sees which format was spoken.
var wireTitles = map[string]string{
	wireOpenAI:    "",
	wireAnthropic: "Anthropic Messages",
	wireGemini:    "Gemini generateContent",
	wireA2A:       "A2A JSON-RPC",
}

// defaultModels returns the model names a wire serves when --models is not
// given.
func defaultModels(wire string) []string {
	switch wire {
	case wireAnthropic:
		return []string{"sample-claude"}
	case wireGemini:
		return []string{"sample-gemini", "sample-gemini-embedding"}
	case wireA2A:
		return []string{"sample-agent"}
	}
	return []string{"sample-small", "sample-large", wordsModel}
}

// failFunc writes an error response in one wire's own format: the HTTP
// status, a message, and OpenAI's error code (the other wires derive their
// error type from the status and ignore code).
type failFunc func(status int, message, code string)

// wireAnswer is the answer of a wire other than OpenAI's: it says what it
// is, which format it speaks, and echoes the first [echoRunes] characters of
// the last user message.
func wireAnswer(model, wire, lastUser string) string {
	said := "You said nothing."
	if lastUser != "" {
		said = "You said: " + truncateRunes(lastUser, echoRunes)
	}
	return fmt.Sprintf("This is flexway-sample (model %s, speaking %s), a local sample model, not a real LLM. %s", model, wireTitles[wire], said)
}

// sampleTool is a tool (function) a request declares: its name and its
// parameters' JSON Schema (Anthropic's input_schema, Gemini's parameters).
type sampleTool struct {
	name   string
	schema json.RawMessage
}

// pickTool decides whether the sample calls a tool: the forced one when
// forced names a declared tool, the first declared one when anyTool is set,
// else the first declared tool whose name the last user text contains
// (case-insensitive). It reports false when no tool is called.
func pickTool(tools []sampleTool, forced string, anyTool bool, lastUser string) (sampleTool, bool) {
	if len(tools) == 0 {
		return sampleTool{}, false
	}
	if forced != "" {
		i := slices.IndexFunc(tools, func(t sampleTool) bool { return t.name == forced })
		if i >= 0 {
			return tools[i], true
		}
	}
	if anyTool {
		return tools[0], true
	}
	text := strings.ToLower(lastUser)
	for _, t := range tools {
		if t.name != "" && strings.Contains(text, strings.ToLower(t.name)) {
			return t, true
		}
	}
	return sampleTool{}, false
}

// sampleArgs returns the arguments of a sample tool call: every required
// property of schema (a JSON Schema object) with a value of its type, a
// string property being the first [echoRunes] characters of text. A schema
// that is absent or not an object gives an empty object.
func sampleArgs(schema json.RawMessage, text string) map[string]any {
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	args := map[string]any{}
	if json.Unmarshal(schema, &s) != nil {
		return args
	}
	for _, name := range s.Required {
		typ, _ := s.Properties[name].Type.(string)
		switch strings.ToLower(typ) {
		case "integer", "number":
			args[name] = 1
		case "boolean":
			args[name] = true
		case "array":
			args[name] = []any{}
		case "object":
			args[name] = map[string]any{}
		default:
			args[name] = truncateRunes(text, echoRunes)
		}
	}
	return args
}

// sseStream writes one answer's server-sent events, flushing each frame.
type sseStream struct {
	ctx context.Context
	w   http.ResponseWriter
	rc  *http.ResponseController
}

// startSSE writes the 200 and the event-stream headers.
func startSSE(w http.ResponseWriter, r *http.Request) *sseStream {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sseStream{ctx: r.Context(), w: w, rc: http.NewResponseController(w)}
}

// send writes one whole frame (its framing included) and flushes it; it
// reports false once the client is gone.
func (s *sseStream) send(frame []byte) bool {
	if _, err := s.w.Write(frame); err != nil {
		return false
	}
	_ = s.rc.Flush()
	return s.ctx.Err() == nil
}

// pause waits the chunk delay before a content frame; false once the
// client is gone.
func (s *sseStream) pause(h *handler) bool {
	return sleep(s.ctx, h.opts.chunkDelay)
}

// cutWords cuts text after limit words when limit is set and the text is
// longer, and reports whether it did.
func cutWords(text string, limit *int) (string, bool) {
	if limit == nil {
		return text, false
	}
	if words := strings.Fields(text); len(words) > *limit {
		return strings.Join(words[:*limit], " "), true
	}
	return text, false
}

// cutStop cuts text before the first of stops it contains, and returns the
// stop sequence found ("" when none).
func cutStop(text string, stops []string) (string, string) {
	best, found := -1, ""
	for _, s := range stops {
		if s == "" {
			continue
		}
		if i := strings.Index(text, s); i >= 0 && (best < 0 || i < best) {
			best, found = i, s
		}
	}
	if best < 0 {
		return text, ""
	}
	return text[:best], found
}
