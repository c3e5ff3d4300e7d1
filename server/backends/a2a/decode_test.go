package a2a

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
)

var decodeOpts = DecodeOptions{Backend: "agentx", Model: "agentx", Created: 1700000000, RequestID: "call-1"}

// TestDecode covers the issue's `a2a` answer bullet: both the Message and
// the Task shapes, a Task's artifacts as the content, input-required as a
// normal answer with the agent's question, and no usage (estimated by the
// caller).
func TestDecode(t *testing.T) {
	for _, tc := range []struct{ fixture, id, content string }{
		{"send_message.json", "a2a-9d1c2f0a-agent", "It is sunny in Paris,\n22 degrees."},
		{"send_task_completed.json", "a2a-363422be-b0f9-4692-a24d-278670e7c7f1",
			"Why did the chicken cross the road?\nTo get to the other side!\n{\"temperature\":22}"},
		{"send_task_completed_text.json", "a2a-363422be-b0f9-4692-a24d-278670e7c7f1",
			"Why did the chicken cross the road?\nTo get to the other side!\nBa dum tss."},
		{"send_task_history_only.json", "a2a-t-2", "Hello there."},
		{"send_task_input_required.json", "a2a-3f36680c-7f37-4a5f-945e-d78981fafd36", "Where would you like to fly from?"},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			c, err := Decode(fixture(t, tc.fixture), decodeOpts)
			if err != nil {
				t.Fatal(err)
			}
			if c.GetId() != tc.id || c.GetObject() != "chat.completion" || c.GetModel() != "agentx" || c.GetCreated() != 1700000000 {
				t.Errorf("envelope %q %q %q %d", c.GetId(), c.GetObject(), c.GetModel(), c.GetCreated())
			}
			if len(c.GetChoices()) != 1 {
				t.Fatalf("%d choices", len(c.GetChoices()))
			}
			ch := c.GetChoices()[0]
			if ch.GetIndex() != 0 || ch.GetFinishReason() != "stop" || ch.GetMessage().GetRole() != "assistant" {
				t.Errorf("choice %v", ch)
			}
			if got := ch.GetMessage().GetText(); got != tc.content {
				t.Errorf("content %q, want %q", got, tc.content)
			}
			if c.Usage != nil {
				t.Errorf("usage %v, want none: an agent reports no tokens", c.Usage)
			}
		})
	}
}

// TestDecodeErrors covers task states failed/rejected (and the others
// that carry no answer) → 502, and the "Every kind" mapping of JSON-RPC
// error objects in a 200: the request's own fault keeps a 400 with the
// agent's message in the OpenAI envelope; everything else is a 502 the
// fallback rules act on; garbage is a 502.
func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		fixture        string
		status         int
		unavailable    bool
		requestCaused  bool
		relayedMessage string
	}{
		{"send_task_failed.json", 502, true, false, ""},
		{"send_task_rejected.json", 502, false, true, ""},
		{"send_task_working.json", 502, true, false, ""},
		{"send_error_internal.json", 502, true, false, ""},
		{"send_error_method_not_found.json", 502, true, false, ""},
		{"send_error_invalid_agent_response.json", 502, true, false, ""},
		{"send_error_invalid_params.json", 400, false, false, "Invalid parameters: message.parts[1] is not supported"},
		{"send_error_content_type.json", 400, false, false, "Incompatible content types"},
		{"send_garbage.html", 502, true, false, ""},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			_, err := Decode(fixture(t, tc.fixture), decodeOpts)
			fe := asFault(t, err)
			if fe.HTTPStatus() != tc.status {
				t.Errorf("status %d, want %d (%s: %s)", fe.HTTPStatus(), tc.status, fe.Reason, fe.Message)
			}
			if got := backends.Unavailable(err); got != tc.unavailable {
				t.Errorf("Unavailable %v, want %v", got, tc.unavailable)
			}
			if got := errors.Is(err, backends.ErrRequestCaused); got != tc.requestCaused {
				t.Errorf("ErrRequestCaused %v, want %v", got, tc.requestCaused)
			}
			if tc.relayedMessage != "" {
				checkEnvelope(t, fe, "invalid_request_error", tc.relayedMessage)
			}
			if fe.Reason == faults.UpstreamError && len(fe.UpstreamBody) != 0 {
				t.Errorf("a 502 keeps an upstream body")
			}
		})
	}
}

// checkEnvelope checks that fe relays an OpenAI error envelope.
func checkEnvelope(t *testing.T, fe *faults.Error, typ, message string) {
	t.Helper()
	var env struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if fe.Reason != faults.UpstreamStatus || fe.UpstreamContentType != "application/json" {
		t.Fatalf("reason %s, content type %q", fe.Reason, fe.UpstreamContentType)
	}
	if err := json.Unmarshal(fe.UpstreamBody, &env); err != nil {
		t.Fatalf("body %q: %v", fe.UpstreamBody, err)
	}
	if env.Error.Type != typ || env.Error.Message != message {
		t.Errorf("envelope %+v, want type %q message %q", env.Error, typ, message)
	}
}

// TestDecodeError covers the "Every kind" HTTP mapping: a 4xx keeps its
// status and message in the OpenAI envelope, 401/403 are Flexway's own
// credentials (502, no fallback), 429 is relayed with Retry-After, 529
// and other 5xx (HTML or not) are 502s the fallback acts on.
func TestDecodeError(t *testing.T) {
	rpc := fixture(t, "send_error_invalid_params.json")
	html := fixture(t, "send_garbage.html")
	for _, tc := range []struct {
		name        string
		status      int
		body        []byte
		want        int
		unavailable bool
		auth        bool
		typ, msg    string
	}{
		{"400 with a JSON-RPC error", 400, rpc, 400, false, false, "invalid_request_error", "Invalid parameters: message.parts[1] is not supported"},
		{"404 HTML", 404, html, 404, false, false, "invalid_request_error", "upstream agentx answered 404"},
		{"429", 429, []byte(`slow down`), 429, false, false, "requests", "upstream agentx answered 429"},
		{"401", 401, []byte(`{"error":"bad key sk-123"}`), 502, false, true, "", ""},
		{"403", 403, nil, 502, false, true, "", ""},
		{"500 JSON-RPC", 500, fixture(t, "send_error_internal.json"), 502, true, false, "", ""},
		{"502 HTML", 502, html, 502, true, false, "", ""},
		{"529 overloaded", 529, []byte(`{"type":"error","error":{"type":"overloaded_error"}}`), 502, true, false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := DecodeError("agentx", tc.status, tc.body, 7)
			if fe.HTTPStatus() != tc.want {
				t.Errorf("status %d, want %d", fe.HTTPStatus(), tc.want)
			}
			if got := backends.Unavailable(fe); got != tc.unavailable {
				t.Errorf("Unavailable %v, want %v", got, tc.unavailable)
			}
			if got := errors.Is(fe, backends.ErrUpstreamAuth); got != tc.auth {
				t.Errorf("ErrUpstreamAuth %v, want %v", got, tc.auth)
			}
			if tc.typ != "" {
				checkEnvelope(t, fe, tc.typ, tc.msg)
				if fe.RetryAfterSeconds != 7 {
					t.Errorf("Retry-After %d", fe.RetryAfterSeconds)
				}
			}
			if tc.auth && (len(fe.UpstreamBody) != 0 || fe.Message != "the backend refused the gateway's credentials") {
				t.Errorf("auth refusal keeps %q / says %q", fe.UpstreamBody, fe.Message)
			}
		})
	}
}

// TestDecodeFastPath checks that the common answers take the
// reflection-free path (the fuzz target checks it agrees with
// encoding/json).
func TestDecodeFastPath(t *testing.T) {
	for _, name := range []string{"send_message.json", "send_task_completed_text.json", "send_task_input_required.json"} {
		if _, ok := fastDecode(fixture(t, name), decodeOpts); !ok {
			t.Errorf("%s: not decoded by the fast path", name)
		}
	}
	// The completed fixture has a data part: encoding/json reads it.
	if _, ok := fastDecode(fixture(t, "send_task_completed.json"), decodeOpts); ok {
		t.Errorf("a data part taken by the fast path")
	}
}

// messageResult is a Message result of text "hi", for id tests.
const messageResult = `"result":{"kind":"message","role":"agent","messageId":"m1","parts":[{"kind":"text","text":"hi"}]}`

// TestDecodeResponseID covers the JSON-RPC 2.0 id rule
// (https://www.jsonrpc.org/specification#response_object): an answer is
// served only when its id is the string the request was sent with; a
// null id is only an error's (the agent's error, mapped as usual); any
// other id, a number, none or a null-id result is someone else's answer:
// a 502 the fallback rules may act on. Fast path and encoding/json agree.
func TestDecodeResponseID(t *testing.T) {
	for _, tc := range []struct {
		name, sent, body string
		status           int    // 0: served
		message          string // the fault's message
	}{
		{"same id", "call-1", `{"jsonrpc":"2.0","id":"call-1",` + messageResult + `}`, 0, ""},
		{"same id escaped", "call-1", `{"jsonrpc":"2.0","id":"call\u002d1",` + messageResult + `}`, 0, ""},
		{"default id 1", "", `{"jsonrpc":"2.0","id":"1",` + messageResult + `}`, 0, ""},
		{"id after the result", "call-1", `{"jsonrpc":"2.0",` + messageResult + `,"id":"call-1"}`, 0, ""},
		{"invalid UTF-8 sent as U+FFFD", "a\xffb", `{"jsonrpc":"2.0","id":"a\ufffdb",` + messageResult + `}`, 0, ""},
		{"another id", "call-1", `{"jsonrpc":"2.0","id":"not-yours",` + messageResult + `}`, 502, "upstream agentx answered another JSON-RPC request (its id is not this call's)"},
		{"number id never equals the string sent", "", `{"jsonrpc":"2.0","id":1,` + messageResult + `}`, 502, "upstream agentx answered another JSON-RPC request (its id is not this call's)"},
		{"null-id result", "call-1", `{"jsonrpc":"2.0","id":null,` + messageResult + `}`, 502, "upstream agentx answered another JSON-RPC request (its id is not this call's)"},
		{"no id", "call-1", `{"jsonrpc":"2.0",` + messageResult + `}`, 502, "upstream agentx answered another JSON-RPC request (its id is not this call's)"},
		{"upper-case ID member is the id", "call-1", `{"jsonrpc":"2.0","ID":"x",` + messageResult + `}`, 502, "upstream agentx answered another JSON-RPC request (its id is not this call's)"},
		{"another id's error", "call-1", `{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"bad"}}`, 502, "upstream agentx answered another JSON-RPC request (its id is not this call's)"},
		{"null-id parse error is the agent's", "call-1", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`, 502, "upstream agentx answered JSON-RPC error -32700"},
		{"null-id invalid params is the agent's", "call-1", `{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"bad"}}`, 400, "upstream agentx refused the request: bad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := decodeOpts
			o.RequestID = tc.sent
			for _, slow := range []bool{false, true} {
				c, err := decode([]byte(tc.body), o, slow)
				if tc.status == 0 {
					if err != nil || c.GetChoices()[0].GetMessage().GetText() != "hi" {
						t.Fatalf("slow %v: %v, %v; want the answer served", slow, c, err)
					}
					continue
				}
				fe := asFault(t, err)
				if c != nil || fe.HTTPStatus() != tc.status || fe.Message != tc.message {
					t.Fatalf("slow %v: %v, %d %q; want %d %q", slow, c, fe.HTTPStatus(), fe.Message, tc.status, tc.message)
				}
				if tc.status == 502 && !backends.Unavailable(err) {
					t.Errorf("slow %v: a 502 the fallback rules may not act on", slow)
				}
			}
		})
	}
}

// TestDecodeAuthRequired covers a Task in state auth-required: the
// agent's status message is its question, a normal answer; without one
// (no message, or no text in it) there is nothing to answer: a 502, not
// an empty success charged per call. input-required keeps answering.
func TestDecodeAuthRequired(t *testing.T) {
	task := func(status string) string {
		return `{"jsonrpc":"2.0","id":"call-1","result":{"kind":"task","id":"t1","contextId":"c1","status":` + status + `}}`
	}
	for _, tc := range []struct {
		name, body string
		content    string // served content, when err is false
		err        bool
	}{
		{"no message", task(`{"state":"auth-required"}`), "", true},
		{"A2A 1.0 spelling, no message", task(`{"state":"TASK_STATE_AUTH_REQUIRED"}`), "", true},
		{"message without text", task(`{"state":"auth-required","message":{"role":"agent","messageId":"m","parts":[{"kind":"file","file":{"uri":"https://x/y"}}]}}`), "", true},
		{"message with empty text", task(`{"state":"auth-required","message":{"role":"agent","messageId":"m","parts":[{"kind":"text","text":""}]}}`), "", true},
		{"message with text", task(`{"state":"auth-required","message":{"role":"agent","messageId":"m","parts":[{"kind":"text","text":"Sign in at https://x/login"}]}}`), "Sign in at https://x/login", false},
		{"input-required without message", task(`{"state":"input-required"}`), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, slow := range []bool{false, true} {
				c, err := decode([]byte(tc.body), decodeOpts, slow)
				if !tc.err {
					if err != nil || c.GetChoices()[0].GetMessage().GetText() != tc.content {
						t.Fatalf("slow %v: %v, %v; want content %q", slow, c, err, tc.content)
					}
					continue
				}
				fe := asFault(t, err)
				if c != nil || fe.Reason != faults.UpstreamError || !backends.Unavailable(err) ||
					fe.Message != "upstream agentx asked for authentication without saying what it needs" {
					t.Fatalf("slow %v: %v, %s %q; want a 502 the fallback may act on", slow, c, fe.Reason, fe.Message)
				}
			}
		})
	}
}

// TestDecodeRPCErrorCause covers the logged cause of a JSON-RPC error
// object: its code and the size of its data, never its message (the
// agent's text may quote the prompt); the 400's body still relays it.
func TestDecodeRPCErrorCause(t *testing.T) {
	for _, tc := range []struct{ body, cause string }{
		{`{"jsonrpc":"2.0","id":"call-1","error":{"code":-32603,"message":"cannot plan a trip to SECRET-PROMPT"}}`, "a2a JSON-RPC error -32603, 0 data bytes"},
		{`{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"SECRET-PROMPT","data":{"q":"SECRET-PROMPT"}}}`, "a2a JSON-RPC error -32001, 21 data bytes"},
		{`{"jsonrpc":"2.0","id":"call-1","error":{"code":-32602,"message":"SECRET-PROMPT is not a part"}}`, "a2a JSON-RPC error -32602, 0 data bytes"},
	} {
		fe := asFault(t, func() error { _, err := Decode([]byte(tc.body), decodeOpts); return err }())
		if fe.Err == nil || fe.Err.Error() != tc.cause {
			t.Errorf("%s: cause %v, want %q", tc.body, fe.Err, tc.cause)
		}
		if fe.Reason == faults.UpstreamStatus {
			checkEnvelope(t, fe, "invalid_request_error", "SECRET-PROMPT is not a part")
		}
	}
}
