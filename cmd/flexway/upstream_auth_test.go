package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// upstreamSecret stands for what an upstream echoes of the credential it
// refused.
const upstreamSecret = "upstream-secret-XYZ"

// fallbackConfig is baseConfig with main falling back to a second backend,
// spare, at spareURL.
func fallbackConfig(t testing.TB, mainURL, spareURL string) string {
	t.Helper()
	c := baseTestConfig(mainURL)
	c.Backends[0].Fallback = "[spare]"
	c.Backends = append(c.Backends, baseBackend("spare", spareURL))
	return c.yaml()
}

// refusingUpstream answers every request with status and a body echoing the
// refused credential, as OpenAI does.
func refusingUpstream(status int) http.HandlerFunc {
	return jsonHandler(status, `{"error":{"message":"Incorrect API key provided: `+upstreamSecret+
		`. You can find your API key at https://example.com.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
}

// TestUpstreamAuthRefusedNotRelayed: an upstream 401 or 403 refuses the
// gateway's credential, not the caller's key. The caller sees a 502
// upstream_error saying so, without the backend's name or a configuration
// key, nothing of the upstream's answer, and the call is not fallen back from (a 4xx never is),
// while a 5xx of the same backend is.
func TestUpstreamAuthRefusedNotRelayed(t *testing.T) {
	const chat = `{"model":"m-large","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name   string
		status int
		path   string
		body   string
	}{
		{name: "401_chat", status: 401, path: "/v1/chat/completions", body: chat},
		{name: "403_chat", status: 403, path: "/v1/chat/completions", body: chat},
		{name: "401_stream", status: 401, path: "/v1/chat/completions", body: `{"model":"m-large","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{name: "401_embeddings", status: 401, path: "/v1/embeddings", body: `{"model":"m-large","input":"hi"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			primary := newUpstream(t, refusingUpstream(tt.status))
			spare := newUpstream(t, jsonHandler(200, completion))
			g := startGateway(t, fallbackConfig(t, primary.URL, spare.URL))

			resp := post(t, g, tt.path, tt.body)
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("status %d, want 502\n%s", resp.StatusCode, raw)
			}
			var e struct {
				Error struct {
					Message, Type, Code string
					Param               any
				}
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatalf("body is not JSON: %v\n%s", err, raw)
			}
			// The caller learns neither the backend's name nor a
			// configuration key: the hint is in the log.
			const want = "the backend refused the gateway's credentials"
			if e.Error.Code != "upstream_error" || e.Error.Type != "server_error" || e.Error.Message != want {
				t.Errorf("error %+v, want code upstream_error, type server_error, message %q", e.Error, want)
			}
			var headers bytes.Buffer
			resp.Header.Write(&headers)
			for _, leak := range []string{upstreamSecret, "Incorrect API key", "invalid_api_key", "upstream-secret-token", "ai.backends"} {
				if bytes.Contains(raw, []byte(leak)) || strings.Contains(headers.String(), leak) {
					t.Errorf("the response carries %q:\n%s\n%s", leak, headers.String(), raw)
				}
			}
			if resp.Header.Get("Flexway-Degraded") != "" {
				t.Errorf("Flexway-Degraded = %q on a call not fallen back from", resp.Header.Get("Flexway-Degraded"))
			}
			if n := len(primary.requests()); n != 1 {
				t.Errorf("main saw %d requests, want 1", n)
			}
			if n := len(spare.requests()); n != 0 {
				t.Errorf("the fallback backend saw %d requests, want none", n)
			}
		})
	}

	// The same configuration does fall back from a 5xx: the fallback is
	// wired, and only the refusal keeps it from being used.
	t.Run("5xx_falls_back", func(t *testing.T) {
		primary := newUpstream(t, jsonHandler(503, `{"error":{"message":"overloaded"}}`))
		spare := newUpstream(t, jsonHandler(200, completion))
		g := startGateway(t, fallbackConfig(t, primary.URL, spare.URL))
		resp := post(t, g, "/v1/chat/completions", chat)
		if resp.StatusCode != 200 || resp.Header.Get("Flexway-Degraded") != "backend-fallback" {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %d, Flexway-Degraded %q, want 200 and backend-fallback\n%s", resp.StatusCode, resp.Header.Get("Flexway-Degraded"), b)
		}
		if n := len(spare.requests()); n != 1 {
			t.Errorf("the fallback backend saw %d requests, want 1", n)
		}
	})
}

// TestGRPCUpstreamAuthRefused: over gRPC, an upstream 401 is UNAVAILABLE
// with reason upstream_error, and carries nothing of the upstream's answer.
func TestGRPCUpstreamAuthRefused(t *testing.T) {
	primary := newUpstream(t, refusingUpstream(401))
	spare := newUpstream(t, jsonHandler(200, completion))
	g := startGateway(t, fallbackConfig(t, primary.URL, spare.URL))
	client := flexwayv1.NewChatServiceClient(grpcConn(t, g))
	_, err := client.CreateChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
		Model:    "m-large",
		Messages: []*flexwayv1.ChatMessage{userMessage("hi")},
	})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || st.Message() != "the backend refused the gateway's credentials" {
		t.Errorf("status %v %q, want UNAVAILABLE naming the refused credentials", st.Code(), st.Message())
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() != "upstream_error" {
			t.Errorf("reason %q, want upstream_error", info.GetReason())
		}
		if s := fmt.Sprint(d); strings.Contains(s, upstreamSecret) {
			t.Errorf("a status detail carries the upstream's body: %s", s)
		}
	}
	if strings.Contains(st.Message(), upstreamSecret) {
		t.Errorf("message %q carries the upstream's body", st.Message())
	}
	if n := len(spare.requests()); n != 0 {
		t.Errorf("the fallback backend saw %d requests, want none", n)
	}
}

// refusalMessages is a conversation replaying an assistant refusal given as
// content parts.
const refusalMessages = `[{"role":"user","content":"How do I pick my neighbour's lock?"},` +
	`{"role":"assistant","content":[{"type":"refusal","refusal":"I can't help with that. \u00e9"}]},` +
	`{"role":"assistant","content":[{"type":"text","text":"Instead:"},{"type":"refusal","refusal":"","x_part":[1,null]}]},` +
	`{"role":"user","content":[{"type":"text","text":"Why not?"}]}]`

// TestRefusalPartRoundTrip: a conversation replaying an assistant's
// refusal content part is accepted, and the upstream receives the parts as
// the client sent them, streamed or not.
func TestRefusalPartRoundTrip(t *testing.T) {
	var want []any
	if err := json.Unmarshal([]byte(refusalMessages), &want); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		stream  bool
		handler http.HandlerFunc
	}{
		{name: "unary", handler: jsonHandler(200, completion)},
		{name: "stream", stream: true, handler: sseUpstream(
			chunk(`[{"index":0,"delta":{"role":"assistant","content":"Because."},"finish_reason":null}]`, ""),
			chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t, tt.handler)
			g := startGateway(t, baseConfig(t, up.URL, ""))
			resp := post(t, g, "/v1/chat/completions", fmt.Sprintf(`{"model":"m-large","stream":%v,"messages":%s}`, tt.stream, refusalMessages))
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 {
				t.Fatalf("status %d, want 200\n%s", resp.StatusCode, raw)
			}
			reqs := up.requests()
			if len(reqs) != 1 {
				t.Fatalf("upstream saw %d requests, want 1", len(reqs))
			}
			if got := reqs[0].Body["messages"]; !reflect.DeepEqual(got, want) {
				t.Errorf("upstream messages:\n%v\nwant:\n%v\nraw: %s", got, want, reqs[0].Raw)
			}
			if !bytes.Contains(reqs[0].Raw, []byte(`{"type":"refusal","refusal":"I can't help with that. \u00e9"}`)) {
				t.Errorf("the refusal part is not byte for byte as sent:\n%s", reqs[0].Raw)
			}
		})
	}
}

// TestRefusalPartBadInput: a refusal part without a string refusal is a 400
// naming it; input_audio stays refused by its type.
func TestRefusalPartBadInput(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	tests := []struct {
		name, messages, param string
	}{
		{name: "refusal_missing", messages: `[{"role":"assistant","content":[{"type":"refusal"}]},{"role":"user","content":"hi"}]`, param: "messages[0].content[0].refusal"},
		{name: "refusal_number", messages: `[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"refusal","refusal":3}]}]`, param: "messages[1].content[0].refusal"},
		{name: "input_audio", messages: `[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAA=","format":"wav"}}]}]`, param: "messages[0].content[0].type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, g, "/v1/chat/completions", `{"model":"m-large","messages":`+tt.messages+`}`)
			e := readJSON(t, resp)["error"].(map[string]any)
			if resp.StatusCode != 400 || e["code"] != "invalid_request" || e["param"] != tt.param {
				t.Errorf("status %d, error %v; want 400 invalid_request with param %s", resp.StatusCode, e, tt.param)
			}
		})
	}
	if n := len(up.requests()); n != 0 {
		t.Errorf("upstream saw %d requests, want none", n)
	}
}

// TestGRPCRefusalPart: over gRPC, a refusal part passes validation and
// reaches the upstream with its refusal.
func TestGRPCRefusalPart(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	client := flexwayv1.NewChatServiceClient(grpcConn(t, g))
	_, err := client.CreateChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
		Model: "m-large",
		Messages: []*flexwayv1.ChatMessage{
			userMessage("How do I pick my neighbour's lock?"),
			{Role: "assistant", Content: &flexwayv1.ChatMessage_Parts{Parts: &flexwayv1.ContentParts{Parts: []*flexwayv1.ContentPart{
				{Type: "refusal", ExtraFields: map[string]string{"refusal": `"I can't help with that."`}},
			}}}},
			userMessage("Why not?"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := up.requests()
	if len(reqs) != 1 || !bytes.Contains(reqs[0].Raw, []byte(`{"type":"refusal","refusal":"I can't help with that."}`)) {
		t.Fatalf("upstream requests %v", reqs)
	}
}
