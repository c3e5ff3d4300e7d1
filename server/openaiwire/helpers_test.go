package openaiwire_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readTestdata returns the content of testdata/name.
func readTestdata(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// decodeJSON decodes one JSON document into an any tree, numbers kept as
// json.Number so that big integers are compared exactly.
func decodeJSON(tb testing.TB, b []byte) any {
	tb.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		tb.Fatalf("not valid JSON: %v\n%s", err, b)
	}
	if dec.More() {
		tb.Fatalf("more than one JSON value:\n%s", b)
	}
	return v
}

// sameNumber compares JSON numbers: integers by their digits (so that a big
// integer must be preserved exactly), numbers with a fraction or an exponent
// by their float64 value (so that 0.0 and 0, 1e-07 and 1e-7 are equal).
var sameNumber = cmp.Comparer(func(a, b json.Number) bool {
	if a == b {
		return true
	}
	if !strings.ContainsAny(string(a)+string(b), ".eE") {
		return false
	}
	fa, errA := a.Float64()
	fb, errB := b.Float64()
	return errA == nil && errB == nil && fa == fb
})

// diffJSON returns the semantic difference between two JSON documents
// (key order and number spelling aside), empty when they are equal.
func diffJSON(tb testing.TB, want, got []byte) string {
	tb.Helper()
	return cmp.Diff(decodeJSON(tb, want), decodeJSON(tb, got), sameNumber)
}

// visionRequest returns a chat request carrying one data: URI image whose
// base64 payload is about size bytes.
func visionRequest(size int) []byte {
	raw := make([]byte, size/4*3)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	var b bytes.Buffer
	b.Grow(size + 512)
	b.WriteString(`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"What is in this image?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,`)
	enc := base64.NewEncoder(base64.StdEncoding, &b)
	enc.Write(raw)
	enc.Close()
	b.WriteString(`","detail":"high"}}]}],"max_tokens":300}`)
	return b.Bytes()
}

// smallRequest is a typical small chat request.
const smallRequest = `{
  "model": "gpt-4o-mini",
  "messages": [
    {"role": "system", "content": "You are a concise assistant for the support team of an online shop. Answer in the customer's language."},
    {"role": "user", "content": "Hello! My order #12345 has not arrived yet. It was supposed to arrive on Monday. Can you check what happened?"}
  ],
  "temperature": 0.3,
  "max_tokens": 256,
  "user": "customer-8812",
  "stream": true,
  "stream_options": {"include_usage": true}
}`
