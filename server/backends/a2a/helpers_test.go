package a2a

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// fixture reads testdata/name.
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parseRequest parses an OpenAI request fixture as the HTTP front does.
func parseRequest(t testing.TB, name string) *flexwayv1.CreateChatCompletionRequest {
	t.Helper()
	req, err := openaiwire.ParseChatCompletionRequest(fixture(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// sameJSON fails unless got and want are the same JSON value.
func sameJSON(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got invalid JSON %s: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want invalid JSON: %v", err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("got\n%s\nwant\n%s", gb, wb)
	}
}

// asFault returns err as a *faults.Error or fails.
func asFault(t *testing.T, err error) *faults.Error {
	t.Helper()
	var fe *faults.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *faults.Error", err, err)
	}
	return fe
}

// mustParse parses an OpenAI request body.
func mustParse(t testing.TB, body string) *flexwayv1.CreateChatCompletionRequest {
	t.Helper()
	req, err := openaiwire.ParseChatCompletionRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}
