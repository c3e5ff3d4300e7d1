package main

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode"
)

const (
	// defaultDimensions is the vector size when "dimensions" is not given.
	defaultDimensions = 8
	// maxDimensions bounds "dimensions".
	maxDimensions = 4096
	// maxInputs bounds the number of inputs of one request, as OpenAI does.
	maxInputs = 2048
)

// embeddingsRequest is the part of an OpenAI embeddings request the sample
// reads.
type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     *int            `json:"dimensions"`
	EncodingFormat string          `json:"encoding_format"`
}

// embeddingInput is one input to embed: the bytes hashed and its token
// estimate.
type embeddingInput struct {
	data   []byte
	tokens int
}

// embeddingList is OpenAI's embeddings response.
type embeddingList struct {
	Object string            `json:"object"`
	Data   []embeddingObject `json:"data"`
	Model  string            `json:"model"`
	Usage  embeddingUsage    `json:"usage"`
}

// embeddingObject is one vector of an [embeddingList]. Embedding is a
// []float32, or a base64 string of little-endian float32 values.
type embeddingObject struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

// embeddingUsage is OpenAI's token usage of an embeddings request.
type embeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// embeddings serves POST /v1/embeddings.
func (h *handler) embeddings(w http.ResponseWriter, r *http.Request) {
	var req embeddingsRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if !modelHooks(w, r, req.Model) {
		return
	}
	inputs, err := parseInputs(req.Input)
	if errors.Is(err, errMissingInput) {
		writeError(w, http.StatusBadRequest, "Missing required parameter: 'input'.", "input", "missing_required_parameter")
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid 'input': %v.", err), "input", "invalid_value")
		return
	}
	dims := defaultDimensions
	words := req.Model == wordsModel
	if words {
		dims = wordsDimensions
	}
	if req.Dimensions != nil {
		dims = *req.Dimensions
	}
	if dims < 1 || dims > maxDimensions {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid 'dimensions': expected a value from 1 to %d, but got %d instead.", maxDimensions, dims), "dimensions", "invalid_value")
		return
	}
	base64Format := false
	switch req.EncodingFormat {
	case "", "float":
	case "base64":
		base64Format = true
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid 'encoding_format': expected 'float' or 'base64', but got '%s' instead.", req.EncodingFormat), "encoding_format", "invalid_value")
		return
	}

	resp := embeddingList{Object: "list", Model: h.resolveModel(req.Model), Data: make([]embeddingObject, 0, len(inputs))}
	for i, in := range inputs {
		vec := embed(in.data, dims)
		if words {
			vec = embedWords(in.data, dims)
		}
		var e any = vec
		if base64Format {
			e = encodeFloat32s(vec)
		}
		resp.Data = append(resp.Data, embeddingObject{Object: "embedding", Index: i, Embedding: e})
		resp.Usage.PromptTokens += in.tokens
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	writeJSON(w, http.StatusOK, resp)
}

// errMissingInput reports an absent or null "input".
var errMissingInput = errors.New("missing input")

// parseInputs accepts the four shapes of OpenAI's "input": a string, an
// array of strings, an array of token ids, or an array of token-id arrays.
func parseInputs(raw json.RawMessage) ([]embeddingInput, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errMissingInput
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return []embeddingInput{textInput(s)}, nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, errors.New("want a string, an array of strings, an array of token ids or an array of token arrays")
	}
	if len(elems) == 0 {
		return nil, errors.New("empty array")
	}
	switch first := bytes.TrimSpace(elems[0]); {
	case len(first) > 0 && first[0] == '"':
		var ss []string
		if err := json.Unmarshal(raw, &ss); err != nil {
			return nil, errors.New("an array of strings must hold only strings")
		}
		if len(ss) > maxInputs {
			return nil, fmt.Errorf("at most %d inputs per request", maxInputs)
		}
		out := make([]embeddingInput, 0, len(ss))
		for _, s := range ss {
			out = append(out, textInput(s))
		}
		return out, nil
	case len(first) > 0 && first[0] == '[':
		var arrays [][]int64
		if err := json.Unmarshal(raw, &arrays); err != nil {
			return nil, errors.New("an array of token arrays must hold only arrays of integers")
		}
		if len(arrays) > maxInputs {
			return nil, fmt.Errorf("at most %d inputs per request", maxInputs)
		}
		out := make([]embeddingInput, 0, len(arrays))
		for _, ids := range arrays {
			out = append(out, tokenInput(ids))
		}
		return out, nil
	default:
		var ids []int64
		if err := json.Unmarshal(raw, &ids); err != nil {
			return nil, errors.New("an array of token ids must hold only integers")
		}
		return []embeddingInput{tokenInput(ids)}, nil
	}
}

// textInput hashes a string input as its bytes and counts its words.
func textInput(s string) embeddingInput {
	return embeddingInput{data: []byte(s), tokens: countWords(s)}
}

// tokenInput hashes token ids as their decimal forms joined by spaces and
// counts one token per id.
func tokenInput(ids []int64) embeddingInput {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return embeddingInput{data: []byte(strings.Join(parts, " ")), tokens: len(ids)}
}

// embed returns the deterministic unit vector of data: component j is the
// FNV-1a 64-bit hash of data followed by j as 4 little-endian bytes, mapped
// to [-1, 1), and the whole vector is scaled to length 1.
func embed(data []byte, dims int) []float32 {
	v := make([]float64, dims)
	var norm float64
	var idx [4]byte
	for j := range v {
		h := fnv.New64a()
		_, _ = h.Write(data)
		binary.LittleEndian.PutUint32(idx[:], uint32(j))
		_, _ = h.Write(idx[:])
		v[j] = float64(h.Sum64()>>11)/(1<<53)*2 - 1
		norm += v[j] * v[j]
	}
	norm = math.Sqrt(norm)
	if norm == 0 {
		norm = 1
	}
	out := make([]float32, dims)
	for j := range v {
		out[j] = float32(v[j] / norm)
	}
	return out
}

// wordsModel is the sample's bag-of-words embedding model: texts that
// share most of their words get vectors at a high cosine similarity, so
// that the response cache's semantic mode can be tried under make run. It
// is a sample, not a language model: synonyms are as far apart as any
// two words.
const wordsModel = "sample-words"

// wordsDimensions is sample-words' vector size when "dimensions" is not
// given: enough that two unrelated words rarely collide.
const wordsDimensions = 256

// embedWords returns the unit vector of data's bag of words: the sum of
// [embed] of each word (letters and digits, lower-cased), scaled to
// length 1; the zero-word text gets [embed] of its bytes.
func embedWords(data []byte, dims int) []float32 {
	fields := strings.FieldsFunc(strings.ToLower(string(data)), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	if len(fields) == 0 {
		return embed(data, dims)
	}
	sum := make([]float64, dims)
	for _, w := range fields {
		for j, f := range embed([]byte(w), dims) {
			sum[j] += float64(f)
		}
	}
	var norm float64
	for _, f := range sum {
		norm += f * f
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dims)
	for j := range sum {
		out[j] = float32(sum[j] / norm)
	}
	return out
}

// encodeFloat32s returns the standard base64 of vec's little-endian float32
// values, OpenAI's encoding_format "base64".
func encodeFloat32s(vec []float32) string {
	b := make([]byte, 0, 4*len(vec))
	for _, f := range vec {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}
