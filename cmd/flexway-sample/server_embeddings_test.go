package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"math"
	"net/http"
	"testing"
)

func TestEmbeddings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		body       string
		wantModel  string
		wantCount  int
		wantDims   int
		wantTokens int
	}{
		{name: "string", body: `{"model":"sample-small","input":"hello world"}`, wantModel: "sample-small", wantCount: 1, wantDims: 8, wantTokens: 2},
		{name: "array_of_strings", body: `{"model":"sample-large","input":["a b","c"]}`, wantModel: "sample-large", wantCount: 2, wantDims: 8, wantTokens: 3},
		{name: "token_ids", body: `{"model":"sample-small","input":[1,2,3]}`, wantModel: "sample-small", wantCount: 1, wantDims: 8, wantTokens: 3},
		{name: "token_arrays", body: `{"model":"sample-small","input":[[1,2],[3],[4,5,6]]}`, wantModel: "sample-small", wantCount: 3, wantDims: 8, wantTokens: 6},
		{name: "dimensions", body: `{"model":"sample-small","input":"hello","dimensions":16}`, wantModel: "sample-small", wantCount: 1, wantDims: 16, wantTokens: 1},
		{name: "unknown_model_falls_back_to_first", body: `{"model":"text-embedding-3-small","input":"x"}`, wantModel: "sample-small", wantCount: 1, wantDims: 8, wantTokens: 1},
	}
	srv := newTestServer(t, fastOptions())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := do(t, srv, http.MethodPost, "/v1/embeddings", tt.body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200; body %s", resp.StatusCode, body)
			}
			var got gotEmbeddings
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if got.Object != "list" || got.Model != tt.wantModel {
				t.Errorf("object %q model %q, want list %q", got.Object, got.Model, tt.wantModel)
			}
			if got.Usage.PromptTokens != tt.wantTokens || got.Usage.TotalTokens != tt.wantTokens {
				t.Errorf("usage = %+v, want %d prompt and total tokens", got.Usage, tt.wantTokens)
			}
			if len(got.Data) != tt.wantCount {
				t.Fatalf("%d vectors, want %d", len(got.Data), tt.wantCount)
			}
			var vecs [][]float32
			for i, d := range got.Data {
				var vec []float32
				if err := json.Unmarshal(d.Embedding, &vec); err != nil {
					t.Fatalf("data[%d].embedding: %v", i, err)
				}
				if d.Object != "embedding" || d.Index != i {
					t.Errorf("data[%d]: object %q index %d", i, d.Object, d.Index)
				}
				if len(vec) != tt.wantDims {
					t.Errorf("data[%d] has %d dimensions, want %d", i, len(vec), tt.wantDims)
				}
				var norm float64
				for _, f := range vec {
					norm += float64(f) * float64(f)
				}
				if math.Abs(norm-1) > 1e-5 {
					t.Errorf("data[%d] squared norm = %v, want 1", i, norm)
				}
				vecs = append(vecs, vec)
			}
			for i := 1; i < len(vecs); i++ {
				if equalFloats(vecs[0], vecs[i]) {
					t.Errorf("data[0] and data[%d] are equal for different inputs", i)
				}
			}
		})
	}
}

// docVector computes an input's vector from the recipe in the package doc.
func docVector(data string, dims int) []float32 {
	v := make([]float64, dims)
	var norm float64
	for j := range v {
		h := fnv.New64a()
		h.Write([]byte(data))
		h.Write([]byte{byte(j), byte(j >> 8), byte(j >> 16), byte(j >> 24)})
		v[j] = float64(h.Sum64()>>11)/(1<<53)*2 - 1
		norm += v[j] * v[j]
	}
	out := make([]float32, dims)
	for j := range v {
		out[j] = float32(v[j] / math.Sqrt(norm))
	}
	return out
}

// equalFloats reports whether a and b hold exactly the same values.
func equalFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEmbeddingVectorsAreDeterministic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input string
		dims  int
		data  string // what the doc says is hashed
	}{
		{name: "string", input: `"hello world"`, dims: 8, data: "hello world"},
		{name: "string_12_dims", input: `"hello world"`, dims: 12, data: "hello world"},
		{name: "token_ids", input: `[15339, 1917]`, dims: 8, data: "15339 1917"},
		{name: "empty_string", input: `""`, dims: 4, data: ""},
	}
	srv := newTestServer(t, fastOptions())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := docVector(tt.data, tt.dims)
			for range 2 { // same answer every time
				_, body := do(t, srv, http.MethodPost, "/v1/embeddings", `{"input":`+tt.input+`,"dimensions":`+itoa(tt.dims)+`}`, nil)
				var got gotEmbeddings
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatal(err)
				}
				var vec []float32
				if err := json.Unmarshal(got.Data[0].Embedding, &vec); err != nil {
					t.Fatal(err)
				}
				if !equalFloats(vec, want) {
					t.Errorf("vector = %v, want %v", vec, want)
				}
			}
		})
	}
}

func TestEmbeddingsBase64(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input string
		dims  int
	}{
		{name: "string_8_dims", input: `"hello world"`, dims: 8},
		{name: "strings_3_dims", input: `["a","b"]`, dims: 3},
		{name: "token_arrays_64_dims", input: `[[1,2],[3]]`, dims: 64},
	}
	srv := newTestServer(t, fastOptions())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fetch := func(format string) gotEmbeddings {
				resp, body := do(t, srv, http.MethodPost, "/v1/embeddings",
					`{"input":`+tt.input+`,"dimensions":`+itoa(tt.dims)+`,"encoding_format":"`+format+`"}`, nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: status %d: %s", format, resp.StatusCode, body)
				}
				var got gotEmbeddings
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatal(err)
				}
				return got
			}
			floats, encoded := fetch("float"), fetch("base64")
			if len(floats.Data) != len(encoded.Data) || len(floats.Data) == 0 {
				t.Fatalf("%d float vectors, %d base64 vectors", len(floats.Data), len(encoded.Data))
			}
			for i := range floats.Data {
				var want []float32
				if err := json.Unmarshal(floats.Data[i].Embedding, &want); err != nil {
					t.Fatal(err)
				}
				var s string
				if err := json.Unmarshal(encoded.Data[i].Embedding, &s); err != nil {
					t.Fatalf("base64 embedding is not a string: %s", encoded.Data[i].Embedding)
				}
				raw, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					t.Fatal(err)
				}
				if len(raw) != 4*tt.dims {
					t.Fatalf("decoded %d bytes, want %d", len(raw), 4*tt.dims)
				}
				got := make([]float32, tt.dims)
				for j := range got {
					got[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
				}
				if !equalFloats(got, want) {
					t.Errorf("data[%d]: base64 decodes to %v, float format gave %v", i, got, want)
				}
			}
		})
	}
}

// TestEmbeddingWords: sample-words embeds a bag of words in 256
// dimensions: one question reworded in case and punctuation is the same
// vector, one with a word more is near (cosine above 0.8; sqrt(5/6) for
// orthogonal words), another
// question is far.
func TestEmbeddingWords(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, fastOptions())
	vec := func(text string) []float32 {
		_, body := do(t, srv, http.MethodPost, "/v1/embeddings", `{"model":"sample-words","input":"`+text+`"}`, nil)
		var got gotEmbeddings
		if err := json.Unmarshal(body, &got); err != nil || len(got.Data) != 1 {
			t.Fatalf("%s: %v", body, err)
		}
		var v []float32
		if err := json.Unmarshal(got.Data[0].Embedding, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	cos := func(a, b []float32) float64 {
		var s float64
		for i := range a {
			s += float64(a[i]) * float64(b[i])
		}
		return s
	}
	q := vec("What are your opening hours?")
	if len(q) != 256 {
		t.Fatalf("%d dimensions, want 256", len(q))
	}
	if c := cos(q, vec("what are your OPENING hours")); c < 0.9999 {
		t.Errorf("same words: cosine %v, want 1", c)
	}
	if c := cos(q, vec("What are your opening hours today?")); c < 0.8 || c > 0.99 {
		t.Errorf("one word more: cosine %v, want in [0.8, 0.99]", c)
	}
	if c := cos(q, vec("Do you ship to Norway?")); c > 0.5 {
		t.Errorf("another question: cosine %v, want < 0.5", c)
	}
}
