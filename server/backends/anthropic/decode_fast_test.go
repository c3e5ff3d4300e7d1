package anthropic

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// answerBodies are Message answers the fast path must read as
// encoding/json does, or leave to it.
var answerBodies = []string{
	`{"id":"m","type":"message","content":null,"usage":{"input_tokens":null,"output_tokens":3}}`,
	`{"id":"m","id":null,"type":"message"}`,
	`{"ID":"m","type":"message"}`,
	`{"id":"m","type":"message","content":[{"type":"text","text":"a\u00e9\ud800b"},null,{"type":"tool_use","input":null}]}`,
	`{"id":"m","type":"message","usage":{"input_tokens":1.5}}`,
	`{"id":"m","type":"message","content":[{"type":"text"}],"content":[{"text":"x"}]}`,
	`{"id":"m","type":"message","stop_sequence":null,"container":{"id":"c"}} `,
	`{"id":"m","type":"message"} x`,
	"{\"id\":\"\xff\",\"type\":\"message\"}",
}

// TestScanAnswerAsEncodingJSON: whatever scanAnswer reads, it reads as
// json.Unmarshal does.
func TestScanAnswerAsEncodingJSON(t *testing.T) {
	files, _ := filepath.Glob("testdata/decode/*.json")
	read := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if checkScanAnswer(t, data) {
			read++
		}
	}
	for _, b := range answerBodies {
		checkScanAnswer(t, []byte(b))
	}
	if read < len(files)/2 {
		t.Errorf("the fast path read %d of %d fixtures", read, len(files))
	}
}

func checkScanAnswer(t *testing.T, body []byte) bool {
	t.Helper()
	var fast, slow wireMessageAnswer
	if !scanAnswer(body, &fast) {
		return false
	}
	if err := json.Unmarshal(body, &slow); err != nil {
		t.Fatalf("scanAnswer read %q, which encoding/json refuses: %v", body, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("scanAnswer(%q) = %+v, encoding/json reads %+v", body, fast, slow)
	}
	return true
}

// FuzzAnthropicDecode: the fast path agrees with encoding/json on any body.
func FuzzAnthropicDecode(f *testing.F) {
	for _, b := range answerBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkScanAnswer(t, body) })
}
