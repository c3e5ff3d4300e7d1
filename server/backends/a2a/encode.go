package a2a

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
)

// The JSON-RPC methods of the A2A protocol 0.2+ that Flexway calls.
const (
	// MethodSend is `message/send`, a unary call answered by a Message or a
	// Task.
	MethodSend = "message/send"
	// MethodStream is `message/stream`, answered by an event stream of
	// Message, Task, status-update and artifact-update results.
	MethodStream = "message/stream"
)

// Options are what [Encode] needs beside the request.
type Options struct {
	// Stream selects `message/stream` instead of `message/send`.
	Stream bool
	// RequestID is the JSON-RPC id and, suffixed "-msg", the Message's
	// messageId; the caller makes it unique per call (the gateway's call
	// id). Empty means "1".
	RequestID string
	// Images says the agent accepts image input (file parts); when false an
	// image in the request is refused with [faults.InvalidRequest].
	Images bool
}

// rpcRequest is a JSON-RPC 2.0 request of method message/send or
// message/stream (A2A SendMessageRequest / SendStreamingMessageRequest).
type rpcRequest struct {
	JSONRPC string     `json:"jsonrpc"`
	ID      string     `json:"id"`
	Method  string     `json:"method"`
	Params  sendParams `json:"params"`
}

// sendParams is A2A's MessageSendParams.
type sendParams struct {
	Message       message        `json:"message"`
	Configuration *configuration `json:"configuration,omitempty"`
}

// configuration is A2A's MessageSendConfiguration.
type configuration struct {
	AcceptedOutputModes []string `json:"acceptedOutputModes,omitempty"`
	Blocking            *bool    `json:"blocking,omitempty"`
}

// message is A2A's Message (kind "message").
type message struct {
	Kind      string `json:"kind"`
	MessageID string `json:"messageId"`
	Role      string `json:"role"`
	Parts     []part `json:"parts"`
}

// part is A2A's Part: a TextPart (kind "text") or a FilePart (kind "file").
type part struct {
	Kind string    `json:"kind"`
	Text *string   `json:"text,omitempty"`
	File *filePart `json:"file,omitempty"`
}

// filePart is A2A's FileWithBytes or FileWithUri.
type filePart struct {
	Bytes    string `json:"bytes,omitempty"`
	URI      string `json:"uri,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
}

// acceptedOutputModes is what Flexway can return to an OpenAI client.
var acceptedOutputModes = []string{"text/plain", "text/markdown", "application/json"}

// Encode writes req as the JSON-RPC body of an A2A `message/send` (or
// `message/stream` when opts.Stream) call, the request's history as the parts
// of one user Message (see the package doc). model is not sent: an A2A
// endpoint is one agent. It returns the body and the sorted names (never the
// values) of the request fields it dropped for want of an A2A counterpart:
// top-level fields ("temperature", "tools", "max_tokens", ...) by their JSON
// name, a message's by "messages[].<name>" ("messages[].tool_calls").
//
// It fails with a *faults.Error of reason [faults.InvalidRequest] whose Param
// names the field for `n` > 1 ("n"), an image when !opts.Images
// ("messages[i].content[j].image_url"), an image URL that is neither a
// base64 data: URI nor http(s) ("messages[i].content[j].image_url.url"), and a
// request with no text or image to send ("messages").
func Encode(req *flexwayv1.CreateChatCompletionRequest, model string, opts Options) ([]byte, []string, error) {
	_ = model
	if req.N != nil && req.GetN() > 1 {
		return nil, nil, &faults.Error{Reason: faults.InvalidRequest, Param: "n",
			Message: "an A2A agent gives one answer: n must be 1"}
	}
	dropped := map[string]bool{}
	for k := range req.GetExtraFields() {
		dropped[k] = true
	}
	// stream_options is not named: the core sets include_usage on every
	// stream, and an agent's usage is estimated anyway.
	for name, set := range map[string]bool{
		"max_tokens": req.MaxTokens != nil, "max_completion_tokens": req.MaxCompletionTokens != nil,
		"user": req.User != nil,
	} {
		if set {
			dropped[name] = true
		}
	}
	msgs := req.GetMessages()
	single := len(msgs) == 1 && msgs[0].GetRole() == "user"
	var parts []part
	for i, m := range msgs {
		for k := range m.GetExtraFields() {
			dropped["messages[]."+k] = true
		}
		if m.Name != nil {
			dropped["messages[].name"] = true
		}
		prefix := ""
		if !single {
			prefix = m.GetRole() + ": "
		}
		switch c := m.GetContent().(type) {
		case *flexwayv1.ChatMessage_Text:
			parts = appendText(parts, prefix, c.Text)
		case *flexwayv1.ChatMessage_Parts:
			for j, p := range c.Parts.GetParts() {
				switch p.GetType() {
				case "text":
					if p.GetText() != "" {
						parts = appendText(parts, prefix, p.GetText())
						prefix = ""
					}
				case "refusal":
					dropped["messages[].content[].refusal"] = true
				case "image_url":
					param := fmt.Sprintf("messages[%d].content[%d].image_url", i, j)
					if !opts.Images {
						return nil, nil, &faults.Error{Reason: faults.InvalidRequest, Param: param,
							Message: "this A2A agent takes no image input"}
					}
					fp, err := imagePart(p.GetImageUrl().GetUrl(), param+".url")
					if err != nil {
						return nil, nil, err
					}
					if p.GetImageUrl().Detail != nil {
						dropped["messages[].content[].image_url.detail"] = true
					}
					parts = append(parts, part{Kind: "file", File: fp})
				}
			}
		}
	}
	if len(parts) == 0 {
		return nil, nil, &faults.Error{Reason: faults.InvalidRequest, Param: "messages",
			Message: "the request holds no text or image to send to the A2A agent"}
	}
	id := requestID(opts.RequestID)
	r := rpcRequest{JSONRPC: "2.0", ID: id, Method: MethodSend, Params: sendParams{
		Message:       message{Kind: "message", MessageID: id + "-msg", Role: "user", Parts: parts},
		Configuration: &configuration{AcceptedOutputModes: acceptedOutputModes},
	}}
	if opts.Stream {
		r.Method = MethodStream
	} else {
		blocking := true
		r.Params.Configuration.Blocking = &blocking
	}
	body, err := json.Marshal(&r)
	if err != nil {
		return nil, nil, faults.Wrap(faults.Internal, err, "internal error")
	}
	names := make([]string, 0, len(dropped))
	for k := range dropped {
		names = append(names, k)
	}
	sort.Strings(names)
	return body, names, nil
}

// appendText adds a text part unless text is empty (an assistant turn of
// only tool calls has none).
func appendText(parts []part, prefix, text string) []part {
	if text == "" {
		return parts
	}
	text = prefix + text
	return append(parts, part{Kind: "text", Text: &text})
}

// imagePart converts an OpenAI image URL: a base64 data: URI → bytes and
// mimeType (image/jpg normalized to image/jpeg), an http or https URL → uri.
func imagePart(u, param string) (*filePart, error) {
	switch {
	case strings.HasPrefix(u, "data:"):
		meta, data, ok := strings.Cut(u[len("data:"):], ",")
		mt, isB64 := strings.CutSuffix(meta, ";base64")
		if !ok || !isB64 {
			return nil, &faults.Error{Reason: faults.InvalidRequest, Param: param,
				Message: "an image data: URI must be base64 (data:<type>;base64,...)"}
		}
		mt = strings.ToLower(strings.TrimSpace(mt))
		if mt == "image/jpg" {
			mt = "image/jpeg"
		}
		return &filePart{Bytes: data, MimeType: mt}, nil
	case strings.HasPrefix(u, "https://"), strings.HasPrefix(u, "http://"):
		return &filePart{URI: u}, nil
	}
	return nil, &faults.Error{Reason: faults.InvalidRequest, Param: param,
		Message: "an image URL must be a data: URI or an http(s) URL, got " + strconv.Quote(cut(u, 16))}
}

// cut returns s cut to n bytes.
func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
