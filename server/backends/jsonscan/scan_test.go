package jsonscan

import (
	"encoding/json"
	"testing"
)

var texts = []string{
	`"plain"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u20AC"`, `"\ud83d\ude00"`, `"\ud800"`, `"\ud800\u0041"`,
	`"\udc00\ud800x"`, "\"bad \xff utf8 \xc3\"", `"<&>"`, "\"\u2028\u2029\"", `{"a":[1,-2.5e+3,true,false,null,{}],"b":""}`,
	` [ 1 , 2 ] `, `0`, `-0`, `01`, `1.`, `.5`, `1e`, `"\x"`, `"\u12"`, `{"a" 1}`, `[1,]`, `{"a":1,}`, `tru`, `nul`,
	"\"ctl\x01\"", `"lone \ude00 low"`, `"\ud83d\u0041 pair broken"`, `"caf\u00e9 \u00E9"`, `"日本語"`, "{\"\xed\":1}", `"unterminated`, `{"k\u0065y":1}`, `[]`, `{}`, `""`,
}

// TestSkipValidAsEncodingJSON: Skip accepts exactly what json.Valid does.
func TestSkipValidAsEncodingJSON(t *testing.T) {
	for _, text := range texts {
		var s Scanner
		s.Reset([]byte(text))
		s.Skip()
		if got, want := s.Done(), json.Valid([]byte(text)); got != want {
			t.Errorf("Skip(%q) valid = %v, encoding/json says %v", text, got, want)
		}
	}
}

// TestStrAsEncodingJSON: Str decodes every string as json.Unmarshal does,
// lone surrogates and invalid UTF-8 included.
func TestStrAsEncodingJSON(t *testing.T) {
	for _, text := range texts {
		checkStr(t, text)
	}
}

func checkStr(t *testing.T, text string) {
	t.Helper()
	var want string
	werr := json.Unmarshal([]byte(text), &want)
	var s Scanner
	s.Reset([]byte(text))
	got := s.Str([]byte("x"))
	if ok := s.Done(); ok != (werr == nil) {
		t.Fatalf("Str(%q) ok = %v, encoding/json error %v", text, ok, werr)
	}
	if werr == nil && string(got) != "x"+want {
		t.Fatalf("Str(%q) = %q, want %q", text, got[1:], want)
	}
}

// TestWritersAsMarshal: AppendString and AppendCompact write json.Marshal's
// bytes.
func TestWritersAsMarshal(t *testing.T) {
	for _, text := range texts {
		var str string
		if json.Unmarshal([]byte(text), &str) == nil {
			want, _ := json.Marshal(str)
			if got := AppendString([]byte("x"), str); string(got) != "x"+string(want) {
				t.Errorf("AppendString(%q) = %s, want x%s", str, got, want)
			}
		}
		want, werr := json.Marshal(json.RawMessage(text))
		got, ok := AppendCompact([]byte("x"), []byte(text))
		if ok != (werr == nil) || ok && string(got) != "x"+string(want) {
			t.Errorf("AppendCompact(%q) = %s %v, want x%s %v", text, got, ok, want, werr)
		}
		if got2, ok2 := AppendCompactString([]byte("x"), text); ok2 != ok || string(got2) != string(got) {
			t.Errorf("AppendCompactString(%q) = %s %v, AppendCompact gives %s %v", text, got2, ok2, got, ok)
		}
	}
}

// TestIntAndNumber reads integers and numbers as written.
func TestIntAndNumber(t *testing.T) {
	for text, want := range map[string]int64{"0": 0, "-12": -12, "9007199254740992": 1 << 53} {
		var s Scanner
		s.Reset([]byte(text))
		if got := s.Int(); !s.Done() || got != want {
			t.Errorf("Int(%s) = %d (bad %v), want %d", text, got, s.Bad(), want)
		}
	}
	for _, text := range []string{"1.5", "1e3", "01", "-", "9007199254740993"} {
		var s Scanner
		s.Reset([]byte(text))
		if s.Int(); s.Done() {
			t.Errorf("Int(%s) read, want bad", text)
		}
	}
	var s Scanner
	s.Reset([]byte(` -1.25E+7,`))
	if got := string(s.Number()); got != "-1.25E+7" || s.Bad() {
		t.Errorf("Number = %q, bad %v", got, s.Bad())
	}
}

// FuzzScanner: Skip's verdict and Str's decoding agree with encoding/json
// on any input.
func FuzzScanner(f *testing.F) {
	for _, text := range texts {
		f.Add(text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		var s Scanner
		s.Reset([]byte(text))
		s.Skip()
		if got, want := s.Done(), json.Valid([]byte(text)); got != want {
			t.Fatalf("Skip(%q) valid = %v, encoding/json says %v", text, got, want)
		}
		if len(text) > 0 && text[0] == '"' {
			checkStr(t, text)
		}
		want, werr := json.Marshal(json.RawMessage(text))
		got, ok := AppendCompact(nil, []byte(text))
		if ok != (werr == nil) || ok && string(got) != string(want) {
			t.Fatalf("AppendCompact(%q) = %s %v, want %s %v", text, got, ok, want, werr)
		}
	})
}
