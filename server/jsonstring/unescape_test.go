package jsonstring

import (
	"encoding/json"
	"testing"
)

var unescapeCases = []struct{ in, want string }{
	{`{"card":"\u0034111 1111 1111 1111"}`, `{"card":"4111 1111 1111 1111"}`},
	{`{"a":"x\u200by"}`, "{\"a\":\"x\u200by\"}"},
	{`{"e":"\ud83d\ude00 caf\u00e9"}`, `{"e":"😀 café"}`},
	{`{"q":"\u0022 \u005c \u000a \n \" \\ \/"}`, `{"q":"\u0022 \u005c \u000a \n \" \\ /"}`},
	{`{"lone":"\ud83d x", "low":"\udc00", "bad":"\u00zz"}`, `{"lone":"\ud83d x", "low":"\udc00", "bad":"\u00zz"}`},
	{`{"k\u0041":1, "n":[1,2]} \u0041`, `{"kA":1, "n":[1,2]} \u0041`},
	{`"\u004`, `"\u004`},
	{`plain`, `plain`},
}

// TestUnescape: printable \u escapes inside strings are decoded (pairs
// too), those that must stay escapes are kept, text outside strings is
// untouched, and valid JSON decodes to the same value after.
func TestUnescape(t *testing.T) {
	for _, tt := range unescapeCases {
		got := Unescape(tt.in)
		if got != tt.want {
			t.Errorf("Unescape(%s) = %s, want %s", tt.in, got, tt.want)
		}
		var a, b any
		if json.Unmarshal([]byte(tt.in), &a) == nil {
			if err := json.Unmarshal([]byte(got), &b); err != nil {
				t.Errorf("Unescape(%s) = %s: no longer JSON: %v", tt.in, got, err)
			} else if ja, _ := json.Marshal(a); string(ja) != mustMarshal(b) {
				t.Errorf("Unescape(%s) changed the value: %s vs %s", tt.in, ja, mustMarshal(b))
			}
		}
	}
}

func mustMarshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestUnescaperSplitEverywhere: split into two pieces at every position
// and into single bytes, the pieces' results concatenate to Unescape's.
func TestUnescaperSplitEverywhere(t *testing.T) {
	for _, tt := range unescapeCases {
		for i := 0; i <= len(tt.in); i++ {
			var u Unescaper
			got := u.Push(tt.in[:i]) + u.Push(tt.in[i:]) + u.Flush()
			if got != tt.want {
				t.Fatalf("split %q|%q: %s, want %s", tt.in[:i], tt.in[i:], got, tt.want)
			}
		}
		var u Unescaper
		got := ""
		for i := 0; i < len(tt.in); i++ {
			got += u.Push(tt.in[i : i+1])
		}
		if got += u.Flush(); got != tt.want {
			t.Fatalf("bytes of %s: %s, want %s", tt.in, got, tt.want)
		}
	}
}

// FuzzUnescape: no panic; valid JSON stays JSON of the same value; any
// two-piece split gives the one-shot result.
func FuzzUnescape(f *testing.F) {
	for _, tt := range unescapeCases {
		f.Add(tt.in, len(tt.in)/2)
	}
	f.Fuzz(func(t *testing.T, s string, at int) {
		want := Unescape(s)
		if at < 0 || at > len(s) {
			at = len(s) / 2
		}
		var u Unescaper
		if got := u.Push(s[:at]) + u.Push(s[at:]) + u.Flush(); got != want {
			t.Fatalf("split at %d: %q, one shot %q", at, got, want)
		}
		var a, b any
		if json.Unmarshal([]byte(s), &a) == nil {
			if err := json.Unmarshal([]byte(want), &b); err != nil || mustMarshal(a) != mustMarshal(b) {
				t.Fatalf("%q → %q: value changed (%v)", s, want, err)
			}
		}
	})
}
