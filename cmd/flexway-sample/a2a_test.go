package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// a2aRequest is a JSON-RPC request of method with the parts given.
func a2aRequest(method, parts string) string {
	return `{"jsonrpc":"2.0","id":"call-1","method":"` + method + `","params":{"message":{"kind":"message","messageId":"call-1-msg","role":"user","parts":` + parts +
		`},"configuration":{"acceptedOutputModes":["text/plain"],"blocking":true}}}`
}

// rpcAnswer is a decoded JSON-RPC response, as the tests read it.
type rpcAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      any             `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *rpcError       `json:"error"`
}

func TestA2AMessageSend(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, wireOptions(wireA2A))
	// A chat history as Flexway's a2a kind writes it: the last user turn is echoed.
	resp, body := do(t, srv, http.MethodPost, "/", a2aRequest("message/send",
		`[{"kind":"text","text":"system: You are terse."},{"kind":"text","text":"user: Book a table."},{"kind":"text","text":"assistant: For how many?"},{"kind":"text","text":"user: Four, "},{"kind":"text","text":"at 8pm."}]`), nil)
	want := wireSampleAnswer("sample-agent", "A2A JSON-RPC", "Four, at 8pm.")
	wantBody := `{"jsonrpc":"2.0","id":"call-1","result":{"kind":"message","messageId":"msg-sample-1","role":"agent","contextId":"ctx-sample-1","parts":[{"kind":"text","text":"` + want + `"}]}}` + "\n"
	if resp.StatusCode != http.StatusOK || string(body) != wantBody {
		t.Fatalf("%d\n%s\nwant\n%s", resp.StatusCode, body, wantBody)
	}

	// "task" in the text: a completed Task with the answer as an artifact.
	_, body = do(t, srv, http.MethodPost, "/", a2aRequest("message/send", `[{"kind":"text","text":"Run this as a task"}]`), nil)
	var a rpcAnswer
	var task struct {
		ID        string                 `json:"id"`
		Kind      string                 `json:"kind"`
		Status    struct{ State string } `json:"status"`
		Artifacts []struct {
			ArtifactID string `json:"artifactId"`
			Parts      []a2aPart
		} `json:"artifacts"`
		History []a2aMessage `json:"history"`
	}
	if err := json.Unmarshal(body, &a); err != nil || a.Error != nil || json.Unmarshal(a.Result, &task) != nil {
		t.Fatalf("%v %s", err, body)
	}
	if task.Kind != "task" || task.Status.State != "completed" || len(task.Artifacts) != 1 || len(task.Artifacts[0].Parts) != 1 ||
		task.Artifacts[0].Parts[0].Text != wireSampleAnswer("sample-agent", "A2A JSON-RPC", "Run this as a task") ||
		len(task.History) != 1 || task.History[0].TaskID != task.ID {
		t.Fatalf("task %s", body)
	}
}

func TestA2AMessageStream(t *testing.T) {
	t.Parallel()
	o := wireOptions(wireA2A)
	o.chunks = 3
	srv := newTestServer(t, o)
	resp, body := do(t, srv, http.MethodPost, "/", a2aRequest("message/stream", `[{"kind":"text","text":"hello agent"}]`), nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var kinds, text string
	events := parseSSE(t, body)
	for i, payload := range events {
		var a rpcAnswer
		var ev struct {
			Kind     string                 `json:"kind"`
			Status   struct{ State string } `json:"status"`
			Final    bool                   `json:"final"`
			Artifact struct {
				Parts []a2aPart `json:"parts"`
			} `json:"artifact"`
			Append    bool `json:"append"`
			LastChunk bool `json:"lastChunk"`
		}
		if err := json.Unmarshal([]byte(payload), &a); err != nil || a.JSONRPC != "2.0" || a.ID != "call-1" || a.Error != nil || json.Unmarshal(a.Result, &ev) != nil {
			t.Fatalf("event %d: %s", i, payload)
		}
		kinds += ev.Kind + ":" + ev.Status.State + " "
		if ev.Kind == "artifact-update" {
			text += ev.Artifact.Parts[0].Text
			first, last := i == 2, i == len(events)-2
			if ev.Append == first || ev.LastChunk != last {
				t.Fatalf("event %d: append %v lastChunk %v", i, ev.Append, ev.LastChunk)
			}
		}
		if ev.Final != (i == len(events)-1) {
			t.Fatalf("event %d: final %v", i, ev.Final)
		}
	}
	if kinds != "task:submitted status-update:working artifact-update: artifact-update: artifact-update: status-update:completed " {
		t.Fatalf("events %q", kinds)
	}
	if want := wireSampleAnswer("sample-agent", "A2A JSON-RPC", "hello agent"); text != want {
		t.Fatalf("text %q, want %q", text, want)
	}
}

func TestA2AErrors(t *testing.T) {
	t.Parallel()
	o := wireOptions(wireA2A)
	o.requireBearer = "agent-token"
	srv := newTestServer(t, o)
	auth := map[string]string{"Authorization": "Bearer agent-token"}
	for _, tc := range []struct {
		name, method, path, body string
		header                   map[string]string
		status, code             int
	}{
		{"no token", "POST", "/", a2aRequest("message/send", `[{"kind":"text","text":"x"}]`), nil, 401, rpcInternalError},
		{"parse error", "POST", "/", `{`, auth, 200, rpcParseError},
		{"not 2.0", "POST", "/", `{"jsonrpc":"1.0","id":1,"method":"message/send"}`, auth, 200, rpcInvalidRequest},
		{"unknown method", "POST", "/", `{"jsonrpc":"2.0","id":1,"method":"agent/think"}`, auth, 200, rpcMethodNotFound},
		{"tasks/get", "POST", "/", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"t"}}`, auth, 200, a2aTaskNotFound},
		{"no message", "POST", "/", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}`, auth, 200, rpcInvalidParams},
		{"bad part", "POST", "/", a2aRequest("message/send", `[{"kind":"text","text":"x"},{"kind":"video"}]`), auth, 200, rpcInvalidParams},
		{"unknown path", "POST", "/rpc", `{}`, auth, 404, rpcInternalError},
		{"503 hook", "POST", "/", `{}`, map[string]string{"Authorization": "Bearer agent-token", headerStatus: "503"}, 503, rpcInternalError},
	} {
		resp, body := do(t, srv, tc.method, tc.path, tc.body, tc.header)
		var a rpcAnswer
		if err := json.Unmarshal(body, &a); err != nil || resp.StatusCode != tc.status || a.JSONRPC != "2.0" || a.Error == nil || a.Error.Code != tc.code || a.Error.Message == "" {
			t.Errorf("%s: %d %s, want %d code %d", tc.name, resp.StatusCode, body, tc.status, tc.code)
		}
	}
	resp, body := do(t, srv, http.MethodGet, "/.well-known/agent-card.json", "", nil)
	var card struct {
		Name         string `json:"name"`
		URL          string `json:"url"`
		Capabilities struct {
			Streaming bool `json:"streaming"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal(body, &card); err != nil || resp.StatusCode != 200 || card.Name != "flexway-sample" || !card.Capabilities.Streaming || !strings.HasPrefix(card.URL, srv.URL) {
		t.Fatalf("agent card %d %s", resp.StatusCode, body)
	}
}
