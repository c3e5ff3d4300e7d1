package openaiwire

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestValidRawMatchesEncodingJSON checks the scanner's validation against
// encoding/json on valid and malformed values.
func TestValidRawMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
	}{
		{name: "empty", in: ``},
		{name: "spaces", in: `   `},
		{name: "null", in: `null`},
		{name: "nul", in: `nul`},
		{name: "nullx", in: `nullx`},
		{name: "true_ws", in: " \ttrue\r\n"},
		{name: "int", in: `-0`},
		{name: "leading_zero", in: `01`},
		{name: "minus_only", in: `-`},
		{name: "fraction", in: `1.25e+10`},
		{name: "dot_no_digits", in: `1.`},
		{name: "exp_no_digits", in: `1e`},
		{name: "exp_sign_no_digits", in: `1e-`},
		{name: "plus", in: `+1`},
		{name: "string_escapes", in: `"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"`},
		{name: "string_bad_escape", in: `"\a"`},
		{name: "string_short_unicode", in: `"\u12"`},
		{name: "string_unterminated", in: `"abc`},
		{name: "string_control", in: "\"a\tb\""},
		{name: "string_del", in: "\"a\x7fb\""},
		{name: "long_string", in: `"` + strings.Repeat("abcdefgh", 20) + `\n` + strings.Repeat("x", 13) + `"`},
		{name: "object", in: `{"a":[1,{"b":null}],"c":"d"}`},
		{name: "object_trailing_comma", in: `{"a":1,}`},
		{name: "object_missing_value", in: `{"a":}`},
		{name: "object_number_key", in: `{1:2}`},
		{name: "array_trailing_comma", in: `[1,]`},
		{name: "array_leading_comma", in: `[,1]`},
		{name: "array_empty", in: `[ ]`},
		{name: "two_values", in: `1 2`},
		{name: "deep_ok", in: strings.Repeat("[", 10000) + strings.Repeat("]", 10000)},
		{name: "too_deep", in: strings.Repeat("[", 10001) + strings.Repeat("]", 10001)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, want := validRaw(tt.in), json.Valid([]byte(tt.in)); got != want {
				t.Errorf("validRaw(%.60q) = %v, encoding/json says %v", tt.in, got, want)
			}
		})
	}
}

// TestStringDecoding checks the string decoder against encoding/json,
// lone surrogates included.
func TestStringDecoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
	}{
		{name: "plain", in: `"hello"`},
		{name: "escapes", in: `"a\"b\\c\/d\be\ff\ng\rh\ti"`},
		{name: "bmp", in: `"\u00e9t\u00E9"`},
		{name: "pair", in: `"\ud83d\ude00"`},
		{name: "lone_high", in: `"\ud83dx"`},
		{name: "lone_high_end", in: `"\ud83d"`},
		{name: "lone_low", in: `"\ude00"`},
		{name: "high_high", in: `"\ud83d\ud83d\ude00"`},
		{name: "high_then_escape", in: `"\ud83d\n"`},
		{name: "nul", in: `"\u0000"`},
		{name: "utf8_raw", in: `"été 😀"`},
		{name: "escaped_slashes", in: `"data:image/png;base64,ab\/cd\/` + strings.Repeat("x", 100) + `"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := decoder{data: []byte(tt.in)}
			got, err := d.str()
			if err != nil {
				t.Fatal(err)
			}
			var want string
			if err := json.Unmarshal([]byte(tt.in), &want); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("str(%s) = %q, encoding/json decodes %q", tt.in, got, want)
			}
			view, err := (&decoder{data: []byte(tt.in)}).strView()
			if err != nil || string(view) != want {
				t.Errorf("strView(%s) = %q, %v; want %q", tt.in, view, err, want)
			}
		})
	}
}

// FuzzScanner checks the scanner against encoding/json on any input: the
// same validity, the same decoded strings, and compaction that keeps the
// value.
func FuzzScanner(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e-3,"x\u00e9\ud83d\ude00",null,true]}`, `"\ud800"`, `[1,]`, "{\n \"a\" : \"b c\"\n}", `-0.0E+1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !utf8.Valid(b) {
			if validRaw(string(b)) {
				t.Fatalf("validRaw accepted invalid UTF-8 %q", b)
			}
			return
		}
		valid := validRaw(string(b))
		if want := json.Valid(b); valid != want {
			t.Fatalf("validRaw(%q) = %v, encoding/json says %v", b, valid, want)
		}
		if !valid {
			return
		}
		var want any
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		d := decoder{data: b}
		if d.peek() == '"' {
			s, err := d.str()
			if err != nil || s != want.(string) {
				t.Fatalf("str(%q) = %q, %v; encoding/json decodes %q", b, s, err, want)
			}
		}
		compact := appendCompact(nil, strings.TrimSpace(string(b)))
		var got any
		if err := json.Unmarshal(compact, &got); err != nil {
			t.Fatalf("compacted %q to invalid %q: %v", b, compact, err)
		}
		gotJSON, _ := json.Marshal(got)
		wantJSON, _ := json.Marshal(want)
		if string(gotJSON) != string(wantJSON) {
			t.Fatalf("compacting %q changed it to %q", b, compact)
		}
	})
}
