package anthropic

import (
	"strings"
	"testing"

	"github.com/flexway/flexway/server/openaiwire"
)

// TestEncodeBytesAsMarshal: the hand-written writer keeps what
// json.Marshal wrote: <, > and & escaped, raw schemas and arguments
// compacted, U+2028 escaped.
func TestEncodeBytesAsMarshal(t *testing.T) {
	req, err := openaiwire.ParseChatCompletionRequest([]byte(`{"model":"m","max_tokens":5,"messages":[
		{"role":"system","content":"a<b>&c\u2028"},
		{"role":"assistant","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{ \"q\" : \"<x>\" }"}}]},
		{"role":"tool","tool_call_id":"t1","content":"ok"}],
		"tools":[{"type":"function","function":{"name":"f","parameters":{ "type" : "object", "description":"a&b" }}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _, err := Encode(req, "m", testOptions)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"system":"a\u003cb\u003e\u0026c\u2028"`,
		`"input":{"q":"\u003cx\u003e"}`,
		`"input_schema":{"type":"object","description":"a\u0026b"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("body lacks %s:\n%s", want, body)
		}
	}
}
