package a2a

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// rpcResponse is a JSON-RPC 2.0 response (A2A SendMessageResponse or one
// SendStreamingMessageResponse event): a result or an error, and the id
// of the request it answers (see [DecodeOptions.checkID]).
type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *rpcError       `json:"error"`
}

// unaryResponse is [rpcResponse] with its result decoded in the same pass.
type unaryResponse struct {
	ID     json.RawMessage `json:"id"`
	Result *result         `json:"result"`
	Error  *rpcError       `json:"error"`
}

// rpcError is a JSON-RPC 2.0 error object (A2A JSONRPCError).
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// result is the union of the results Flexway reads, told apart by kind:
// "message" (Message), "task" (Task), "status-update"
// (TaskStatusUpdateEvent), "artifact-update" (TaskArtifactUpdateEvent).
type result struct {
	Kind string `json:"kind"`
	// Message.
	MessageID string       `json:"messageId"`
	Role      string       `json:"role"`
	Parts     []answerPart `json:"parts"`
	// Task.
	ID        string     `json:"id"`
	Status    *status    `json:"status"`
	Artifacts []artifact `json:"artifacts"`
	// History is only read when a completed task has no other answer: it
	// echoes the whole conversation.
	History json.RawMessage `json:"history"`
	// Events.
	TaskID    string    `json:"taskId"`
	Final     bool      `json:"final"`
	Artifact  *artifact `json:"artifact"`
	Append    bool      `json:"append"`
	LastChunk bool      `json:"lastChunk"`
}

// answer is an A2A Message read from an answer.
type answer struct {
	MessageID string       `json:"messageId"`
	Role      string       `json:"role"`
	Parts     []answerPart `json:"parts"`
}

// answerPart is an A2A Part read from an answer; only text parts (and the
// text of data parts, as JSON) become content.
type answerPart struct {
	Kind string          `json:"kind"`
	Text *string         `json:"text"`
	Data json.RawMessage `json:"data"`
}

// status is A2A's TaskStatus.
type status struct {
	State   string  `json:"state"`
	Message *answer `json:"message"`
}

// artifact is A2A's Artifact.
type artifact struct {
	ArtifactID string       `json:"artifactId"`
	Parts      []answerPart `json:"parts"`
}

// The A2A TaskState values.
const (
	stateSubmitted     = "submitted"
	stateWorking       = "working"
	stateInputRequired = "input-required"
	stateAuthRequired  = "auth-required"
	stateCompleted     = "completed"
	stateCanceled      = "canceled"
	stateFailed        = "failed"
	stateRejected      = "rejected"
)

// normState reads a TaskState, tolerating the A2A 1.0 spelling
// (TASK_STATE_INPUT_REQUIRED) beside 0.2/0.3's (input-required).
func normState(s string) string {
	if strings.HasPrefix(s, "TASK_STATE_") || strings.ContainsRune(s, '_') || strings.ToUpper(s) == s {
		s = strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s, "TASK_STATE_")), "_", "-")
	}
	return s
}

// DecodeOptions are what [Decode] and [NewStreamDecoder] fill the canonical
// answer with, which an A2A answer does not carry.
type DecodeOptions struct {
	// Backend is the backend's name, for error messages.
	Backend string
	// Model is the model the completion is reported as (the model sent).
	Model string
	// Created is the completion's Unix time in seconds.
	Created int64
	// RequestID is the JSON-RPC id the request was sent with, the
	// [Options.RequestID] given to [Encode] ("1" when empty, as there):
	// an answer, or a stream event, of another id is not this call's.
	RequestID string
}

// requestID is the JSON-RPC id of a request whose RequestID option is id:
// id itself, "1" when empty ([Options.RequestID], [DecodeOptions.RequestID]).
func requestID(id string) string {
	if id == "" {
		return "1"
	}
	return id
}

// checkID is nil when raw, the JSON value of a response's `id` member (nil
// when absent), names the request this call sent: a JSON string equal to
// [DecodeOptions.RequestID] (a number never equals the string sent). A
// null id is only valid for an error the agent could not tie to a request
// (https://www.jsonrpc.org/specification#response_object, a -32700 parse
// error): with isError (the response holds an error object) it is the
// agent's answer to this call; a null-id result, another id or none is a
// [faults.UpstreamError] (502, which the fallback rules may act on before
// content): someone else's answer, neither served nor charged. The cause
// gives the id's shape and size, not its text.
func (o DecodeOptions) checkID(raw json.RawMessage, isError bool) *faults.Error {
	raw = bytes.TrimSpace(raw)
	want := requestID(o.RequestID)
	switch {
	case len(raw) > 0 && raw[0] == '"':
		var got string
		if json.Unmarshal(raw, &got) == nil && (got == want || got == sentID(want)) {
			return nil
		}
	case string(raw) == "null" && isError:
		return nil
	}
	shape := "absent"
	switch {
	case string(raw) == "null":
		shape = "null"
	case len(raw) > 0 && raw[0] == '"':
		shape = fmt.Sprintf("a string of %d bytes", len(raw)-2)
	case len(raw) > 0:
		shape = fmt.Sprintf("a non-string of %d bytes", len(raw))
	}
	return faults.Wrap(faults.UpstreamError, fmt.Errorf("a2a JSON-RPC response id %s, not the request's", shape),
		"upstream "+o.Backend+" answered another JSON-RPC request (its id is not this call's)")
}

// sentID is id as the agent read it from the request [Encode] wrote with
// encoding/json (invalid UTF-8 replaced by U+FFFD).
func sentID(id string) string {
	b, _ := json.Marshal(id)
	var s string
	_ = json.Unmarshal(b, &s)
	return s
}

// Decode reads the JSON-RPC body of a 2xx answer to `message/send` as a chat
// completion of one choice: id "a2a-" + the Task's id or the Message's
// messageId, object "chat.completion", o.Model and o.Created, finish_reason
// "stop", usage nil (an agent reports no tokens). Text parts are joined with
// "\n"; a data part is written as its JSON text; file parts are not content.
//
// Errors are *faults.Error. A JSON-RPC error object (code per
// https://a2a-protocol.org/v0.3.0/specification/#8-error-handling) of code
// -32602 (invalid params) or -32005 (ContentTypeNotSupported) is the call's
// own request: [faults.UpstreamStatus] 400 whose body is the OpenAI envelope
// {"error":{"message": <the agent's message>, "type":
// "invalid_request_error", "code": "a2a_32602"}}; any other code (-32700,
// -32600: Flexway's own request malformed; -32601, -32603, -32001..-32004,
// -32006, implementation-defined codes) is [faults.UpstreamError] (502),
// which the fallback rules may act on, the agent's message neither relayed
// nor logged (the cause keeps the code and the data's size). A response
// whose id is not o.RequestID's (a null id only passes on an error) is
// [faults.UpstreamError]: it answers another request. A task `failed`,
// `canceled`, `submitted`, `working`, `auth-required` without a status
// message text (no question to relay) or of unknown state is
// [faults.UpstreamError] (502); `rejected` too, wrapping
// [backends.ErrRequestCaused] (the agent declined this request: no fallback,
// no breaker count); a body that is not a JSON-RPC response holding a
// Message or a Task is [faults.UpstreamError].
func Decode(body []byte, o DecodeOptions) (*flexwayv1.ChatCompletion, error) {
	return decode(body, o, false)
}

// decode is [Decode], with the fast path off when slowOnly (tests).
func decode(body []byte, o DecodeOptions, slowOnly bool) (*flexwayv1.ChatCompletion, error) {
	if !slowOnly {
		if c, ok := fastDecode(body, o); ok {
			return c, nil
		}
	}
	var resp unaryResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, faults.Wrap(faults.UpstreamError, err, "upstream "+o.Backend+" sent an unreadable answer")
	}
	if err := o.checkID(resp.ID, resp.Error != nil); err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, rpcFault(o.Backend, resp.Error)
	}
	if resp.Result == nil {
		return nil, faults.New(faults.UpstreamError, "upstream %s answered neither a result nor an error", o.Backend)
	}
	text, id, err := answerText(resp.Result, o.Backend)
	if err != nil {
		return nil, err
	}
	stop := "stop"
	return &flexwayv1.ChatCompletion{
		Id: "a2a-" + id, Object: "chat.completion", Created: o.Created, Model: o.Model,
		Choices: []*flexwayv1.ChatCompletionChoice{{
			Message:      &flexwayv1.ChatMessage{Role: "assistant", Content: &flexwayv1.ChatMessage_Text{Text: text}},
			FinishReason: &stop,
		}},
	}, nil
}

// answerText is the answer's content and id of a Message or a Task result.
func answerText(r *result, backend string) (string, string, error) {
	switch {
	case r.Kind == "message" || r.Kind == "" && r.Status == nil && r.Parts != nil:
		return joinParts(r.Parts), r.MessageID, nil
	case r.Kind == "task" || r.Kind == "" && r.Status != nil:
		if r.Status == nil {
			return "", "", faults.New(faults.UpstreamError, "upstream %s answered a task without a status", backend)
		}
		switch st := normState(r.Status.State); st {
		case stateCompleted:
			var b []byte
			for _, a := range r.Artifacts {
				b = joinPartsBytes(b, a.Parts)
			}
			if len(b) == 0 && r.Status.Message != nil {
				b = joinPartsBytes(b, r.Status.Message.Parts)
			}
			var history []answer
			if len(b) == 0 && len(r.History) > 0 && json.Unmarshal(r.History, &history) != nil {
				return "", "", faults.New(faults.UpstreamError, "upstream %s answered a task with an unreadable history", backend)
			}
			for i := len(history) - 1; i >= 0 && len(b) == 0; i-- {
				if history[i].Role == "agent" || history[i].Role == "ROLE_AGENT" {
					b = joinPartsBytes(b, history[i].Parts)
				}
			}
			return string(b), r.ID, nil
		case stateInputRequired, stateAuthRequired:
			text := joinParts(partsOf(r.Status.Message))
			if text == "" && st == stateAuthRequired {
				return "", "", taskError(backend, st, r.Status.Message)
			}
			return text, r.ID, nil
		default:
			return "", "", taskError(backend, st, r.Status.Message)
		}
	}
	return "", "", faults.New(faults.UpstreamError, "upstream %s answered a result of kind %q, neither a message nor a task", backend, cut(r.Kind, 32))
}

// taskError is the error of a task that ended without an answer.
func taskError(backend, state string, m *answer) *faults.Error {
	cause := fmt.Errorf("a2a task state %q, status message of %d bytes", cut(state, 32), len(joinParts(partsOf(m))))
	switch state {
	case stateRejected:
		return faults.Wrap(faults.UpstreamError, fmt.Errorf("%w: %w", backends.ErrRequestCaused, cause),
			"upstream "+backend+" rejected the task")
	case stateFailed:
		return faults.Wrap(faults.UpstreamError, cause, "upstream "+backend+" failed the task")
	case stateCanceled:
		return faults.Wrap(faults.UpstreamError, cause, "upstream "+backend+" canceled the task")
	case stateSubmitted, stateWorking:
		return faults.Wrap(faults.UpstreamError, cause, "upstream "+backend+" answered before the task completed")
	case stateAuthRequired:
		return faults.Wrap(faults.UpstreamError, cause, "upstream "+backend+" asked for authentication without saying what it needs")
	}
	return faults.Wrap(faults.UpstreamError, cause, "upstream "+backend+" answered a task in an unknown state")
}

// partsOf is m's parts, nil for a nil m.
func partsOf(m *answer) []answerPart {
	if m == nil {
		return nil
	}
	return m.Parts
}

// joinParts is the text of parts joined with "\n" (see [Decode]).
func joinParts(parts []answerPart) string {
	return string(joinPartsBytes(nil, parts))
}

// joinPartsBytes appends the text of parts to dst, each after a "\n" when
// dst is not empty.
func joinPartsBytes(dst []byte, parts []answerPart) []byte {
	for _, p := range parts {
		var t []byte
		switch {
		case p.Text != nil && (p.Kind == "text" || p.Kind == ""):
			t = []byte(*p.Text)
		case len(p.Data) > 0 && (p.Kind == "data" || p.Kind == ""):
			t = p.Data
		}
		if len(t) == 0 {
			continue
		}
		if len(dst) > 0 {
			dst = append(dst, '\n')
		}
		dst = append(dst, t...)
	}
	return dst
}

// The JSON-RPC 2.0 and A2A error codes that are the call's own request.
const (
	codeInvalidParams           = -32602 // JSON-RPC invalid params
	codeContentTypeNotSupported = -32005 // A2A ContentTypeNotSupportedError
)

// rpcFault maps a JSON-RPC error object of an agent's answer (in a 2xx body
// or a stream event):
//   - -32602 invalid params and -32005 ContentTypeNotSupported (an input the
//     agent does not take, such as an image) are the call's own request: an
//     upstream 400 ([faults.UpstreamStatus]) whose body is the OpenAI error
//     envelope {"error":{"message": <the agent's message>, "type":
//     "invalid_request_error", "code": "a2a_<code>"}};
//   - every other code (-32700 and -32600, which say Flexway's own request
//     was malformed, -32601 method not found, -32603 internal, -32001..-32004,
//     -32006, and any implementation-defined code) is the backend's:
//     [faults.UpstreamError] (502), which the fallback rules may act on.
//
// The agent's message is only relayed to the client, for a 400; it may
// quote the prompt, so the cause (for logs) keeps only the code and the
// size of the error's data, as the anthropic and gemini kinds do.
func rpcFault(backend string, e *rpcError) *faults.Error {
	cause := fmt.Errorf("a2a JSON-RPC error %d, %d data bytes", e.Code, len(e.Data))
	switch e.Code {
	case codeInvalidParams, codeContentTypeNotSupported:
		return &faults.Error{
			Reason: faults.UpstreamStatus, Message: "upstream " + backend + " refused the request: " + cut(e.Message, 256),
			UpstreamHTTPStatus: http.StatusBadRequest, UpstreamContentType: "application/json",
			UpstreamBody: openaiwire.AppendError(nil, e.Message, "invalid_request_error", "", fmt.Sprintf("a2a_%d", -e.Code)),
			Err:          cause,
		}
	}
	return faults.Wrap(faults.UpstreamError, cause, fmt.Sprintf("upstream %s answered JSON-RPC error %d", backend, e.Code))
}

// DecodeError maps a non-2xx HTTP answer of an agent, status being its
// HTTP status, body its (first MiB of) body and retryAfter the seconds of
// its Retry-After header (0 when absent):
//   - 401 and 403: the agent refused Flexway's own credentials:
//     [faults.UpstreamError] wrapping [backends.ErrUpstreamAuth], the body
//     neither kept nor logged;
//   - 429: [faults.UpstreamStatus] 429 with RetryAfterSeconds, body the OpenAI
//     envelope of type "requests", code "rate_limit_exceeded";
//   - any other 4xx: [faults.UpstreamStatus] keeping the status, body the
//     OpenAI envelope of type "invalid_request_error" whose message is the
//     JSON-RPC error's message when the body holds one, else "upstream
//     answered <status>" (an HTML or text body is never relayed);
//   - 529 and every 5xx (and any other status): [faults.UpstreamError] (502),
//     which the fallback rules act on, whatever the body.
func DecodeError(backend string, status int, body []byte, retryAfter int64) *faults.Error {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return &faults.Error{Reason: faults.UpstreamError, Message: "the backend refused the gateway's credentials",
			Err: fmt.Errorf("upstream %s status %d, check ai.backends.%s.auth: %w", backend, status, backend, backends.ErrUpstreamAuth)}
	case status >= 400 && status <= 499:
		msg := fmt.Sprintf("upstream %s answered %d", backend, status)
		var resp rpcResponse
		if json.Unmarshal(bytes.TrimSpace(body), &resp) == nil && resp.Error != nil && resp.Error.Message != "" {
			msg = resp.Error.Message
		}
		typ, code := "invalid_request_error", ""
		if status == http.StatusTooManyRequests {
			typ, code = "requests", "rate_limit_exceeded"
		}
		return &faults.Error{Reason: faults.UpstreamStatus, Message: fmt.Sprintf("upstream %s answered %d", backend, status),
			RetryAfterSeconds: retryAfter, UpstreamHTTPStatus: status, UpstreamContentType: "application/json",
			UpstreamBody: openaiwire.AppendError(nil, msg, typ, "", code)}
	}
	return &faults.Error{Reason: faults.UpstreamError, Message: fmt.Sprintf("upstream %s answered %d", backend, status),
		RetryAfterSeconds: retryAfter, Err: fmt.Errorf("upstream %s status %d, %d body bytes", backend, status, len(body))}
}
