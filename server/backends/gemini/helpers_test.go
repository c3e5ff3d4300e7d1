package gemini

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// fixedIDs makes tool call ids deterministic for the test: the random
// bytes are a counter, so ids stay distinct.
func fixedIDs(t *testing.T) {
	t.Helper()
	t.Cleanup(counterIDs())
}

// counterIDs makes the random bytes of tool call ids a counter from 1 and
// returns the function that restores them.
func counterIDs() (restore func()) {
	old := randRead
	var n byte
	randRead = func(b []byte) {
		n++
		for i := range b {
			b[i] = n
		}
	}
	return func() { randRead = old }
}

func readFixture(t *testing.T, parts ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{"testdata"}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("got invalid JSON %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("fixture invalid JSON %s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
