package gemini

import (
	"testing"
)

// TestScanEvents: whole events the scanner must read or refuse.
func TestScanEvents(t *testing.T) {
	ok := []string{
		`{}`, `{"candidates":null}`, `{"candidates":[]}`,
		`{"x":[1,-2.5e+3,true,false,null,{"y":"\"}"}],"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"AA=="}},{"text":"t"}]},"index":0}]}`,
		` {"usageMetadata":{"promptTokenCount":0}} `, `{"error":null}`,
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
