package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// This file is the A2A wire (--wire a2a): JSON-RPC 2.0 at the root path,
// methods message/send and message/stream of the Agent2Agent protocol
// (https://a2a-protocol.org/latest/specification/), and the agent card at
// GET /.well-known/agent-card.json (and agent.json, its 0.2 name). Shapes
// follow the recorded answers in server/backends/a2a/testdata.

// JSON-RPC 2.0 and A2A error codes, per
// https://www.jsonrpc.org/specification#error_object and the A2A spec.
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
	rpcInternalError  = -32603
	a2aTaskNotFound   = -32001
)

// rpcRequest is a JSON-RPC 2.0 request.
type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// rpcResponse is a JSON-RPC 2.0 response: Result or Error.
type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// rpcError is a JSON-RPC 2.0 error object.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// a2aMessage is an A2A Message, in and out, its fields in the order the
// recorded answers give them.
type a2aMessage struct {
	Kind      string    `json:"kind"`
	MessageID string    `json:"messageId"`
	Role      string    `json:"role"`
	ContextID string    `json:"contextId,omitempty"`
	TaskID    string    `json:"taskId,omitempty"`
	Parts     []a2aPart `json:"parts"`
}

// a2aPart is a Part: kind text (Text), file (File) or data (Data).
type a2aPart struct {
	Kind string          `json:"kind"`
	Text string          `json:"text,omitempty"`
	File json.RawMessage `json:"file,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`
}

// a2aStatus is a TaskStatus: the state, an optional message, a timestamp.
type a2aStatus struct {
	State     string      `json:"state"`
	Message   *a2aMessage `json:"message,omitempty"`
	Timestamp string      `json:"timestamp,omitempty"`
}

// a2aArtifact is an Artifact: an id, an optional name, its parts.
type a2aArtifact struct {
	ArtifactID string    `json:"artifactId"`
	Name       string    `json:"name,omitempty"`
	Parts      []a2aPart `json:"parts"`
}

// a2aTask is a Task answer.
type a2aTask struct {
	ID        string         `json:"id"`
	ContextID string         `json:"contextId"`
	Status    a2aStatus      `json:"status"`
	Artifacts []a2aArtifact  `json:"artifacts,omitempty"`
	History   []a2aMessage   `json:"history"`
	Kind      string         `json:"kind"`
	Metadata  map[string]any `json:"metadata"`
}

// a2aStatusUpdate is a TaskStatusUpdateEvent of message/stream.
type a2aStatusUpdate struct {
	TaskID    string    `json:"taskId"`
	ContextID string    `json:"contextId"`
	Kind      string    `json:"kind"`
	Status    a2aStatus `json:"status"`
	Final     bool      `json:"final"`
}

// a2aArtifactUpdate is a TaskArtifactUpdateEvent of message/stream.
type a2aArtifactUpdate struct {
	TaskID    string      `json:"taskId"`
	ContextID string      `json:"contextId"`
	Kind      string      `json:"kind"`
	Artifact  a2aArtifact `json:"artifact"`
	Append    bool        `json:"append"`
	LastChunk bool        `json:"lastChunk"`
}

// writeRPC writes one JSON-RPC response with HTTP status.
func writeRPC(w http.ResponseWriter, status int, resp rpcResponse) {
	resp.JSONRPC = "2.0"
	if len(resp.ID) == 0 {
		resp.ID = json.RawMessage("null")
	}
	writeJSON(w, status, resp)
}

// serveA2A serves the agent card to anyone, then checks the bearer token
// (when --require-bearer is set), applies
// the header hooks (their errors are JSON-RPC errors with the HTTP status
// asked for) and serves the agent card and the JSON-RPC endpoint.
func (h *handler) serveA2A(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, message, _ string) {
		writeRPC(w, status, rpcResponse{Error: &rpcError{Code: rpcInternalError, Message: message}})
	}
	if r.Method == http.MethodGet && (r.URL.Path == "/.well-known/agent-card.json" || r.URL.Path == "/.well-known/agent.json") {
		// The card is public, as agent discovery wants it.
		h.agentCard(w, r)
		return
	}
	if !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="flexway-sample"`)
		fail(http.StatusUnauthorized, "Missing or wrong bearer token: send \"Authorization: Bearer <token>\" with the token given to --require-bearer.", "")
		return
	}
	if !headerHooks(r, fail) {
		return
	}
	switch {
	case r.URL.Path != "/":
		fail(http.StatusNotFound, fmt.Sprintf("Not found: %s %s. This sample serves JSON-RPC at POST / and its card at GET /.well-known/agent-card.json.", r.Method, r.URL.Path), "")
		return
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		fail(http.StatusMethodNotAllowed, fmt.Sprintf("Method %s is not allowed on /; use POST.", r.Method), "")
		return
	}
	var req rpcRequest
	if msg, status := readJSON(w, r, &req); msg != "" {
		code := rpcParseError
		if status != http.StatusBadRequest {
			code = rpcInvalidRequest
		}
		writeRPC(w, http.StatusOK, rpcResponse{Error: &rpcError{Code: code, Message: "Parse error: " + msg}})
		return
	}
	reply := func(e rpcError) { writeRPC(w, http.StatusOK, rpcResponse{ID: req.ID, Error: &e}) }
	if req.JSONRPC != "2.0" || req.Method == "" {
		reply(rpcError{rpcInvalidRequest, "Invalid Request: jsonrpc must be \"2.0\" and method must be set"})
		return
	}
	switch req.Method {
	case "message/send", "message/stream":
	case "tasks/get", "tasks/cancel", "tasks/resubscribe":
		reply(rpcError{a2aTaskNotFound, "Task not found: the sample keeps no tasks"})
		return
	default:
		reply(rpcError{rpcMethodNotFound, "Method not found"})
		return
	}
	var params struct {
		Message *a2aMessage `json:"message"`
	}
	if err := json.Unmarshal(req.Params, &params); err != nil || params.Message == nil || len(params.Message.Parts) == 0 {
		reply(rpcError{rpcInvalidParams, "Invalid parameters: params.message with at least one part is required"})
		return
	}
	for i, p := range params.Message.Parts {
		if p.Kind != "text" && p.Kind != "file" && p.Kind != "data" {
			reply(rpcError{rpcInvalidParams, fmt.Sprintf("Invalid parameters: message.parts[%d] is not supported", i)})
			return
		}
	}
	h.a2aAnswer(w, r, req, params.Message)
}

// a2aAnswer answers message/send with a Message, or with a completed Task
// holding an artifact when the user text contains the word "task", and
// message/stream with a Task's events.
func (h *handler) a2aAnswer(w http.ResponseWriter, r *http.Request, req rpcRequest, in *a2aMessage) {
	lastUser := a2aUserText(in.Parts)
	text := wireAnswer(h.opts.models[0], wireA2A, lastUser)
	n := h.seq.Add(1)
	taskID, contextID := fmt.Sprintf("task-sample-%d", n), in.ContextID
	if contextID == "" {
		contextID = fmt.Sprintf("ctx-sample-%d", n)
	}
	history := []a2aMessage{*in}
	history[0].TaskID, history[0].ContextID = taskID, contextID
	now := time.Now().UTC().Format(time.RFC3339)
	artifactID := fmt.Sprintf("artifact-sample-%d", n)
	if req.Method == "message/send" {
		var result any = a2aMessage{Kind: "message", MessageID: fmt.Sprintf("msg-sample-%d", n), Role: "agent", ContextID: contextID, Parts: []a2aPart{{Kind: "text", Text: text}}}
		if strings.Contains(strings.ToLower(lastUser), "task") {
			result = a2aTask{
				ID: taskID, ContextID: contextID, Status: a2aStatus{State: "completed", Timestamp: now},
				Artifacts: []a2aArtifact{{ArtifactID: artifactID, Name: "answer", Parts: []a2aPart{{Kind: "text", Text: text}}}},
				History:   history, Kind: "task", Metadata: map[string]any{},
			}
		}
		writeRPC(w, http.StatusOK, rpcResponse{ID: req.ID, Result: result})
		return
	}
	s := startSSE(w, r)
	send := func(result any) bool {
		b, err := json.Marshal(rpcResponse{JSONRPC: "2.0", ID: req.ID, Result: result})
		return err == nil && s.send(fmt.Appendf(nil, "data: %s\n\n", b))
	}
	working := &a2aMessage{Kind: "message", MessageID: fmt.Sprintf("status-sample-%d", n), Role: "agent", Parts: []a2aPart{{Kind: "text", Text: "Working on it..."}}}
	if !send(a2aTask{ID: taskID, ContextID: contextID, Status: a2aStatus{State: "submitted", Timestamp: now}, History: history, Kind: "task", Metadata: map[string]any{}}) ||
		!send(a2aStatusUpdate{TaskID: taskID, ContextID: contextID, Kind: "status-update", Status: a2aStatus{State: "working", Message: working}}) {
		return
	}
	pieces := splitChunks(text, h.opts.chunks)
	for i, p := range pieces {
		ev := a2aArtifactUpdate{
			TaskID: taskID, ContextID: contextID, Kind: "artifact-update",
			Artifact: a2aArtifact{ArtifactID: artifactID, Parts: []a2aPart{{Kind: "text", Text: p}}},
			Append:   i > 0, LastChunk: i == len(pieces)-1,
		}
		if !s.pause(h) || !send(ev) {
			return
		}
	}
	send(a2aStatusUpdate{TaskID: taskID, ContextID: contextID, Kind: "status-update", Status: a2aStatus{State: "completed", Timestamp: time.Now().UTC().Format(time.RFC3339)}, Final: true})
}

// a2aUserText returns the last user turn of a message's text parts: the
// parts from the last one that starts with "user: " (the prefix Flexway's
// a2a kind writes before each turn of a chat history), that prefix removed,
// or every text part when none has it.
func a2aUserText(parts []a2aPart) string {
	start, sep := 0, " "
	for i, p := range parts {
		if p.Kind == "text" && strings.HasPrefix(p.Text, "user: ") {
			start, sep = i, ""
		}
	}
	texts := make([]string, 0, len(parts)-start)
	for _, p := range parts[start:] {
		switch p.Kind {
		case "text":
			texts = append(texts, p.Text)
		case "file":
			texts = append(texts, "[an image]")
		}
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.Join(texts, sep), "user: "))
}

// agentCard serves the agent card: the sample's name, the JSON-RPC URL it
// is reached at, streaming true, text in and out, and one echo skill.
func (h *handler) agentCard(w http.ResponseWriter, r *http.Request) {
	url := "http://" + r.Host + "/"
	var buf bytes.Buffer
	fmt.Fprintf(&buf, `{"protocolVersion":"0.3.0","name":"flexway-sample","description":"A local sample agent, not a real one: it echoes the start of your message.","url":%q,"preferredTransport":"JSONRPC","version":"1.0.0","capabilities":{"streaming":true},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],"skills":[{"id":"echo","name":"Echo","description":"Says it is a sample and echoes your message.","tags":["sample"]}]}`, url)
	writeJSON(w, http.StatusOK, json.RawMessage(buf.Bytes()))
}
