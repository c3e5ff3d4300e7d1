package anthropic

import (
	"strconv"

	"github.com/flexway/flexway/server/backends/jsonscan"
)

// wireRequest is the body of POST /v1/messages
// (https://docs.anthropic.com/en/api/messages), written by
// [wireRequest.append] in this order. Raw fields hold compact JSON, as
// [jsonscan.AppendCompact] writes it.
type wireRequest struct {
	Model         string
	MaxTokens     int64
	System        []byte // a JSON string or array of text blocks; omitted when empty
	Messages      []wireMessage
	StopSequences []string
	Temperature   []byte
	TopP          []byte
	Tools         []wireTool
	ToolChoice    *wireToolChoice
	Metadata      *wireMetadata
	Stream        bool
}

type wireMessage struct {
	Role    string
	Content []wireBlock
}

// wireBlock is a request content block: text, image, tool_use or
// tool_result.
type wireBlock struct {
	Type      string
	Text      string
	HasText   bool // Text is written, "" included
	Source    *wireSource
	ID        string
	Name      string
	Input     []byte // compact JSON object
	ToolUseID string
	Content   []wireBlock
}

type wireSource struct {
	Type      string
	MediaType string
	Data      string
	URL       string
}

type wireTool struct {
	Name        string
	Description string
	InputSchema []byte // compact JSON object
}

type wireToolChoice struct {
	Type                   string
	Name                   string
	DisableParallelToolUse bool
}

type wireMetadata struct {
	UserID string
}

// append writes w as json.Marshal wrote the former tagged structs: the
// same members in the same order, empty optional ones omitted.
func (w *wireRequest) append(dst []byte) []byte {
	dst = append(dst, `{"model":`...)
	dst = jsonscan.AppendString(dst, w.Model)
	dst = append(dst, `,"max_tokens":`...)
	dst = strconv.AppendInt(dst, w.MaxTokens, 10)
	if len(w.System) > 0 {
		dst = append(dst, `,"system":`...)
		dst = append(dst, w.System...)
	}
	dst = append(dst, `,"messages":[`...)
	for i := range w.Messages {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"role":`...)
		dst = jsonscan.AppendString(dst, w.Messages[i].Role)
		dst = append(dst, `,"content":`...)
		dst = appendBlocks(dst, w.Messages[i].Content)
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	if len(w.StopSequences) > 0 {
		dst = append(dst, `,"stop_sequences":[`...)
		for i, s := range w.StopSequences {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonscan.AppendString(dst, s)
		}
		dst = append(dst, ']')
	}
	if len(w.Temperature) > 0 {
		dst = append(append(dst, `,"temperature":`...), w.Temperature...)
	}
	if len(w.TopP) > 0 {
		dst = append(append(dst, `,"top_p":`...), w.TopP...)
	}
	if len(w.Tools) > 0 {
		dst = append(dst, `,"tools":[`...)
		for i, t := range w.Tools {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"name":`...)
			dst = jsonscan.AppendString(dst, t.Name)
			if t.Description != "" {
				dst = append(dst, `,"description":`...)
				dst = jsonscan.AppendString(dst, t.Description)
			}
			dst = append(dst, `,"input_schema":`...)
			dst = append(dst, t.InputSchema...)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if tc := w.ToolChoice; tc != nil {
		dst = append(dst, `,"tool_choice":{"type":`...)
		dst = jsonscan.AppendString(dst, tc.Type)
		if tc.Name != "" {
			dst = append(dst, `,"name":`...)
			dst = jsonscan.AppendString(dst, tc.Name)
		}
		if tc.DisableParallelToolUse {
			dst = append(dst, `,"disable_parallel_tool_use":true`...)
		}
		dst = append(dst, '}')
	}
	if w.Metadata != nil {
		dst = append(dst, `,"metadata":{"user_id":`...)
		dst = jsonscan.AppendString(dst, w.Metadata.UserID)
		dst = append(dst, '}')
	}
	if w.Stream {
		dst = append(dst, `,"stream":true`...)
	}
	return append(dst, '}')
}

// appendBlocks writes blocks as a JSON array.
func appendBlocks(dst []byte, blocks []wireBlock) []byte {
	dst = append(dst, '[')
	for i := range blocks {
		if i > 0 {
			dst = append(dst, ',')
		}
		b := &blocks[i]
		dst = append(dst, `{"type":`...)
		dst = jsonscan.AppendString(dst, b.Type)
		if b.HasText {
			dst = append(dst, `,"text":`...)
			dst = jsonscan.AppendString(dst, b.Text)
		}
		if src := b.Source; src != nil {
			dst = append(dst, `,"source":{"type":`...)
			dst = jsonscan.AppendString(dst, src.Type)
			for _, f := range [...]struct{ key, v string }{{`,"media_type":`, src.MediaType}, {`,"data":`, src.Data}, {`,"url":`, src.URL}} {
				if f.v != "" {
					dst = append(dst, f.key...)
					dst = jsonscan.AppendString(dst, f.v)
				}
			}
			dst = append(dst, '}')
		}
		for _, f := range [...]struct{ key, v string }{{`,"id":`, b.ID}, {`,"name":`, b.Name}} {
			if f.v != "" {
				dst = append(dst, f.key...)
				dst = jsonscan.AppendString(dst, f.v)
			}
		}
		if len(b.Input) > 0 {
			dst = append(append(dst, `,"input":`...), b.Input...)
		}
		if b.ToolUseID != "" {
			dst = append(dst, `,"tool_use_id":`...)
			dst = jsonscan.AppendString(dst, b.ToolUseID)
		}
		if len(b.Content) > 0 {
			dst = append(dst, `,"content":`...)
			dst = appendBlocks(dst, b.Content)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}
