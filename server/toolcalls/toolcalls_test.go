package toolcalls

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/flexway/flexway/server/jsonstring"
)

func TestParse(t *testing.T) {
	raw := `[{"id":"call_1","type":"function","function":{"name":"pay","arguments":"{\"card\":\"4111\"}"}}, {"index":3,"function":{"arguments" : "x"}}]`
	calls, err := Parse(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Call{
		{Index: 0, Name: "pay", Start: 71, End: 92, Arguments: `{"card":"4111"}`, Other: true, Unindexed: true},
		{Index: 3, Start: 133, End: 136, Arguments: "x"},
	}
	if !reflect.DeepEqual(calls, want) {
		t.Fatalf("got %+v\nwant %+v", calls, want)
	}
	for _, c := range calls {
		var s string
		if json.Unmarshal([]byte(raw[c.Start:c.End]), &s) != nil || s != c.Arguments {
			t.Errorf("span %q is not %q", raw[c.Start:c.End], c.Arguments)
		}
	}
	if got := Splice(raw, calls, []string{"A", `"B"`}); got != `[{"id":"call_1","type":"function","function":{"name":"pay","arguments":"A"}}, {"index":3,"function":{"arguments" : "\"B\""}}]` {
		t.Errorf("Splice: %s", got)
	}
	// null, an empty array, calls without arguments
	for _, raw := range []string{`null`, ` [ ] `, `[{"id":"c","function":null}]`, `[{"function":{"name":null,"arguments":null}}]`} {
		calls, err := Parse(raw, nil)
		if err != nil {
			t.Errorf("%s: %v", raw, err)
		}
		for _, c := range calls {
			if c.Start != -1 {
				t.Errorf("%s: %+v", raw, c)
			}
		}
	}
	// a key in another case is the key, as encoding/json reads it
	calls, err = Parse(`[{"FUNCTION":{"Arguments":"4111"}}]`, nil)
	if err != nil || len(calls) != 1 || calls[0].Arguments != "4111" {
		t.Errorf("folded keys: %+v %v", calls, err)
	}
}

// TestParseShapes: what is not OpenAI's shape is refused with where and
// why (attack pass: an object instead of an array, arguments as an
// object, a second arguments key passed the prompt check unread).
func TestParseShapes(t *testing.T) {
	for raw, want := range map[string]string{
		`{"function":{"arguments":"x"}}`: "tool_calls must be an array",
		`"x"`:                            "tool_calls must be an array",
		`[1]`:                            "tool_calls[0] must be an object",
		`[{"function":"f"}]`:             "tool_calls[0].function must be an object",
		`[{},{"function":{"arguments":{"card":"4111"}}}]`:  "tool_calls[1].function.arguments must be a string",
		`[{"function":{"name":7}}]`:                        "tool_calls[0].function.name must be a string",
		`[{"function":{"arguments":"a","arguments":"b"}}]`: "tool_calls[0].function must be an object with one arguments",
		`[{"function":{"arguments":"a","ARGUMENTS":"b"}}]`: "tool_calls[0].function must be an object with one arguments",
		`[{"function":{},"function":{"arguments":"b"}}]`:   "tool_calls[0] must be an object with one function",
		`[{"index":-1}]`:          "tool_calls[0].index must be an integer from 0 to 65536",
		`[{"index":1.5}]`:         "tool_calls[0].index must be an integer from 0 to 65536",
		`[{"index":"0"}]`:         "tool_calls[0].index must be an integer from 0 to 65536",
		`[{"index":0,"index":1}]`: "tool_calls[0] must be an object with one index",
	} {
		_, err := Parse(raw, nil)
		var se *ShapeError
		if !errors.As(err, &se) || err.Error() != want {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
	for _, raw := range []string{``, `[`, `[{"function":{"arguments":"x"}}`, `[] x`, `[{"a":}]`, "\"\\u00"} {
		if _, err := Parse(raw, nil); err != ErrNotJSON {
			t.Errorf("%q: %v, want ErrNotJSON", raw, err)
		}
	}
}

// FuzzParse: on any input Parse does not panic and refuses what is not
// JSON; on what it reads, each span is exactly its arguments string, and
// splicing every argument back (as its unescaped form) gives JSON that
// decodes to the same value.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":\"\\u0034\"}"}}]`,
		`[1, "x", {"function": "str"}, {"function": {"arguments": 5}}, {"function": {"arguments": "a", "arguments": "b"}}]`,
		`{"function":{"arguments":"x"}}`, `[]`, `null`, `[{"function" : { "arguments" : "é\u2028" } }]`, `[`, `"\u00`,
		`[{"index":0,"function":{"Arguments":"x"}}]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		calls, err := Parse(raw, nil)
		if !json.Valid([]byte(raw)) {
			if err != ErrNotJSON {
				t.Fatalf("%q is not JSON: %v", raw, err)
			}
			return
		}
		if err != nil {
			var se *ShapeError
			if !errors.As(err, &se) {
				t.Fatalf("valid JSON %q: %v", raw, err)
			}
			return
		}
		texts := make([]string, len(calls))
		for i, c := range calls {
			if c.Start < 0 {
				continue
			}
			var s string
			if json.Unmarshal([]byte(raw[c.Start:c.End]), &s) != nil || s != c.Arguments {
				t.Fatalf("%q: span %q is not %q", raw, raw[c.Start:c.End], c.Arguments)
			}
			texts[i] = c.Arguments
			if json.Valid([]byte(c.Arguments)) {
				// the guards check JSON arguments unescaped: the same
				// value once decoded
				texts[i] = jsonstring.Unescape(c.Arguments)
			}
		}
		out := Splice(raw, calls, texts)
		var before, after any
		if json.Unmarshal([]byte(raw), &before) != nil {
			return
		}
		if err := json.Unmarshal([]byte(out), &after); err != nil {
			t.Fatalf("spliced %q into %q, not JSON: %v", raw, out, err)
		}
		if !sameArguments(before, after) {
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
			for k, f := range obj {
				fn, _ := f.(map[string]any)
				if !isKey(k, "function") || fn == nil {
					continue
				}
				for fk, a := range fn {
					if s, ok := a.(string); ok && isKey(fk, "arguments") {
						var d any
						if json.Unmarshal([]byte(s), &d) == nil {
							fn[fk] = d
						}
					}
				}
			}
		}
		return calls
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

func isKey(k, w string) bool { return fold(k, w) == w }
