package a2a

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzA2AStream feeds arbitrary bytes through the SSE reader and the stream
// decoder: neither may panic, and a decoder that reports done must have
// returned its last chunk without error.
func FuzzA2AStream(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.sse"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("data: {\"result\":{\"kind\":\"task\",\"status\":{\"state\":\"TASK_STATE_COMPLETED\"},\"artifacts\":[{\"parts\":[{\"text\":\"x\"}]}]}}\n\n"))
	f.Add([]byte("data: {\"error\":null,\"result\":null}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		r := replay(bytes.NewReader(body))
		if r.err == nil && r.end != "done" {
			t.Fatalf("no error but end %q", r.end)
		}
		_, _ = Decode(body, decodeOpts)
	})
}
