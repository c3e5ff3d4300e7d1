package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// anthropicHeaders are the headers every Messages request carries.
var anthropicHeaders = map[string]string{"anthropic-version": "2023-06-01"}

// wireOptions are [fastOptions] for wire, with its default models.
func wireOptions(wire string) options {
	o := fastOptions()
	o.wire, o.models = wire, defaultModels(wire)
	return o
}

// wireSampleAnswer is the documented answer text of a wire, in full.
func wireSampleAnswer(model, title, said string) string {
	return "This is flexway-sample (model " + model + ", speaking " + title + "), a local sample model, not a real LLM. You said: " + said
}

// namedEvent is one "event: NAME\ndata: JSON" frame.
type namedEvent struct {
	name string
	data map[string]any
}

// parseNamedSSE splits an Anthropic event stream into its frames, failing
// on anything but "event: X\ndata: {...}\n\n" frames whose data's type is X.
func parseNamedSSE(tb testing.TB, body []byte) []namedEvent {
	tb.Helper()
	s := string(body)
	if !strings.HasSuffix(s, "\n\n") {
		tb.Fatalf("stream does not end with a blank line: %q", s)
	}
	var out []namedEvent
	for _, frame := range strings.Split(strings.TrimSuffix(s, "\n\n"), "\n\n") {
		event, data, ok := strings.Cut(frame, "\n")
		name, ok1 := strings.CutPrefix(event, "event: ")
		payload, ok2 := strings.CutPrefix(data, "data: ")
		var v map[string]any
		if !ok || !ok1 || !ok2 || json.Unmarshal([]byte(payload), &v) != nil || v["type"] != name {
			tb.Fatalf("malformed frame %q", frame)
		}
		out = append(out, namedEvent{name, v})
	}
	return out
}

func TestAnthropicMessage(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, wireOptions(wireAnthropic))
	resp, body := do(t, srv, http.MethodPost, "/v1/messages", `{"model":"sample-claude","max_tokens":100,
		"system":[{"type":"text","text":"Be short and kind.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Answer in English."}],
		"messages":[{"role":"user","content":"Hello there"},{"role":"assistant","content":"Hi."},{"role":"user","content":[{"type":"text","text":"How are you?"}]}]}`, anthropicHeaders)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	want := wireSampleAnswer("sample-claude", "Anthropic Messages", "How are you?")
	// Byte for byte, in the API's field order.
	wantBody := `{"id":"msg_sample_1","type":"message","role":"assistant","model":"sample-claude","content":[{"type":"text","text":"` + want +
		`"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":18,"cache_creation_input_tokens":4,"cache_read_input_tokens":3,"output_tokens":` + itoa(countWords(want)) + "}}\n"
	if string(body) != wantBody {
		t.Fatalf("body\n%s\nwant\n%s", body, wantBody)
	}
}

func TestAnthropicMaxTokensAndStopSequences(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, wireOptions(wireAnthropic))
	for _, tc := range []struct {
		name, extra, reason, seq, text string
	}{
		{"max_tokens", `"max_tokens":3`, "max_tokens", "", "This is flexway-sample"},
		{"stop", `"max_tokens":100,"stop_sequences":["zzz","sample model"]`, "stop_sequence", "sample model", "This is flexway-sample (model sample-claude, speaking Anthropic Messages), a local "},
	} {
		_, body := do(t, srv, http.MethodPost, "/v1/messages", `{"model":"x",`+tc.extra+`,"messages":[{"role":"user","content":"hi"}]}`, anthropicHeaders)
		var m struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			StopReason   string  `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		}
		if err := json.Unmarshal(body, &m); err != nil || len(m.Content) != 1 {
			t.Fatalf("%s: %v %s", tc.name, err, body)
		}
		gotSeq := ""
		if m.StopSequence != nil {
			gotSeq = *m.StopSequence
		}
		if m.Content[0].Text != tc.text || m.StopReason != tc.reason || gotSeq != tc.seq {
			t.Errorf("%s: text %q reason %q seq %q, want %q %q %q", tc.name, m.Content[0].Text, m.StopReason, gotSeq, tc.text, tc.reason, tc.seq)
		}
	}
}

// anthropicToolRequest asks for get_weather by name, with a tool declared.
const anthropicToolRequest = `{"model":"sample-claude","max_tokens":200,%s
	"tools":[{"name":"get_weather","description":"Weather of a city","input_schema":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city","days"]}}],
	"messages":[{"role":"user","content":"Use get_weather for Paris"}]}`

func TestAnthropicToolUse(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, wireOptions(wireAnthropic))
	_, body := do(t, srv, http.MethodPost, "/v1/messages", strings.Replace(anthropicToolRequest, "%s", "", 1), anthropicHeaders)
	var m struct {
		Content []struct {
			Type  string         `json:"type"`
			Text  string         `json:"text"`
			ID    string         `json:"id"`
			Name  string         `json:"name"`
			Input map[string]any `json:"input"`
		} `json:"content"`
		StopReason string `json:"stop_reason"`
	}
	if err := json.Unmarshal(body, &m); err != nil || len(m.Content) != 2 {
		t.Fatalf("%v %s", err, body)
	}
	tu := m.Content[1]
	if m.StopReason != "tool_use" || m.Content[0].Type != "text" || tu.Type != "tool_use" || tu.Name != "get_weather" ||
		!strings.HasPrefix(tu.ID, "toolu_sample_") || tu.Input["city"] != "Use get_weather for Paris" || tu.Input["days"] != 1.0 {
		t.Fatalf("answer %+v", m)
	}

	// tool_choice none: no call, though the text names the tool.
	_, body = do(t, srv, http.MethodPost, "/v1/messages", strings.Replace(anthropicToolRequest, "%s", `"tool_choice":{"type":"none"},`, 1), anthropicHeaders)
	if strings.Contains(string(body), "tool_use") {
		t.Fatalf("tool_choice none answered %s", body)
	}

	// The second turn, with the tool's result, is answered in text.
	_, body = do(t, srv, http.MethodPost, "/v1/messages", strings.Replace(strings.Replace(anthropicToolRequest, "%s", "", 1), `"messages":[{"role":"user","content":"Use get_weather for Paris"}]`,
		`"messages":[{"role":"user","content":"Use get_weather for Paris"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"18C"}]}]}]`, 1), anthropicHeaders)
	if !strings.Contains(string(body), `You said: 18C"`) || !strings.Contains(string(body), `"stop_reason":"end_turn"`) {
		t.Fatalf("second turn answered %s", body)
	}
}

func TestAnthropicStream(t *testing.T) {
	t.Parallel()
	o := wireOptions(wireAnthropic)
	o.chunks = 3
	srv := newTestServer(t, o)
	resp, body := do(t, srv, http.MethodPost, "/v1/messages", strings.Replace(anthropicToolRequest, "%s", `"stream":true,`, 1), anthropicHeaders)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := parseNamedSSE(t, body)
	var names []string
	for _, e := range events {
		names = append(names, e.name)
	}
	wantNames := "message_start content_block_start ping content_block_delta content_block_delta content_block_delta content_block_stop " +
		"content_block_start content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != wantNames {
		t.Fatalf("events %v\nwant %s", names, wantNames)
	}
	start := events[0].data["message"].(map[string]any)
	usage := start["usage"].(map[string]any)
	if start["stop_reason"] != nil || len(start["content"].([]any)) != 0 || usage["output_tokens"] != 1.0 || usage["input_tokens"] != 8.0 ||
		usage["cache_read_input_tokens"] != 0.0 || usage["cache_creation_input_tokens"] != 0.0 {
		t.Fatalf("message_start %v", events[0].data)
	}
	var text, args string
	for _, e := range events {
		if d, ok := e.data["delta"].(map[string]any); ok && e.name == "content_block_delta" {
			text += strAny(d["text"])
			args += strAny(d["partial_json"])
		}
	}
	wantText := wireSampleAnswer("sample-claude", "Anthropic Messages", "Use get_weather for Paris") + " Calling the tool get_weather."
	if text != wantText || args != `{"city":"Use get_weather for Paris","days":1}` {
		t.Fatalf("text %q args %q", text, args)
	}
	toolStart := events[7].data["content_block"].(map[string]any)
	if toolStart["type"] != "tool_use" || toolStart["name"] != "get_weather" || len(toolStart["input"].(map[string]any)) != 0 || events[7].data["index"] != 1.0 {
		t.Fatalf("tool block start %v", events[7].data)
	}
	delta := events[12].data
	if delta["delta"].(map[string]any)["stop_reason"] != "tool_use" || delta["usage"].(map[string]any)["output_tokens"] != float64(countWords(wantText)+3) {
		t.Fatalf("message_delta %v", delta)
	}
	// The ping is written as the API writes it, with a space.
	if !strings.Contains(string(body), "event: ping\ndata: {\"type\": \"ping\"}\n\n") {
		t.Fatal("ping frame differs from the API's")
	}
}

// strAny returns v when it is a string, else "".
func strAny(v any) string {
	s, _ := v.(string)
	return s
}

func TestAnthropicErrors(t *testing.T) {
	t.Parallel()
	o := wireOptions(wireAnthropic)
	o.requireKey = "sk-ant-test"
	srv := newTestServer(t, o)
	good := map[string]string{"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-test"}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		typ, message             string
	}{
		{"no key", "POST", "/v1/messages", `{}`, anthropicHeaders, 401, "authentication_error", "invalid x-api-key"},
		{"no version", "POST", "/v1/messages", `{}`, map[string]string{"x-api-key": "sk-ant-test"}, 400, "invalid_request_error", "anthropic-version: header is required"},
		{"no max_tokens", "POST", "/v1/messages", `{"model":"m",` + msgs + `}`, good, 400, "invalid_request_error", "max_tokens: Field required"},
		{"no model", "POST", "/v1/messages", `{"max_tokens":5,` + msgs + `}`, good, 400, "invalid_request_error", "model: Field required"},
		{"no messages", "POST", "/v1/messages", `{"model":"m","max_tokens":5}`, good, 400, "invalid_request_error", "messages: Field required"},
		{"bad role", "POST", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, good, 400, "invalid_request_error", "messages.0.role: Input should be 'user' or 'assistant'"},
		{"temperature", "POST", "/v1/messages", `{"model":"m","max_tokens":5,"temperature":1.5,` + msgs + `}`, good, 400, "invalid_request_error", "temperature: Input should be less than or equal to 1"},
		{"bad json", "POST", "/v1/messages", `{`, good, 400, "invalid_request_error", ""},
		{"unknown path", "POST", "/v1/complete", `{}`, good, 404, "not_found_error", ""},
		{"wrong method", "GET", "/v1/messages", "", good, 405, "invalid_request_error", ""},
		{"fail model", "POST", "/v1/messages", `{"model":"sample-fail-503","max_tokens":5,` + msgs + `}`, good, 503, "api_error", ""},
		{"overloaded hook", "POST", "/v1/messages", `{}`, map[string]string{"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-test", headerStatus: "529"}, 529, "overloaded_error", ""},
	} {
		resp, body := do(t, srv, tc.method, tc.path, tc.body, tc.header)
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != tc.status || e.Type != "error" || e.Error.Type != tc.typ ||
			e.Error.Message == "" || (tc.message != "" && e.Error.Message != tc.message) || !strings.HasPrefix(e.RequestID, "req_sample_") {
			t.Errorf("%s: %d %s, want %d %s %q", tc.name, resp.StatusCode, body, tc.status, tc.typ, tc.message)
		}
	}
}
