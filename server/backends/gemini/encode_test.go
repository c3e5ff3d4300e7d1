package gemini

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// TestEncodeFixtures: each testdata/encode/<case>.openai.json request is
// encoded into exactly <case>.gemini.json, dropping the fields
// <case>.dropped.json names. Covers: system/developer → systemInstruction,
// user/model roles and merging, images, tools → one functionDeclarations,
// every tool_choice, tool results → functionResponse matched by name from
// the history over two turns (string and object results), thoughtSignature
// restored from the echoed id, schema reduction, generationConfig.
func TestEncodeFixtures(t *testing.T) {
	cases, _ := filepath.Glob("testdata/encode/*.openai.json")
	if len(cases) == 0 {
		t.Fatal("no fixtures")
	}
	for _, c := range cases {
		name := strings.TrimSuffix(filepath.Base(c), ".openai.json")
		t.Run(name, func(t *testing.T) {
			req, err := openaiwire.ParseChatCompletionRequest(readFixture(t, "encode", name+".openai.json"))
			if err != nil {
				t.Fatal(err)
			}
			var opts Options
			if strings.Contains(name, "default_max") {
				opts.MaxOutputTokens = 4096
			}
			body, dropped, err := Encode(req, opts)
			if err != nil {
				t.Fatal(err)
			}
			if want := readFixture(t, "encode", name+".gemini.json"); !jsonEqual(t, body, want) {
				t.Errorf("body\n got %s\nwant %s", body, compact(want))
			}
			var wantDropped []string
			_ = json.Unmarshal(readFixture(t, "encode", name+".dropped.json"), &wantDropped)
			if len(wantDropped) == 0 {
				wantDropped = nil
			}
			if !reflect.DeepEqual(dropped, wantDropped) {
				t.Errorf("dropped %q, want %q", dropped, wantDropped)
			}
		})
	}
}

// TestEncodeRefusals: what Gemini cannot express, or what does not read, is
// a 400 invalid_request naming the field, before anything is sent.
func TestEncodeRefusals(t *testing.T) {
	const user = `{"role":"user","content":"x"}`
	for _, c := range []struct{ name, body, param string }{
		{"logprobs", `{"model":"m","messages":[` + user + `],"logprobs":true}`, "logprobs"},
		{"top_logprobs", `{"model":"m","messages":[` + user + `],"top_logprobs":2}`, "top_logprobs"},
		{"non-function tool", `{"model":"m","messages":[` + user + `],"tools":[{"type":"code_interpreter"}]}`, "tools[0].type"},
		{"cyclic $ref", `{"model":"m","messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"n":{"$ref":"#/$defs/N"}},"$defs":{"N":{"type":"object","properties":{"next":{"$ref":"#/$defs/N"}}}}}}}]}`, "tools[0].function.parameters"},
		{"remote $ref", `{"model":"m","messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f","parameters":{"$ref":"https://x/s.json"}}}]}`, "tools[0].function.parameters"},
		{"bad arguments", `{"model":"m","messages":[` + user + `,{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{not json"}}]}]}`, "messages[1].tool_calls[0].function.arguments"},
		{"unknown tool_call_id", `{"model":"m","messages":[` + user + `,{"role":"tool","tool_call_id":"call_zz","content":"r"}]}`, "messages[1].tool_call_id"},
		{"bad tool_choice", `{"model":"m","messages":[` + user + `],"tool_choice":"sometimes"}`, "tool_choice"},
		{"temperature string", `{"model":"m","messages":[` + user + `],"temperature":"hot"}`, "temperature"},
		{"image in assistant", `{"model":"m","messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"}}]}]}`, "messages[0].content[0].image_url"},
		{"unknown role", `{"model":"m","messages":[{"role":"function","content":"x"}]}`, "messages[0].role"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := openaiwire.ParseChatCompletionRequest([]byte(c.body))
			if err != nil {
				t.Skipf("the OpenAI surface refuses it already: %v", err)
			}
			_, _, err = Encode(req, Options{})
			fe, ok := errors.AsType[*faults.Error](err)
			if !ok || fe.Reason != faults.InvalidRequest || fe.Param != c.param {
				t.Fatalf("err %#v, want invalid_request naming %s", err, c.param)
			}
		})
	}
}

// TestToolCallIDs: ids are unique across calls without state, and carry
// the thoughtSignature back.
func TestToolCallIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := ToolCallID("")
		if seen[id] || !strings.HasPrefix(id, "call_") || len(id) != 21 {
			t.Fatalf("id %q repeated or malformed", id)
		}
		seen[id] = true
	}
	id := ToolCallID("Abc+/=")
	base, sig := SplitToolCallID(id)
	if sig != "Abc+/=" || base != id[:21] {
		t.Fatalf("split %q → %q, %q", id, base, sig)
	}
	if b, s := SplitToolCallID("toolu_01.x"); b != "toolu_01.x" || s != "" {
		t.Fatalf("foreign id split: %q %q", b, s)
	}
}

// TestReduceSchema covers the reduction rules one by one.
func TestReduceSchema(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"$schema":"x","type":"object","additionalProperties":false}`, `{"type":"object"}`},
		{`{"type":["integer","null"]}`, `{"type":"integer","nullable":true}`},
		{`{"type":"object","properties":{"additionalProperties":{"type":"string"}}}`, `{"type":"object","properties":{"additionalProperties":{"type":"string"}}}`},
		{`{"type":"object","properties":{"a":{"$ref":"#/definitions/A"}},"definitions":{"A":{"type":"number"}}}`, `{"type":"object","properties":{"a":{"type":"number"}}}`},
		{`{"type":"array","items":{"anyOf":[{"$ref":"#/$defs/A"},{"type":"null"}]},"$defs":{"A":{"type":"string","$comment":"c"}}}`, `{"type":"array","items":{"anyOf":[{"type":"string"},{"type":"null"}]}}`},
	} {
		got, err := ReduceSchema([]byte(c.in))
		if err != nil || !jsonEqual(t, got, []byte(c.want)) {
			t.Errorf("ReduceSchema(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	// Numbers are kept as written, even beyond float64.
	if got, err := ReduceSchema([]byte(`{"type":"number","maximum":1e400}`)); err != nil || string(got) != `{"maximum":1e400,"type":"number"}` {
		t.Errorf("numbers: %s, %v", got, err)
	}
}
