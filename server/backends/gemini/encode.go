package gemini

import (
	"encoding/json"
	"fmt"
	"mime"
	"path"
	"sort"
	"strings"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends/jsonscan"
	"github.com/flexway/flexway/server/faults"
)

// Options are the backend settings the translation needs.
type Options struct {
	// MaxOutputTokens, when positive, is sent as
	// generationConfig.maxOutputTokens for a request that sets neither
	// max_tokens nor max_completion_tokens (the backend's
	// max_output_tokens, in tokens).
	MaxOutputTokens int64
}

// Path returns the request path of a chat call to model, relative to the
// backend's URL (…/v1beta): "models/<model>:generateContent", or
// "models/<model>:streamGenerateContent?alt=sse" when stream is set, per
// https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent.
func Path(model string, stream bool) string {
	if stream {
		return "models/" + model + ":streamGenerateContent?alt=sse"
	}
	return "models/" + model + ":generateContent"
}

// Encode returns the generateContent (or streamGenerateContent: the body is
// the same) request body for req, per
// https://ai.google.dev/api/generate-content#request-body, and the sorted
// names (never the values) of the request fields it dropped, top-level ones
// as they are ("user") and message ones as "messages[].<name>". The model
// is not in the body: it is in the [Path].
//
// Mapping: system and developer messages become systemInstruction (one
// text part each); user stays user, assistant becomes model, consecutive
// messages of one role merge into one content; tool messages become
// functionResponse parts of one user content, each named after the tool
// call with its tool_call_id in the history, its result a JSON object as it
// is, anything else as {"content": <the text>}; assistant tool_calls become
// functionCall parts (arguments parsed, the thoughtSignature restored from
// the id, see [ToolCallID]); images become inlineData (data: URIs) or
// fileData (other URLs); tools become one {functionDeclarations} with their
// parameter schemas reduced ([ReduceSchema]); tool_choice becomes
// toolConfig.functionCallingConfig (auto → AUTO, required → ANY, none →
// NONE, a named function → ANY with allowedFunctionNames); max_tokens or
// max_completion_tokens (else opts.MaxOutputTokens), n, temperature, top_p,
// seed, presence_penalty, frequency_penalty, stop and response_format go to
// generationConfig.
//
// Errors: a *faults.Error with reason invalid_request whose Param names the
// field, for what Gemini cannot express (logprobs, top_logprobs, a tool of
// another type than function, an unknown role, a schema with a cyclic
// $ref), or a field that does not read (tool call arguments that are not a
// JSON object, a tool result whose call is not in the history).
func Encode(req *flexwayv1.CreateChatCompletionRequest, opts Options) ([]byte, []string, error) {
	var out gRequest
	drops := map[string]bool{}
	if err := encodeMessages(req.GetMessages(), &out, drops); err != nil {
		return nil, nil, err
	}
	gc := &gGenerationConfig{}
	switch {
	case req.MaxCompletionTokens != nil:
		gc.MaxOutputTokens = req.MaxCompletionTokens
	case req.MaxTokens != nil:
		gc.MaxOutputTokens = req.MaxTokens
	case opts.MaxOutputTokens > 0:
		v := opts.MaxOutputTokens
		gc.MaxOutputTokens = &v
	}
	if req.N != nil && req.GetN() != 1 {
		gc.CandidateCount = req.N
	}
	if req.User != nil {
		drops["user"] = true
	}
	extra := req.GetExtraFields()
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := encodeExtra(k, extra[k], &out, gc, drops); err != nil {
			return nil, nil, err
		}
	}
	if gc.MaxOutputTokens != nil || gc.CandidateCount != nil || gc.Temperature != nil || gc.TopP != nil ||
		gc.Seed != nil || gc.PresencePenalty != nil || gc.FrequencyPenalty != nil || gc.StopSequences != nil ||
		gc.ResponseMimeType != "" {
		out.GenerationConfig = gc
	}
	return out.append(make([]byte, 0, 1024)), sortedKeys(drops), nil
}

func sortedKeys(m map[string]bool) []string {
	if len(m) == 0 {
		return nil
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// invalid returns the invalid_request error naming param.
func invalid(param, format string, args ...any) *faults.Error {
	e := faults.New(faults.InvalidRequest, format, args...)
	e.Param = param
	return e
}

// jsonNumber returns raw when it is one JSON number, or the number a
// JSON string holds (as json.Number reads it).
func jsonNumber(param, raw string) (json.RawMessage, error) {
	var s jsonscan.Scanner
	s.Reset([]byte(raw))
	var n []byte
	if s.Peek() == '"' {
		n = s.Str(nil)
		var in jsonscan.Scanner
		in.Reset(n)
		if in.Peek() != '-' && (in.Peek() < '0' || in.Peek() > '9') || len(in.Number()) != len(n) {
			s.Fail()
		}
	} else {
		n = s.Number()
	}
	if !s.Done() || len(n) == 0 {
		return nil, invalid(param, "%s must be a number", param)
	}
	return json.RawMessage(n), nil
}

// encodeExtra maps one top-level field Flexway does not model.
func encodeExtra(k, raw string, out *gRequest, gc *gGenerationConfig, drops map[string]bool) error {
	if raw == "null" {
		return nil
	}
	var err error
	switch k {
	case "logprobs":
		if raw == "false" {
			return nil
		}
		return invalid(k, "Gemini backends do not return logprobs")
	case "top_logprobs":
		return invalid(k, "Gemini backends do not return logprobs")
	case "temperature":
		gc.Temperature, err = jsonNumber(k, raw)
	case "top_p":
		gc.TopP, err = jsonNumber(k, raw)
	case "seed":
		gc.Seed, err = jsonNumber(k, raw)
	case "presence_penalty":
		gc.PresencePenalty, err = jsonNumber(k, raw)
	case "frequency_penalty":
		gc.FrequencyPenalty, err = jsonNumber(k, raw)
	case "stop":
		gc.StopSequences, err = stopSequences(raw)
	case "response_format":
		err = responseFormat(raw, gc)
	case "tools":
		out.Tools, err = encodeTools(raw)
	case "tool_choice":
		out.ToolConfig, err = encodeToolChoice(raw)
	case "stream_options":
		// Gemini always reports usage.
	default:
		drops[k] = true
	}
	return err
}

func stopSequences(raw string) ([]string, error) {
	list, _, ok := jsonscan.Strings(raw)
	if !ok {
		return nil, invalid("stop", "stop must be a string or an array of strings")
	}
	return list, nil
}

func responseFormat(raw string, gc *gGenerationConfig) error {
	var rf struct {
		Type       string `json:"type"`
		JSONSchema struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if json.Unmarshal([]byte(raw), &rf) != nil {
		return invalid("response_format", "response_format must be an object")
	}
	switch rf.Type {
	case "text", "":
	case "json_object":
		gc.ResponseMimeType = "application/json"
	case "json_schema":
		gc.ResponseMimeType = "application/json"
		if len(rf.JSONSchema.Schema) > 0 {
			s, err := ReduceSchema(rf.JSONSchema.Schema)
			if err != nil {
				return invalid("response_format.json_schema.schema", "%v", err)
			}
			gc.ResponseSchema = s
		}
	default:
		return invalid("response_format.type", "response_format type %q is not supported by Gemini backends", rf.Type)
	}
	return nil
}

func encodeTools(raw string) ([]gTool, error) {
	tools, ok := jsonscan.Tools(raw)
	if !ok {
		return nil, invalid("tools", "tools must be an array of tool objects")
	}
	if len(tools) == 0 {
		return nil, nil
	}
	decls := make([]gFunctionDeclaration, 0, len(tools))
	for i, t := range tools {
		if t.Type != "function" {
			return nil, invalid(fmt.Sprintf("tools[%d].type", i), "Gemini backends take function tools only")
		}
		if t.Name == "" {
			return nil, invalid(fmt.Sprintf("tools[%d].function.name", i), "a function tool needs a name")
		}
		d := gFunctionDeclaration{Name: t.Name, Description: t.Description}
		if len(t.Parameters) > 0 && string(t.Parameters) != "null" {
			p, err := ReduceSchema([]byte(t.Parameters))
			if err != nil {
				return nil, invalid(fmt.Sprintf("tools[%d].function.parameters", i), "%v", err)
			}
			d.Parameters = p
		}
		decls = append(decls, d)
	}
	return []gTool{{FunctionDeclarations: decls}}, nil
}

func encodeToolChoice(raw string) (*gToolConfig, error) {
	tc, ok := jsonscan.ReadToolChoice(raw)
	if ok && tc.IsString {
		switch tc.Mode {
		case "auto":
			return &gToolConfig{gFunctionCallingConfig{Mode: "AUTO"}}, nil
		case "required":
			return &gToolConfig{gFunctionCallingConfig{Mode: "ANY"}}, nil
		case "none":
			return &gToolConfig{gFunctionCallingConfig{Mode: "NONE"}}, nil
		}
		return nil, invalid("tool_choice", "tool_choice %q is not auto, required or none", tc.Mode)
	}
	if !ok || tc.Type != "function" || tc.Name == "" {
		return nil, invalid("tool_choice", "tool_choice must be auto, required, none or {type: function, function: {name}}")
	}
	return &gToolConfig{gFunctionCallingConfig{Mode: "ANY", AllowedFunctionNames: []string{tc.Name}}}, nil
}

// encodeMessages fills out's contents and systemInstruction.
func encodeMessages(msgs []*flexwayv1.ChatMessage, out *gRequest, drops map[string]bool) error {
	// The history's tool calls, by id: a tool result is named after its call.
	names := map[string]string{}
	calls := make([][]jsonscan.ToolCall, len(msgs))
	for i, m := range msgs {
		raw, ok := m.GetExtraFields()["tool_calls"]
		if !ok || raw == "null" || m.GetRole() != "assistant" {
			continue
		}
		if calls[i], ok = jsonscan.ToolCalls(raw); !ok {
			return invalid(fmt.Sprintf("messages[%d].tool_calls", i), "tool_calls must be an array of tool calls")
		}
		for _, c := range calls[i] {
			names[c.ID] = c.Name
		}
	}
	for i, m := range msgs {
		var role string
		var parts []gPart
		var err error
		switch m.GetRole() {
		case "system", "developer":
			parts, err = contentParts(i, m, false)
			if err != nil {
				return err
			}
			if out.SystemInstruction == nil {
				out.SystemInstruction = &gContent{}
			}
			out.SystemInstruction.Parts = append(out.SystemInstruction.Parts, parts...)
			continue
		case "user":
			role = "user"
			parts, err = contentParts(i, m, true)
		case "assistant":
			role = "model"
			parts, err = contentParts(i, m, false)
			if err == nil {
				parts, err = appendFunctionCalls(parts, i, calls[i])
			}
		case "tool":
			role = "user"
			parts, err = functionResponse(i, m, names)
		default:
			return invalid(fmt.Sprintf("messages[%d].role", i), "role %q has no Gemini counterpart", m.GetRole())
		}
		if err != nil {
			return err
		}
		for k := range m.GetExtraFields() {
			if k != "tool_calls" && k != "tool_call_id" {
				drops["messages[]."+k] = true
			}
		}
		if m.Name != nil {
			drops["messages[].name"] = true
		}
		if len(parts) == 0 {
			continue
		}
		if n := len(out.Contents); n > 0 && out.Contents[n-1].Role == role {
			out.Contents[n-1].Parts = append(out.Contents[n-1].Parts, parts...)
			continue
		}
		out.Contents = append(out.Contents, gContent{Role: role, Parts: parts})
	}
	if out.Contents == nil {
		out.Contents = []gContent{}
	}
	return nil
}

// contentParts returns m's text and image parts; images only where
// images is set.
func contentParts(i int, m *flexwayv1.ChatMessage, images bool) ([]gPart, error) {
	switch c := m.GetContent().(type) {
	case *flexwayv1.ChatMessage_Text:
		if c.Text == "" {
			return nil, nil
		}
		return []gPart{{Text: c.Text}}, nil
	case *flexwayv1.ChatMessage_Parts:
		var parts []gPart
		for j, p := range c.Parts.GetParts() {
			switch p.GetType() {
			case "text", "refusal":
				if p.GetText() != "" {
					parts = append(parts, gPart{Text: p.GetText()})
				}
			case "image_url":
				param := fmt.Sprintf("messages[%d].content[%d].image_url", i, j)
				if !images {
					return nil, invalid(param, "only user messages may carry images")
				}
				part, err := imagePart(param, p.GetImageUrl().GetUrl())
				if err != nil {
					return nil, err
				}
				parts = append(parts, part)
			default:
				return nil, invalid(fmt.Sprintf("messages[%d].content[%d].type", i, j), "part type %q has no Gemini counterpart", p.GetType())
			}
		}
		return parts, nil
	}
	return nil, nil
}

// imagePart is an image URL as a part: a base64 data: URI as inlineData
// (image/jpg read as image/jpeg), any other URL as fileData with the media
// type its extension names (image/jpeg when none does).
func imagePart(param, u string) (gPart, error) {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		meta, data, found := strings.Cut(rest, ",")
		mt, isB64 := strings.CutSuffix(meta, ";base64")
		if !found || !isB64 || mt == "" {
			return gPart{}, invalid(param, "a data: image URL must be base64 with a media type")
		}
		if mt == "image/jpg" {
			mt = "image/jpeg"
		}
		return gPart{InlineData: &gBlob{MimeType: mt, Data: data}}, nil
	}
	if u == "" {
		return gPart{}, invalid(param, "an image needs a URL")
	}
	mt := mime.TypeByExtension(path.Ext(strings.SplitN(u, "?", 2)[0]))
	if !strings.HasPrefix(mt, "image/") {
		mt = "image/jpeg"
	}
	return gPart{FileData: &gFileData{MimeType: mt, FileURI: u}}, nil
}

// appendFunctionCalls appends an assistant turn's tool calls as
// functionCall parts, each with the thoughtSignature its id carries.
func appendFunctionCalls(parts []gPart, i int, calls []jsonscan.ToolCall) ([]gPart, error) {
	for j, c := range calls {
		args := c.Arguments
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		compact, ok := jsonscan.AppendCompactString(make([]byte, 0, len(args)), args)
		if !ok || compact[0] != '{' {
			return nil, invalid(fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", i, j), "tool call arguments must be a JSON object")
		}
		_, sig := SplitToolCallID(c.ID)
		parts = append(parts, gPart{
			FunctionCall:     &gFunctionCall{Name: c.Name, Args: compact},
			ThoughtSignature: sig,
		})
	}
	return parts, nil
}

// functionResponse is a tool message as a functionResponse part.
func functionResponse(i int, m *flexwayv1.ChatMessage, names map[string]string) ([]gPart, error) {
	rawID := m.GetExtraFields()["tool_call_id"]
	id, ok := jsonscan.String(rawID)
	if !ok || id == "" {
		return nil, invalid(fmt.Sprintf("messages[%d].tool_call_id", i), "a tool message needs its tool_call_id")
	}
	name, ok := names[id]
	if !ok {
		return nil, invalid(fmt.Sprintf("messages[%d].tool_call_id", i), "no assistant tool call in the history has this tool_call_id")
	}
	var text string
	switch c := m.GetContent().(type) {
	case *flexwayv1.ChatMessage_Text:
		text = c.Text
	case *flexwayv1.ChatMessage_Parts:
		var b strings.Builder
		for _, p := range c.Parts.GetParts() {
			b.WriteString(p.GetText())
		}
		text = b.String()
	}
	var resp []byte
	isObject := false
	if t := strings.TrimSpace(text); strings.HasPrefix(t, "{") {
		resp, isObject = jsonscan.AppendCompactString(nil, t)
	}
	if !isObject {
		resp = append(jsonscan.AppendString(append(make([]byte, 0, len(text)+14), `{"content":`...), text), '}')
	}
	return []gPart{{FunctionResponse: &gFunctionResponse{Name: name, Response: resp}}}, nil
}
