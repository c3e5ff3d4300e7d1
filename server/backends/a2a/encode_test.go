package a2a

import (
	"slices"
	"testing"

	"github.com/flexway/flexway/server/faults"
)

// TestEncode covers the issue's `a2a` request bullet: the chat history
// becomes the parts of one message (text; images as file parts), stream
// selects message/stream, unmodelled fields are dropped by name.
func TestEncode(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		opts           Options
		dropped        []string
	}{
		{"single user message", "req_single.openai.json", "req_single.a2a.json", Options{RequestID: "call-1"}, []string{}},
		{"history with tool turns", "req_history.openai.json", "req_history.a2a.json", Options{RequestID: "call-1"},
			[]string{"max_tokens", "messages[].tool_call_id", "messages[].tool_calls", "temperature", "tools"}},
		{"images as file parts, streamed", "req_images.openai.json", "req_images.a2a.json", Options{RequestID: "call-1", Stream: true, Images: true},
			[]string{"messages[].content[].image_url.detail"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, dropped, err := Encode(parseRequest(t, tc.in), "agentx", tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, body, fixture(t, tc.want))
			if !slices.Equal(dropped, tc.dropped) {
				t.Errorf("dropped %q, want %q", dropped, tc.dropped)
			}
		})
	}
}

// TestEncodeRefuses covers the bad-input rule for a2a: what the
// agent cannot take is a 400 invalid_request naming the field.
func TestEncodeRefuses(t *testing.T) {
	n2 := []byte(`{"model":"a","n":2,"messages":[{"role":"user","content":"hi"}]}`)
	for _, tc := range []struct {
		name, body, param string
		opts              Options
	}{
		{"image to an agent that takes none", `{"model":"a","messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"https://e.com/a.png"}}]}]}`,
			"messages[0].content[1].image_url", Options{}},
		{"n above 1", string(n2), "n", Options{Images: true}},
		{"image URL of another scheme", `{"model":"a","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://e.com/a.png"}}]}]}`,
			"messages[0].content[0].image_url.url", Options{Images: true}},
		{"data URI not base64", `{"model":"a","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]}]}`,
			"messages[0].content[0].image_url.url", Options{Images: true}},
		{"nothing to send", `{"model":"a","messages":[{"role":"assistant","content":null,"tool_calls":[]}]}`, "messages", Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := mustParse(t, tc.body)
			_, _, err := Encode(req, "a", tc.opts)
			fe := asFault(t, err)
			if fe.Reason != faults.InvalidRequest || fe.Param != tc.param || fe.HTTPStatus() != 400 {
				t.Fatalf("got %s %q (%d), want invalid_request %q", fe.Reason, fe.Param, fe.HTTPStatus(), tc.param)
			}
		})
	}
}
