package openaiwire_test

import (
	"encoding/json"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/openaiwire"
)

// TestAppendMessagesRoundTrip: a request's messages, parsed, are written
// back as the same JSON array, and an extra field that is not JSON (a
// gRPC caller's) becomes null rather than an invalid document.
func TestAppendMessagesRoundTrip(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi \u00e9"}],"name":"bob"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}]}`
	req, err := openaiwire.ParseChatCompletionRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	got := string(openaiwire.AppendMessages(nil, req.GetMessages()))
	want := `[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi é"}],"name":"bob"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}]`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	bad := &flexwayv1.ChatMessage{Role: "user", ExtraFields: map[string]string{"x": "{not json"}}
	if got := string(openaiwire.AppendMessages(nil, []*flexwayv1.ChatMessage{bad})); got != `[{"role":"user","x":null}]` || !json.Valid([]byte(got)) {
		t.Errorf("bad extra: %s", got)
	}
}

// TestAppendEmbeddingInputs: every input shape is written as an array of
// inputs.
func TestAppendEmbeddingInputs(t *testing.T) {
	for _, tc := range []struct{ input, want string }{
		{`"one"`, `["one"]`},
		{`["a","b"]`, `["a","b"]`},
		{`[1,2]`, `[[1,2]]`},
		{`[[1],[2,3]]`, `[[1],[2,3]]`},
	} {
		req, err := openaiwire.ParseEmbeddingRequest([]byte(`{"model":"e","input":` + tc.input + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(openaiwire.AppendEmbeddingInputs(nil, req.GetInput())); got != tc.want {
			t.Errorf("input %s: got %s, want %s", tc.input, got, tc.want)
		}
	}
	if got := string(openaiwire.AppendEmbeddingInputs(nil, nil)); got != "null" {
		t.Errorf("unset input: %s", got)
	}
}
