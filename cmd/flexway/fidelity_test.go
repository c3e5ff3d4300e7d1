package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// Fidelity on the wire: what the client and the upstream send reaches the
// other side as it was sent, through a listening `serve`.

// streamBody posts a streaming chat request and returns the raw SSE body.
func streamBody(t *testing.T, g *testGW, body string) (*http.Response, []byte) {
	t.Helper()
	resp := post(t, g, "/v1/chat/completions", body)
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the stream: %v\n%s", err, raw)
	}
	return resp, raw
}

// decodeNumbers decodes JSON keeping numbers as json.Number, so that a big
// integer compares exactly.
func decodeNumbers(t *testing.T, b []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return m
}

func TestToolCallIndexZeroKeptInSSE(t *testing.T) {
	up := newUpstream(t, sseUpstream(
		chunk(`[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":\"Oslo\"}"}}]},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`, ""),
	))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	resp, raw := streamBody(t, g, `{"model":"m-large","stream":true,"messages":[{"role":"user","content":"weather?"}]}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d %q\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("no X-Request-Id on the stream's response: %v", resp.Header)
	}
	for _, want := range []string{
		`"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,`,
		`"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]`,
		`"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":\"Oslo\"}"}}]`,
		`"finish_reason":"tool_calls"`,
	} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("SSE lacks %s\n%s", want, raw)
		}
	}
	evs := sseEvents(raw)
	if len(evs) != 4 || evs[3] != "[DONE]" {
		t.Fatalf("events: %q", evs)
	}
	for _, e := range evs[:3] {
		var c struct {
			Choices []map[string]json.RawMessage `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("event %s: %v", e, err)
		}
		if string(c.Choices[0]["index"]) != "0" {
			t.Errorf("choice index written as %q in %s", c.Choices[0]["index"], e)
		}
	}
}

func TestContentNullBesideToolCalls(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, `{"id":"chatcmpl-2","object":"chat.completion","created":1700000000,"model":"m-large","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":7,"total_tokens":16}}`))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	resp := post(t, g, "/v1/chat/completions", `{"model":"m-large","messages":[{"role":"user","content":"weather?"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	m := readJSON(t, resp)
	msg := m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	content, present := msg["content"]
	if !present || content != nil {
		t.Fatalf("content = %v (present %v), want null: %v", content, present, msg)
	}
	calls, _ := msg["tool_calls"].([]any)
	if len(calls) != 1 || calls[0].(map[string]any)["id"] != "call_1" {
		t.Fatalf("tool_calls: %v", msg)
	}
}

func TestNChoicesAllKept(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, `{"id":"chatcmpl-3","object":"chat.completion","created":1,"model":"m-large","choices":[`+
		`{"index":0,"message":{"role":"assistant","content":"zero"},"finish_reason":"stop"},`+
		`{"index":1,"message":{"role":"assistant","content":"one"},"finish_reason":"length"},`+
		`{"index":2,"message":{"role":"assistant","content":"two"},"finish_reason":"stop"}],`+
		`"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}`))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	resp := post(t, g, "/v1/chat/completions", `{"model":"m-large","n":3,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("no X-Request-Id on the response: %v", resp.Header)
	}
	m := readJSON(t, resp)
	choices, _ := m["choices"].([]any)
	if len(choices) != 3 {
		t.Fatalf("choices: %v", m)
	}
	for i, want := range []string{"zero", "one", "two"} {
		c := choices[i].(map[string]any)
		if c["index"] != float64(i) || c["message"].(map[string]any)["content"] != want {
			t.Errorf("choice %d: %v", i, c)
		}
	}
	if choices[1].(map[string]any)["finish_reason"] != "length" {
		t.Errorf("finish_reason of choice 1: %v", choices[1])
	}
	if n := up.requests()[0].Body["n"]; n != float64(3) {
		t.Fatalf("upstream n = %v", n)
	}
}

func TestContentPartsNotFlattened(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	parts := `[{"type":"text","text":"first part"},{"type":"text","text":"second part"}]`
	resp := post(t, g, "/v1/chat/completions", `{"model":"m-large","messages":[{"role":"user","content":`+parts+`}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(resp))
	}
	msgs := up.requests()[0].Body["messages"].([]any)
	got := msgs[0].(map[string]any)["content"]
	var want any
	_ = json.Unmarshal([]byte(parts), &want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("upstream content = %#v, want the array %s", got, parts)
	}
}

func readAll(r *http.Response) string {
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// unknownFields is a request full of members Flexway does not model.
const unknownFields = `{
  "model": "gpt-unknown",
  "messages": [
    {"role": "system", "content": "be brief", "x_note": {"k": [1, 2.50, "é"]}},
    {"role": "user", "name": "ana", "content": [{"type": "text", "text": "look \u00e9", "x_part": true}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low", "x_img": 1}}]},
    {"role": "user", "content": "weather in Oslo?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Bergen\"}"}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": "rain"}
  ],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
  "tool_choice": "auto",
  "response_format": {"type": "json_schema", "json_schema": {"name": "w", "strict": true, "schema": {"type": "object"}}},
  "seed": 12345678901234567890,
  "logprobs": true,
  "top_logprobs": 3,
  "temperature": 0.7,
  "logit_bias": {"50256": -100},
  "x_vendor": {"routing": {"tier": "gold", "weights": [0.1, 1e-7, 12345678901234567890123]}, "flag": null},
  "max_tokens": null,
  "user": null,
  "stop": ["\n\n", "END"],
  "metadata": {},
  "parallel_tool_calls": false,
  "prediction": {"type": "content", "content": "a\u0000b \ud83c\udf89 \u2028"},
  "x\u002descaped key": [[], {}, "", 0, -0.0, 1E+2]
  %s
}`

func TestUnknownRequestFieldsReachUpstream(t *testing.T) {
	for _, tt := range []struct {
		name, extra string
		handler     http.HandlerFunc
	}{
		{"unary", "", jsonHandler(200, completion)},
		{"stream", `, "stream": true, "stream_options": {"include_usage": false, "x_opt": 1}`, sseUpstream(
			chunk(`[{"index":0,"delta":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]`, ""),
		)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t, tt.handler)
			cfg := baseTestConfig(up.URL)
			cfg.Backends[0].Capabilities = []string{"chat", "vision", "embeddings"}
			g := startGateway(t, cfg.yaml())
			body := fmt.Sprintf(unknownFields, tt.extra)
			resp := post(t, g, "/v1/chat/completions", body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, readAll(resp))
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			reqs := up.requests()
			if len(reqs) != 1 {
				t.Fatalf("upstream saw %d requests", len(reqs))
			}
			sent := decodeNumbers(t, []byte(body))
			got := decodeNumbers(t, reqs[0].Raw)
			if got["model"] != "m-small" {
				t.Errorf("upstream model = %v, want the default m-small", got["model"])
			}
			if got["seed"] != json.Number("12345678901234567890") {
				t.Errorf("seed = %v", got["seed"])
			}
			if tt.name == "stream" {
				so, _ := got["stream_options"].(map[string]any)
				if so["include_usage"] != true || so["x_opt"] != json.Number("1") {
					t.Errorf("upstream stream_options = %v", got["stream_options"])
				}
			} else if _, ok := got["stream_options"]; ok {
				t.Errorf("unary call sent stream_options: %v", got["stream_options"])
			}
			for _, m := range []map[string]any{sent, got} {
				delete(m, "model")
				delete(m, "stream_options")
			}
			if !reflect.DeepEqual(sent, got) {
				a, _ := json.MarshalIndent(sent, "", " ")
				b, _ := json.MarshalIndent(got, "", " ")
				t.Fatalf("upstream request differs from the client's\nsent: %s\ngot:  %s", a, b)
			}
		})
	}
}

func gzipped(t *testing.T, s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = io.WriteString(zw, s)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestGzipUpstream(t *testing.T) {
	t.Run("json", func(t *testing.T) {
		body := gzipped(t, completion)
		up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(body)
		})
		g := startGateway(t, baseConfig(t, up.URL, ""))
		resp := post(t, g, "/v1/chat/completions", `{"model":"m-large","messages":[{"role":"user","content":"hi"}]}`)
		m := readJSON(t, resp)
		if resp.StatusCode != 200 || m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"] != "Hello from upstream" {
			t.Fatalf("status %d: %v", resp.StatusCode, m)
		}
		if resp.Header.Get("Content-Encoding") != "" {
			t.Fatalf("gzip header reached the client: %v", resp.Header)
		}
	})
	t.Run("stream", func(t *testing.T) {
		up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Content-Encoding", "gzip")
			f := w.(http.Flusher)
			zw := gzip.NewWriter(w)
			for _, e := range []string{
				chunk(`[{"index":0,"delta":{"role":"assistant","content":"zip "},"finish_reason":null}]`, ""),
				chunk(`[{"index":0,"delta":{"content":"zap"},"finish_reason":"stop"}]`, ""),
				"[DONE]",
			} {
				fmt.Fprintf(zw, "data: %s\n\n", e)
				_ = zw.Flush()
				f.Flush()
			}
			_ = zw.Close()
		})
		g := startGateway(t, baseConfig(t, up.URL, ""))
		resp, raw := streamBody(t, g, `{"model":"m-large","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		text, finish, done := streamText(t, sseEvents(raw))
		if resp.StatusCode != 200 || text != "zip zap" || finish != "stop" || !done {
			t.Fatalf("status %d text %q finish %q done %v\n%s", resp.StatusCode, text, finish, done, raw)
		}
	})
}

func TestBase64EmbeddingsUntouched(t *testing.T) {
	const b64 = "AACAPwAAAMCrqqo+AAAAAP//f38="
	answer := `{"object":"list","data":[{"object":"embedding","index":0,"embedding":"` + b64 + `"},{"object":"embedding","index":1,"embedding":"AAAAAA=="}],"model":"m-small","usage":{"prompt_tokens":2,"total_tokens":2},"x_vendor":{"k":1}}`
	up := newUpstream(t, jsonHandler(200, answer))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	request := `{"model":"m-small","input":["hello","wörld"],"encoding_format":"base64","dimensions":256,"user":"u-1","x_vendor":{"a":[1,null,12345678901234567890]}}`
	resp := post(t, g, "/v1/embeddings", request)
	raw := readAll(resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	if !strings.Contains(raw, `"embedding":"`+b64+`"`) {
		t.Fatalf("the base64 string changed: %s", raw)
	}
	semanticEqual(t, []byte(answer), []byte(raw))
	semanticEqual(t, []byte(request), up.requests()[0].Raw)
}

func TestUpstream4xxRelayedAsIs(t *testing.T) {
	const body = "{\n  \"error\": {\"message\": \"temperature must be <= 2\", \"type\": \"invalid_request_error\",\n   \"param\": \"temperature\", \"code\": \"invalid_value\"},\n  \"x_extra\":[1, 2]\n}\n"
	for _, tt := range []struct {
		name   string
		status int
		stream bool
	}{
		{"400 unary", 400, false},
		{"422 unary", 422, false},
		{"400 stream", 400, true},
		{"404 stream", 404, true},
		{"429 stream", 429, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "7")
				jsonHandler(tt.status, body)(w, r)
			})
			g := startGateway(t, baseConfig(t, up.URL, ""))
			resp := post(t, g, "/v1/chat/completions", fmt.Sprintf(`{"model":"m-large","temperature":9,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, tt.stream))
			got := readAll(resp)
			if resp.StatusCode != tt.status || got != body {
				t.Fatalf("status %d body %q; want %d %q", resp.StatusCode, got, tt.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Errorf("no X-Request-Id: %v", resp.Header)
			}
			if ra := resp.Header.Get("Retry-After"); ra != "7" {
				t.Errorf("Retry-After %q, want the upstream's 7", ra)
			}
			if n := len(up.requests()); n != 1 {
				t.Fatalf("upstream saw %d requests; a 4xx is never retried", n)
			}
		})
	}
}

func TestUpstreamGarbageBecomes502(t *testing.T) {
	for _, tt := range []struct {
		name, ct string
		status   int
		body     []byte
		stream   bool
	}{
		{"html 500", "text/html", 500, []byte("<!DOCTYPE html><html><body><h1>Internal Server Error</h1>nginx</body></html>"), false},
		{"garbage 503", "application/octet-stream", 503, []byte("\x00\xff\xfe{{not json"), false},
		{"json-looking 502", "application/json", 502, []byte(`{"error":{"message":"secret upstream detail"}}`), false},
		{"html 500 stream", "text/html", 500, []byte("<html>oops</html>"), true},
		{"html 200", "text/html", 200, []byte("<html>login page</html>"), false},
		{"html 200 stream", "text/html", 200, []byte("<html>login page</html>"), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", tt.ct)
				w.WriteHeader(tt.status)
				_, _ = w.Write(tt.body)
			})
			g := startGateway(t, baseConfig(t, up.URL, ""))
			resp := post(t, g, "/v1/chat/completions", fmt.Sprintf(`{"model":"m-large","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, tt.stream))
			if resp.StatusCode != 502 || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			raw := readAll(resp)
			var env struct {
				Error struct {
					Message, Type, Code string
					Param               *string
				}
			}
			if err := json.Unmarshal([]byte(raw), &env); err != nil {
				t.Fatalf("not the OpenAI envelope: %v\n%s", err, raw)
			}
			if env.Error.Code != "upstream_error" || env.Error.Type != "server_error" || env.Error.Message == "" {
				t.Fatalf("envelope %+v", env.Error)
			}
			for _, leak := range []string{"<html", "nginx", "login page", "oops", "secret upstream detail", "not json"} {
				if strings.Contains(raw, leak) {
					t.Fatalf("the upstream's body leaked: %s", raw)
				}
			}
		})
	}
}

// semanticEqual compares two JSON documents, numbers as written.
func semanticEqual(t *testing.T, want, got []byte) {
	t.Helper()
	w, g := decodeNumbers(t, want), decodeNumbers(t, got)
	if !reflect.DeepEqual(w, g) {
		t.Fatalf("the client's JSON differs from the upstream's\nupstream: %s\nclient:   %s", want, got)
	}
}

// richCompletion is a completion as OpenAI writes one, with every member
// Flexway does not model.
const richCompletion = `{
  "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
  "object": "chat.completion",
  "created": 1741569952,
  "model": "m-large",
  "choices": [
    {
      "index": 0,
      "message": {"role": "assistant", "content": "Bonjour \u00e9\u00e8 \ud83c\udf89 \"quoted\"\n", "refusal": null, "annotations": [], "audio": null},
      "logprobs": {"content": [{"token": "Bon", "logprob": -0.0001234, "bytes": [66, 111, 110], "top_logprobs": []}], "refusal": null},
      "finish_reason": "stop"
    },
    {
      "index": 1,
      "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      "logprobs": null,
      "finish_reason": "tool_calls"
    }
  ],
  "usage": {
    "prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035",
  "x_vendor": {"latency_ms": 123.456, "big": 98765432109876543210}
}`

func TestResponseFieldsReachClient(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, richCompletion))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	resp := post(t, g, "/v1/chat/completions", `{"model":"m-large","n":2,"messages":[{"role":"user","content":"hi"}]}`)
	got := readAll(resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	semanticEqual(t, []byte(richCompletion), []byte(got))
}
