package promptcheck

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/flexway/flexway/server/jsonstring"
)

// FuzzToolArguments: on any input, toolArguments and jsonstring.Unescape do
// not panic; on valid JSON, toolArguments does not fail, and splicing
// every argument back (as its unescaped form) gives JSON that decodes to
// the same value: the spans are exactly the strings.
func FuzzToolArguments(f *testing.F) {
	for _, s := range []string{
		`[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":\"\\u0034\"}"}}]`,
		`[1, "x", {"function": "str"}, {"function": {"arguments": 5}}, {"function": {"arguments": "a", "arguments": "b"}}]`,
		`{"function":{"arguments":"x"}}`, `[]`, `null`, `[{"function" : { "arguments" : "é\u2028" } }]`, `[`, `"\u00`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		_ = jsonstring.Unescape(raw)
		args, err := toolArguments(raw)
		if !json.Valid([]byte(raw)) {
			return
		}
		if err != nil {
			t.Fatalf("valid JSON refused: %v", err)
		}
		for i := range args {
			args[i].text = jsonstring.Unescape(args[i].text)
		}
		out := spliceArguments(raw, args)
		var before, after any
		if json.Unmarshal([]byte(raw), &before) != nil {
			return
		}
		if err := json.Unmarshal([]byte(out), &after); err != nil {
			t.Fatalf("spliced %q into %q, not JSON: %v", raw, out, err)
		}
		if len(args) > 0 && !sameArguments(before, after) {
			t.Fatalf("spliced %q into %q: another value", raw, out)
		}
	})
}

// sameArguments compares two decoded tool_calls values, each arguments
// string compared by its own decoded JSON when it is JSON.
func sameArguments(a, b any) bool {
	norm := func(v any) any {
		calls, ok := v.([]any)
		if !ok {
			return v
		}
		for _, c := range calls {
			obj, _ := c.(map[string]any)
			fn, _ := obj["function"].(map[string]any)
			if s, ok := fn["arguments"].(string); ok {
				var d any
				if json.Unmarshal([]byte(s), &d) == nil {
					fn["arguments"] = d
				}
			}
		}
		return calls
	}
	return reflect.DeepEqual(norm(a), norm(b))
}
