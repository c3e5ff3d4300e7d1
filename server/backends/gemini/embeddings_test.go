package gemini

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// TestEmbeddings: /v1/embeddings to a gemini backend is one
// batchEmbedContents call, one request per input, answered in order.
func TestEmbeddings(t *testing.T) {
	if p := EmbeddingsPath("gemini-embedding-001"); p != "models/gemini-embedding-001:batchEmbedContents" {
		t.Fatal(p)
	}
	req, err := openaiwire.ParseEmbeddingRequest(readFixture(t, "embeddings.openai.json"))
	if err != nil {
		t.Fatal(err)
	}
	body, dropped, err := EncodeEmbeddings(req, "gemini-embedding-001")
	if err != nil {
		t.Fatal(err)
	}
	if want := readFixture(t, "embeddings.gemini-request.json"); !jsonEqual(t, body, want) {
		t.Errorf("request %s, want %s", body, compact(want))
	}
	if !reflect.DeepEqual(dropped, []string{"user"}) {
		t.Errorf("dropped %q", dropped)
	}
	answer := readFixture(t, "embeddings.gemini-response.json")
	got, err := DecodeEmbeddings(answer, "gemini-embedding-001", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.0135,-0.0208,0.5]},{"object":"embedding","index":1,"embedding":[-0.25,0.125,1]}],"model":"gemini-embedding-001"}`
	if out := openaiwire.AppendEmbeddingResponse(nil, got); !jsonEqual(t, out, []byte(want)) {
		t.Errorf("answer %s, want %s", out, want)
	}
	b64, err := DecodeEmbeddings(answer, "gemini-embedding-001", "base64", 2)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(b64.Data[1].GetBase64())
	if len(raw) != 12 || math.Float32frombits(binary.LittleEndian.Uint32(raw[4:])) != 0.125 {
		t.Errorf("base64 %q", b64.Data[1].GetBase64())
	}
	if _, err := DecodeEmbeddings(answer, "m", "", 3); err == nil {
		t.Error("a count mismatch is accepted")
	}
	if _, err := DecodeEmbeddings([]byte("<html>"), "m", "", 2); err == nil {
		t.Error("garbage is accepted")
	}
	tok, err := openaiwire.ParseEmbeddingRequest([]byte(`{"model":"m","input":[1,2,3]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = EncodeEmbeddings(tok, "m")
	if fe, ok := errors.AsType[*faults.Error](err); !ok || fe.Reason != faults.InvalidRequest || fe.Param != "input" {
		t.Errorf("token input: %v", err)
	}
}
