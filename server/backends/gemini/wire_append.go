package gemini

import (
	"strconv"

	"github.com/flexway/flexway/server/backends/jsonscan"
)

// The appenders write the wire structs as json.Marshal wrote them from
// their tags: the same members in the same order, omitempty ones left
// out, a nil slice without omitempty as null. Raw members hold compact
// JSON already (jsonscan.AppendCompact or ReduceSchema wrote them).

func (r *gRequest) append(dst []byte) []byte {
	dst = append(dst, `{"contents":`...)
	dst = appendList(dst, r.Contents, (*gContent).append)
	if r.SystemInstruction != nil {
		dst = append(dst, `,"systemInstruction":`...)
		dst = r.SystemInstruction.append(dst)
	}
	if len(r.Tools) > 0 {
		dst = append(dst, `,"tools":`...)
		dst = appendList(dst, r.Tools, (*gTool).append)
	}
	if tc := r.ToolConfig; tc != nil {
		dst = append(dst, `,"toolConfig":{"functionCallingConfig":{"mode":`...)
		dst = jsonscan.AppendString(dst, tc.FunctionCallingConfig.Mode)
		if names := tc.FunctionCallingConfig.AllowedFunctionNames; len(names) > 0 {
			dst = append(dst, `,"allowedFunctionNames":`...)
			dst = appendStrings(dst, names)
		}
		dst = append(dst, "}}"...)
	}
	if r.GenerationConfig != nil {
		dst = append(dst, `,"generationConfig":`...)
		dst = r.GenerationConfig.append(dst)
	}
	return append(dst, '}')
}

// appendList writes list as an array of what each writes of each
// element, null when list is nil.
func appendList[T any](dst []byte, list []T, each func(*T, []byte) []byte) []byte {
	if list == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i := range list {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = each(&list[i], dst)
	}
	return append(dst, ']')
}

func appendStrings(dst []byte, list []string) []byte {
	dst = append(dst, '[')
	for i, s := range list {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonscan.AppendString(dst, s)
	}
	return append(dst, ']')
}

// member writes ,"key": (or {"key": first) and the string v.
func member(dst []byte, first bool, key, v string) []byte {
	if first {
		dst = append(dst, '{')
	} else {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, key...)
	dst = append(dst, `":`...)
	return jsonscan.AppendString(dst, v)
}

func (c *gContent) append(dst []byte) []byte {
	first := true
	if c.Role != "" {
		dst = member(dst, true, "role", c.Role)
		first = false
	}
	if first {
		dst = append(dst, `{"parts":`...)
	} else {
		dst = append(dst, `,"parts":`...)
	}
	return append(appendList(dst, c.Parts, (*gPart).append), '}')
}

func (p *gPart) append(dst []byte) []byte {
	mark := len(dst)
	dst = append(dst, '{')
	next := func() {
		if len(dst) > mark+1 {
			dst = append(dst, ',')
		}
	}
	if p.Text != "" {
		dst = append(dst, `"text":`...)
		dst = jsonscan.AppendString(dst, p.Text)
	}
	if p.Thought {
		next()
		dst = append(dst, `"thought":true`...)
	}
	if p.ThoughtSignature != "" {
		next()
		dst = append(dst, `"thoughtSignature":`...)
		dst = jsonscan.AppendString(dst, p.ThoughtSignature)
	}
	if b := p.InlineData; b != nil {
		next()
		dst = member(append(dst, `"inlineData":`...), true, "mimeType", b.MimeType)
		dst = append(member(dst, false, "data", b.Data), '}')
	}
	if f := p.FileData; f != nil {
		next()
		dst = append(dst, `"fileData":`...)
		if f.MimeType != "" {
			dst = member(member(dst, true, "mimeType", f.MimeType), false, "fileUri", f.FileURI)
		} else {
			dst = member(dst, true, "fileUri", f.FileURI)
		}
		dst = append(dst, '}')
	}
	if fc := p.FunctionCall; fc != nil {
		next()
		dst = append(dst, `"functionCall":`...)
		if fc.ID != "" {
			dst = member(member(dst, true, "id", fc.ID), false, "name", fc.Name)
		} else {
			dst = member(dst, true, "name", fc.Name)
		}
		if len(fc.Args) > 0 {
			dst = append(append(dst, `,"args":`...), fc.Args...)
		}
		dst = append(dst, '}')
	}
	if fr := p.FunctionResponse; fr != nil {
		next()
		dst = member(append(dst, `"functionResponse":`...), true, "name", fr.Name)
		dst = append(dst, `,"response":`...)
		dst = appendRaw(dst, fr.Response)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// appendRaw writes raw, null when it is empty.
func appendRaw(dst, raw []byte) []byte {
	if len(raw) == 0 {
		return append(dst, "null"...)
	}
	return append(dst, raw...)
}

func (t *gTool) append(dst []byte) []byte {
	dst = append(dst, `{"functionDeclarations":`...)
	if t.FunctionDeclarations == nil {
		return append(dst, "null}"...)
	}
	dst = append(dst, '[')
	for i, d := range t.FunctionDeclarations {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = member(dst, true, "name", d.Name)
		if d.Description != "" {
			dst = member(dst, false, "description", d.Description)
		}
		if len(d.Parameters) > 0 {
			dst = append(append(dst, `,"parameters":`...), d.Parameters...)
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

func (g *gGenerationConfig) append(dst []byte) []byte {
	mark := len(dst)
	dst = append(dst, '{')
	key := func(k string) {
		if len(dst) > mark+1 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, k...)
		dst = append(dst, `":`...)
	}
	if g.MaxOutputTokens != nil {
		key("maxOutputTokens")
		dst = strconv.AppendInt(dst, *g.MaxOutputTokens, 10)
	}
	if g.CandidateCount != nil {
		key("candidateCount")
		dst = strconv.AppendInt(dst, int64(*g.CandidateCount), 10)
	}
	for _, f := range [...]struct {
		k string
		v []byte
	}{{"temperature", g.Temperature}, {"topP", g.TopP}, {"seed", g.Seed}, {"presencePenalty", g.PresencePenalty}, {"frequencyPenalty", g.FrequencyPenalty}} {
		if len(f.v) > 0 {
			key(f.k)
			dst = append(dst, f.v...)
		}
	}
	if len(g.StopSequences) > 0 {
		key("stopSequences")
		dst = appendStrings(dst, g.StopSequences)
	}
	if g.ResponseMimeType != "" {
		key("responseMimeType")
		dst = jsonscan.AppendString(dst, g.ResponseMimeType)
	}
	if len(g.ResponseSchema) > 0 {
		key("responseSchema")
		dst = append(dst, g.ResponseSchema...)
	}
	return append(dst, '}')
}
