package gemini

import (
	"encoding/json"
	"testing"
)

// TestScanStrings: the stream's hand-written scanner unescapes strings as
// encoding/json does, and refuses what it refuses.
func TestScanStrings(t *testing.T) {
	for _, lit := range []string{
		`"plain"`, `"a\nb\tc\"d\\e\/f\b\f\r"`, `"caf\u00e9 \u00E9"`, `"\ud83d\ude00 smile"`,
		`"lone \ud83d high"`, `"lone \ude00 low"`, `"\ud83d\u0041 pair broken"`, `""`, `"日本語"`,
	} {
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			t.Fatal(err)
		}
		e := eventScan{data: []byte(lit)}
		got, err := e.str(nil)
		if err != nil || string(got) != want || e.pos != len(lit) {
			t.Errorf("str(%s) = %q, %v; want %q", lit, got, err, want)
		}
	}
	for _, bad := range []string{`"open`, `"bad \x"`, `"\u12"`, "\"ctl \x01\"", `nope`} {
		e := eventScan{data: []byte(bad)}
		if _, err := e.str(nil); err == nil {
			t.Errorf("str(%q) accepted", bad)
		}
	}
}

// TestScanEvents: whole events the scanner must read or refuse.
func TestScanEvents(t *testing.T) {
	ok := []string{
		`{}`, `{"candidates":null}`, `{"candidates":[]}`,
		`{"x":[1,-2.5e+3,true,false,null,{"y":"\"}"}],"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"AA=="}},{"text":"t"}]},"index":0}]}`,
		` {"usageMetadata":{"promptTokenCount":0}} `,
	}
	for _, d := range ok {
		var e eventScan
		if err := e.scan([]byte(d)); err != nil {
			t.Errorf("scan(%s): %v", d, err)
		}
	}
	bad := []string{``, `[]`, `{"a":}`, `{"a":1,}`, `{"a":01}`, `{"a":1.}`, `{} {}`, `{"usageMetadata":{"promptTokenCount":1.5}}`, `{"candidates":[{"index":"0"}]}`, `{"a":tru}`}
	for _, d := range bad {
		var e eventScan
		if err := e.scan([]byte(d)); err == nil {
			t.Errorf("scan(%s) accepted", d)
		}
	}
}
