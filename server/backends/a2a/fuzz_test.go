package a2a

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"

	"testing"

	"google.golang.org/protobuf/proto"
)

// FuzzA2AStream feeds arbitrary bytes through the SSE reader and the stream
// decoder: neither may panic, a stream without error must be done, and the
// reflection-free fast path must decode exactly as encoding/json does.
func FuzzA2AStream(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.sse"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("data: {\"id\":\"call-1\",\"result\":{\"kind\":\"task\",\"status\":{\"state\":\"TASK_STATE_COMPLETED\"},\"artifacts\":[{\"parts\":[{\"text\":\"x\"}]}]}}\n\n"))
	f.Add([]byte("data: {\"id\":\"call-1\",\"error\":null,\"result\":null}\n\n"))
	f.Add([]byte(`data: {"id":"call-1","result":{"kind":"artifact-update","taskId":"t","artifact":{"artifactId":"a","parts":[{"kind":"text","text":"a\n\u00e9\ud83d\ude00\"\\/"},{"text":"x","kind":"text"},{"kind":"file","file":{}}]},"append":true}}` + "\n\n"))
	f.Add([]byte(`data: {"id":"call-1","result":{"kind":"artifact-update","metadata":{"a" 1},"artifact":{"artifactId":"a","parts":[{"kind":"text","text":"\x"}]}}}` + "\n\n"))
	// Every event of a real answer carries the request's id (decodeOpts'):
	// without it the fast path is never taken.
	f.Add([]byte(`data: {"id":"call-1","result":{"kind":"status-update","taskId":"t","status":{"state":"auth-required"},"final":true}}` + "\n\n"))
	f.Add([]byte(`data: {"id":null,"error":{"code":-32700,"message":"m","data":[1]}}` + "\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		r := replay(bytes.NewReader(body))
		if r.err == nil && r.end != "done" {
			t.Fatalf("no error but end %q", r.end)
		}
		slow := replayWith(bytes.NewReader(body), true)
		if !slices.Equal(r.chunks, slow.chunks) || r.end != slow.end {
			t.Fatalf("fast path %q end %q, encoding/json %q end %q", r.chunks, r.end, slow.chunks, slow.end)
		}
		sameDecode(t, body)
	})
}

// sameDecode fails unless Decode's fast path and encoding/json read body
// alike.
func sameDecode(t *testing.T, body []byte) {
	t.Helper()
	fast, ferr := decode(body, decodeOpts, false)
	slow, serr := decode(body, decodeOpts, true)
	if !proto.Equal(fast, slow) || (ferr == nil) != (serr == nil) || ferr != nil && ferr.Error() != serr.Error() {
		t.Fatalf("fast path %v / %v, encoding/json %v / %v", fast, ferr, slow, serr)
	}
}

// FuzzA2ADecode checks that Decode never panics and that its fast path
// reads every body as encoding/json does.
func FuzzA2ADecode(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "send_*"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"id":"call-1","ID":"x","result":{"kind":"message","parts":[]}}`))
	f.Add([]byte(`{"id":"call-1","result":{"kind":"task","id":"t","status":{"state":"auth-required","message":{"parts":[{"kind":"file","file":{}}]}}}}`))
	f.Fuzz(func(t *testing.T, body []byte) { sameDecode(t, body) })
}
