package a2a

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
)

var decodeOpts = DecodeOptions{Backend: "agentx", Model: "agentx", Created: 1700000000}

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
