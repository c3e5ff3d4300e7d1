package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends/sse"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata")

// golden compares got with the file at path, or writes it under -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n got: %s\nwant: %s", path, got, want)
	}
}

// indent is data as indented JSON, ending with a newline.
func indent(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Indent(&b, data, "", "  "); err != nil {
		t.Fatalf("not JSON: %v: %s", err, data)
	}
	b.WriteByte('\n')
	return b.Bytes()
}

// fixtures lists testdata/dir/*ext, sorted.
func fixtures(t testing.TB, dir, ext string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join("testdata", dir, "*"+ext))
	if err != nil || len(names) == 0 {
		t.Fatalf("no fixtures in testdata/%s: %v", dir, err)
	}
	return names
}

// replay feeds the SSE body r through an EventReader of buffer size
// bufSize into a fresh Stream, and returns one line per chunk (OpenAI's
// encoding) then the end: "end: ok" or "end: <reason> <status>: <message>".
func replay(r io.Reader, bufSize int) string {
	var out strings.Builder
	er := sse.NewReader(r, bufSize)
	s := NewStream(1700000000)
	for {
		name, data, err := er.Next()
		if err == io.EOF {
			err = s.End()
			if err == nil {
				out.WriteString("end: ok\n")
				return out.String()
			}
		}
		if err == nil {
			var c *flexwayv1.ChatCompletionChunk
			c, err = s.Event(name, data)
			if c != nil {
				out.Write(openaiwire.AppendChatCompletionChunk(nil, c))
				out.WriteByte('\n')
			}
		}
		if err != nil {
			out.WriteString(endLine(err))
			return out.String()
		}
	}
}

// endLine describes a stream's error.
func endLine(err error) string {
	var fe *faults.Error
	if !errors.As(err, &fe) {
		return "end: not a *faults.Error: " + err.Error() + "\n"
	}
	line := fmt.Sprintf("end: %s %d: %s", fe.Reason, fe.UpstreamHTTPStatus, fe.Message)
	if len(fe.UpstreamBody) > 0 {
		line += " " + string(fe.UpstreamBody)
	}
	return line + "\n"
}

func itoa(n int64) string { return fmt.Sprint(n) }
