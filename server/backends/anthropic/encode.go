package anthropic

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends/jsonscan"
	"github.com/flexway/flexway/server/faults"
)

// Options are the backend's settings the translation needs.
type Options struct {
	// MaxOutputTokens is sent as max_tokens when the request sets neither
	// max_tokens nor max_completion_tokens (the Messages API requires
	// it); 0 makes such a request an invalid_request.
	MaxOutputTokens int64
}

// Encode returns the body of POST /v1/messages
// (https://docs.anthropic.com/en/api/messages) for req, model being the
// model to send (req.Model is not read). The mapping:
//
//   - system and developer messages, wherever they are, become the
//     top-level system (a string for one, text blocks in order for more);
//   - tool messages become tool_result blocks (tool_call_id →
//     tool_use_id) of a user turn; consecutive turns of one role merge,
//     so N tool messages after an assistant turn make one user turn;
//   - an assistant's tool_calls become tool_use blocks, their
//     function.arguments (a JSON string) parsed into input; empty text is
//     never sent as a block;
//   - images: a data: URI becomes a base64 source (image/jpg read as
//     image/jpeg), an http(s) URL a url source;
//   - max_completion_tokens, else max_tokens, else opt.MaxOutputTokens →
//     max_tokens; stop → stop_sequences; temperature (0 to 1) and top_p
//     as they are; user → metadata.user_id; stream → stream;
//   - tools (type function) → tools with input_schema; tool_choice and
//     parallel_tool_calls → tool_choice (auto → auto, required → any,
//     none → none, a named function → tool; parallel_tool_calls false →
//     disable_parallel_tool_use, never on none).
//
// Refused, with a *faults.Error of reason invalid_request whose Param
// names the field: n above 1, temperature above 1, a role or content part
// the Messages API has no counterpart for, a tool call's arguments that are
// not a JSON object, a tool message without tool_call_id, an image URI
// that is neither data: nor http(s), an unsupported image media type, a
// turn left without content, and no max_tokens at all.
//
// dropped lists, sorted and each once, the names (never the values) of
// the request fields that have no counterpart and were left out, such as
// "frequency_penalty", "messages[].name" or
// "messages[].content[].image_url.detail".
func Encode(req *flexwayv1.CreateChatCompletionRequest, model string, opt Options) (body []byte, dropped []string, err error) {
	e := encoder{dropped: map[string]struct{}{}}
	w := wireRequest{Model: model, Stream: req.GetStream()}
	if n := req.GetN(); n > 1 {
		return nil, nil, invalid("n", "this backend returns one choice; n must be 1")
	}
	switch {
	case req.MaxCompletionTokens != nil:
		w.MaxTokens = req.GetMaxCompletionTokens()
	case req.MaxTokens != nil:
		w.MaxTokens = req.GetMaxTokens()
	default:
		w.MaxTokens = opt.MaxOutputTokens
	}
	if w.MaxTokens <= 0 {
		return nil, nil, invalid("max_tokens", "this backend needs max_tokens or max_completion_tokens")
	}
	if u := req.GetUser(); u != "" {
		w.Metadata = &wireMetadata{UserID: u}
	}
	if req.StreamOptions != nil {
		// include_usage needs no counterpart: usage always comes.
		for k := range req.GetStreamOptions().GetExtraFields() {
			e.drop("stream_options." + k)
		}
	}
	if err := e.messages(req.GetMessages(), &w); err != nil {
		return nil, nil, err
	}
	if err := e.params(req.GetExtraFields(), &w); err != nil {
		return nil, nil, err
	}
	body = w.append(make([]byte, 0, 1024))
	for k := range e.dropped {
		dropped = append(dropped, k)
	}
	sort.Strings(dropped)
	return body, dropped, nil
}

// invalid is an invalid_request naming param.
func invalid(param, format string, args ...any) *faults.Error {
	fe := faults.New(faults.InvalidRequest, format, args...)
	fe.Param = param
	return fe
}

type encoder struct {
	dropped map[string]struct{}
}

func (e *encoder) drop(name string) { e.dropped[name] = struct{}{} }

// messages fills w.System and w.Messages.
func (e *encoder) messages(msgs []*flexwayv1.ChatMessage, w *wireRequest) error {
	var system []wireBlock
	w.Messages = make([]wireMessage, 0, len(msgs))
	for i, m := range msgs {
		p := msgPath(i)
		if m.Name != nil {
			e.drop("messages[].name")
		}
		var role string
		var blocks []wireBlock
		var err error
		switch m.GetRole() {
		case "system", "developer":
			blocks, err = e.textBlocks(m, p)
			if err != nil {
				return err
			}
			system = append(system, blocks...)
			e.dropExtras(m, "")
			continue
		case "user":
			role = "user"
			blocks, err = e.userBlocks(m, p)
			e.dropExtras(m, "")
		case "assistant":
			role = "assistant"
			blocks, err = e.assistantBlocks(m, p)
			e.dropExtras(m, "tool_calls")
		case "tool":
			role = "user"
			blocks, err = e.toolResult(m, p)
			e.dropExtras(m, "tool_call_id")
		default:
			return invalid(p.String()+".role", "role %q has no counterpart on this backend", m.GetRole())
		}
		if err != nil {
			return err
		}
		if len(blocks) == 0 {
			return invalid(p.String()+".content", "a %s message needs content on this backend", m.GetRole())
		}
		if n := len(w.Messages); n > 0 && w.Messages[n-1].Role == role {
			w.Messages[n-1].Content = append(w.Messages[n-1].Content, blocks...)
			continue
		}
		w.Messages = append(w.Messages, wireMessage{Role: role, Content: blocks})
	}
	switch len(system) {
	case 0:
	case 1:
		w.System = jsonscan.AppendString(nil, system[0].Text)
	default:
		w.System = appendBlocks(nil, system)
	}
	if len(w.Messages) == 0 {
		return invalid("messages", "this backend needs at least one user or assistant message")
	}
	return nil
}

// dropExtras records a message's extra fields but keep as dropped,
// except null ones (an echoed assistant message's "refusal": null says
// nothing).
func (e *encoder) dropExtras(m *flexwayv1.ChatMessage, keep string) {
	for k, v := range m.GetExtraFields() {
		if k != keep && v != "null" {
			e.drop("messages[]." + k)
		}
	}
}

// msgPath is messages[i] in OpenAI's notation, written only for an error.
type msgPath int

// String returns "messages[i]".
func (p msgPath) String() string { return "messages[" + strconv.Itoa(int(p)) + "]" }

func textBlock(s string) wireBlock { return wireBlock{Type: "text", Text: s, HasText: true} }

// textBlocks is the non-empty text of m (a string or text parts).
func (e *encoder) textBlocks(m *flexwayv1.ChatMessage, p msgPath) ([]wireBlock, error) {
	switch c := m.GetContent().(type) {
	case *flexwayv1.ChatMessage_Text:
		if c.Text == "" {
			return nil, nil
		}
		return []wireBlock{textBlock(c.Text)}, nil
	case *flexwayv1.ChatMessage_Parts:
		var out []wireBlock
		for j, part := range c.Parts.GetParts() {
			if part.GetType() != "text" {
				return nil, invalid(fmt.Sprintf("%s.content[%d].type", p, j), "a %s message takes text parts only on this backend", m.GetRole())
			}
			e.partExtras(part)
			if t := part.GetText(); t != "" {
				out = append(out, textBlock(t))
			}
		}
		return out, nil
	}
	return nil, nil
}

func (e *encoder) partExtras(part *flexwayv1.ContentPart) {
	for k := range part.GetExtraFields() {
		e.drop("messages[].content[]." + k)
	}
}

// userBlocks is a user message's text and image blocks.
func (e *encoder) userBlocks(m *flexwayv1.ChatMessage, p msgPath) ([]wireBlock, error) {
	parts, ok := m.GetContent().(*flexwayv1.ChatMessage_Parts)
	if !ok {
		return e.textBlocks(m, p)
	}
	var out []wireBlock
	for j, part := range parts.Parts.GetParts() {
		e.partExtras(part)
		switch part.GetType() {
		case "text":
			if t := part.GetText(); t != "" {
				out = append(out, textBlock(t))
			}
		case "image_url":
			src, err := e.imageSource(part.GetImageUrl(), p, j)
			if err != nil {
				return nil, err
			}
			out = append(out, wireBlock{Type: "image", Source: src})
		default:
			return nil, invalid(fmt.Sprintf("%s.content[%d].type", p, j), "a user message cannot hold a %s part on this backend", part.GetType())
		}
	}
	return out, nil
}

// imageMediaTypes are the image types the Messages API takes, by the
// name a data: URI may use.
var imageMediaTypes = map[string]string{
	"image/jpeg": "image/jpeg",
	"image/jpg":  "image/jpeg",
	"image/png":  "image/png",
	"image/gif":  "image/gif",
	"image/webp": "image/webp",
}

// imageSource maps an image_url: a base64 data: URI or an http(s) URL.
func (e *encoder) imageSource(u *flexwayv1.ImageUrl, p msgPath, j int) (*wireSource, error) {
	param := func() string { return fmt.Sprintf("%s.content[%d].image_url.url", p, j) }
	if u.Detail != nil {
		e.drop("messages[].content[].image_url.detail")
	}
	for k := range u.GetExtraFields() {
		e.drop("messages[].content[].image_url." + k)
	}
	url := u.GetUrl()
	switch {
	case strings.HasPrefix(url, "data:"):
		meta, data, ok := strings.Cut(url[len("data:"):], ",")
		mt, isBase64 := strings.CutSuffix(meta, ";base64")
		if !ok || !isBase64 {
			return nil, invalid(param(), "an image data URI must be base64")
		}
		wireMT, ok := imageMediaTypes[strings.ToLower(mt)]
		if !ok {
			return nil, invalid(param(), "image type %q is not supported on this backend (jpeg, png, gif, webp)", mt)
		}
		return &wireSource{Type: "base64", MediaType: wireMT, Data: data}, nil
	case strings.HasPrefix(url, "https://"), strings.HasPrefix(url, "http://"):
		return &wireSource{Type: "url", URL: url}, nil
	}
	return nil, invalid(param(), "an image must be a data: URI or an http(s) URL")
}

// assistantBlocks is an assistant message's text blocks, then its
// tool_use blocks.
func (e *encoder) assistantBlocks(m *flexwayv1.ChatMessage, p msgPath) ([]wireBlock, error) {
	var out []wireBlock
	switch c := m.GetContent().(type) {
	case *flexwayv1.ChatMessage_Text:
		if c.Text != "" {
			out = append(out, textBlock(c.Text))
		}
	case *flexwayv1.ChatMessage_Parts:
		for j, part := range c.Parts.GetParts() {
			e.partExtras(part)
			switch part.GetType() {
			case "text", "refusal":
				if t := part.GetText(); t != "" {
					out = append(out, textBlock(t))
				}
			default:
				return nil, invalid(fmt.Sprintf("%s.content[%d].type", p, j), "an assistant message cannot hold a %s part on this backend", part.GetType())
			}
		}
	}
	raw, ok := m.GetExtraFields()["tool_calls"]
	if !ok || raw == "null" {
		return out, nil
	}
	calls, ok := jsonscan.ToolCalls(raw)
	if !ok {
		return nil, invalid(p.String()+".tool_calls", "tool_calls must be an array of function calls")
	}
	out = slices.Grow(out, len(calls))
	for j, c := range calls {
		cp := func() string { return fmt.Sprintf("%s.tool_calls[%d]", p, j) }
		if c.Type != "" && c.Type != "function" {
			return nil, invalid(cp()+".type", "tool call type %q has no counterpart on this backend", c.Type)
		}
		if c.ID == "" || c.Name == "" {
			return nil, invalid(cp(), "a tool call needs an id and a function name")
		}
		input := strings.TrimSpace(c.Arguments)
		if input == "" {
			input = "{}"
		}
		compact, ok := jsonscan.AppendCompactString(make([]byte, 0, len(input)), input)
		if !ok || compact[0] != '{' {
			return nil, invalid(cp()+".function.arguments", "tool call arguments must be a JSON object")
		}
		out = append(out, wireBlock{Type: "tool_use", ID: c.ID, Name: c.Name, Input: compact})
	}
	return out, nil
}

// toolResult is a tool message as one tool_result block.
func (e *encoder) toolResult(m *flexwayv1.ChatMessage, p msgPath) ([]wireBlock, error) {
	var id string
	if raw, ok := m.GetExtraFields()["tool_call_id"]; ok {
		id, _ = jsonscan.String(raw)
	}
	if id == "" {
		return nil, invalid(p.String()+".tool_call_id", "a tool message needs tool_call_id")
	}
	content, err := e.textBlocks(m, p)
	if err != nil {
		return nil, err
	}
	return []wireBlock{{Type: "tool_result", ToolUseID: id, Content: content}}, nil
}

// requestParams are the request's extra fields this encoder reads; any
// other one is dropped.
var requestParams = map[string]bool{
	"temperature": true, "top_p": true, "stop": true, "tools": true,
	"tool_choice": true, "parallel_tool_calls": true,
}

// params maps the request's extra fields.
func (e *encoder) params(extra map[string]string, w *wireRequest) error {
	for k, v := range extra {
		if !requestParams[k] && v != "null" {
			e.drop(k)
		}
	}
	if v, ok := extra["temperature"]; ok && v != "null" {
		n, isNumber := number(v)
		t, err := strconv.ParseFloat(string(n), 64)
		if !isNumber || err != nil || t < 0 || t > 1 {
			return invalid("temperature", "temperature must be a number from 0 to 1 on this backend")
		}
		w.Temperature = n
	}
	if v, ok := extra["top_p"]; ok && v != "null" {
		n, isNumber := number(v)
		if !isNumber {
			return invalid("top_p", "top_p must be a number")
		}
		w.TopP = n
	}
	if v, ok := extra["stop"]; ok && v != "null" {
		list, _, ok := jsonscan.Strings(v)
		if !ok {
			return invalid("stop", "stop must be a string or an array of strings")
		}
		w.StopSequences = list
	}
	if v, ok := extra["tools"]; ok && v != "null" {
		if err := e.tools(v, w); err != nil {
			return err
		}
	}
	return toolChoice(extra, w)
}

func (e *encoder) tools(raw string, w *wireRequest) error {
	tools, ok := jsonscan.Tools(raw)
	if !ok {
		return invalid("tools", "tools must be an array of function tools")
	}
	w.Tools = make([]wireTool, 0, len(tools))
	for i, t := range tools {
		if t.Type != "function" || t.Name == "" {
			return invalid(fmt.Sprintf("tools[%d]", i), "only function tools with a name have a counterpart on this backend")
		}
		if len(t.Strict) > 0 {
			e.drop("tools[].function.strict")
		}
		var schema []byte
		switch p := t.Parameters; {
		case p == "" || p == "null":
			schema = []byte(`{"type":"object","properties":{}}`)
		case p[0] != '{':
			return invalid(fmt.Sprintf("tools[%d].function.parameters", i), "parameters must be a JSON Schema object")
		default:
			schema, _ = jsonscan.AppendCompactString(make([]byte, 0, len(p)), p)
		}
		w.Tools = append(w.Tools, wireTool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	return nil
}

// number is raw when it is one JSON number, white space trimmed.
func number(raw string) ([]byte, bool) {
	var s jsonscan.Scanner
	s.Reset([]byte(raw))
	n := s.Number()
	return n, s.Done()
}

// toolChoice maps tool_choice and parallel_tool_calls.
func toolChoice(extra map[string]string, w *wireRequest) error {
	var tc *wireToolChoice
	if v, ok := extra["tool_choice"]; ok && v != "null" {
		choice, ok := jsonscan.ReadToolChoice(v)
		switch {
		case ok && choice.IsString:
			switch choice.Mode {
			case "auto":
				tc = &wireToolChoice{Type: "auto"}
			case "required":
				tc = &wireToolChoice{Type: "any"}
			case "none":
				tc = &wireToolChoice{Type: "none"}
			default:
				return invalid("tool_choice", "tool_choice must be auto, required, none or a named function")
			}
		case ok && choice.Type == "function" && choice.Name != "":
			tc = &wireToolChoice{Type: "tool", Name: choice.Name}
		default:
			return invalid("tool_choice", "tool_choice must be auto, required, none or a named function")
		}
	}
	if v, ok := extra["parallel_tool_calls"]; ok && strings.TrimSpace(v) == "false" {
		if tc == nil {
			tc = &wireToolChoice{Type: "auto"}
		}
		if tc.Type != "none" {
			tc.DisableParallelToolUse = true
		}
	}
	w.ToolChoice = tc
	return nil
}
