package openaiwire_test

import (
	"encoding/json"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/openaiwire"
)

func TestCacheTokens(t *testing.T) {
	for _, tc := range []struct {
		name        string
		prompt      int64
		extra       map[string]string
		read, write int64
	}{
		{"OpenAI's details", 2006, map[string]string{"prompt_tokens_details": `{"cached_tokens":1920,"audio_tokens":0}`}, 1920, 0},
		{"Anthropic's both tiers", 1000, map[string]string{"prompt_tokens_details": `{"cached_tokens":300}`, "cache_creation_input_tokens": `100`}, 300, 100},
		{"whitespace and members around", 50, map[string]string{"prompt_tokens_details": " {\n \"audio_tokens\": {\"x\":[1,2]}, \"cached_tokens\" : 7 }\t"}, 7, 0},
		{"an escaped key is still the key", 50, map[string]string{"prompt_tokens_details": `{"cached\u005ftokens":8}`}, 8, 0},
		{"the last of a repeated member wins", 50, map[string]string{"prompt_tokens_details": `{"cached_tokens":1,"cached_tokens":9}`}, 9, 0},
		{"integral number with exponent", 500, map[string]string{"prompt_tokens_details": `{"cached_tokens":1e2}`}, 100, 0},
		{"no extra fields", 50, nil, 0, 0},
		{"no cached_tokens", 50, map[string]string{"prompt_tokens_details": `{"audio_tokens":3}`}, 0, 0},
		{"null details", 50, map[string]string{"prompt_tokens_details": `null`}, 0, 0},
		{"null cached_tokens", 50, map[string]string{"prompt_tokens_details": `{"cached_tokens":null}`}, 0, 0},
		{"a string", 50, map[string]string{"prompt_tokens_details": `{"cached_tokens":"7"}`}, 0, 0},
		{"a fraction", 50, map[string]string{"prompt_tokens_details": `{"cached_tokens":7.5}`}, 0, 0},
		{"negative", 50, map[string]string{"prompt_tokens_details": `{"cached_tokens":-7}`, "cache_creation_input_tokens": `-3`}, 0, 0},
		{"out of int64", 50, map[string]string{"prompt_tokens_details": `{"cached_tokens":99999999999999999999}`}, 0, 0},
		{"truncated object", 50, map[string]string{"prompt_tokens_details": `{"cached_tokens":7`}, 0, 0},
		{"trailing garbage", 50, map[string]string{"prompt_tokens_details": `{"cached_tokens":7}x`, "cache_creation_input_tokens": `3 4`}, 0, 0},
		{"not an object", 50, map[string]string{"prompt_tokens_details": `[7]`, "cache_creation_input_tokens": `{"n":3}`}, 0, 0},
		{"empty", 50, map[string]string{"prompt_tokens_details": ``, "cache_creation_input_tokens": ``}, 0, 0},
		{"read clamped to prompt_tokens", 10, map[string]string{"prompt_tokens_details": `{"cached_tokens":25}`, "cache_creation_input_tokens": `5`}, 10, 0},
		{"write clamped to what read left", 10, map[string]string{"prompt_tokens_details": `{"cached_tokens":6}`, "cache_creation_input_tokens": `9`}, 6, 4},
		{"no prompt tokens, no tiers", 0, map[string]string{"prompt_tokens_details": `{"cached_tokens":6}`}, 0, 0},
	} {
		u := &flexwayv1.Usage{PromptTokens: tc.prompt, ExtraFields: tc.extra}
		if r, w := openaiwire.CacheTokens(u); r != tc.read || w != tc.write {
			t.Errorf("%s: CacheTokens = %d, %d; want %d, %d", tc.name, r, w, tc.read, tc.write)
		}
		e := &flexwayv1.EmbeddingUsage{PromptTokens: tc.prompt, ExtraFields: tc.extra}
		if r, w := openaiwire.CacheTokens(e); r != tc.read || w != tc.write {
			t.Errorf("%s (embeddings): CacheTokens = %d, %d; want %d, %d", tc.name, r, w, tc.read, tc.write)
		}
	}
	if r, w := openaiwire.CacheTokens((*flexwayv1.Usage)(nil)); r != 0 || w != 0 {
		t.Errorf("nil usage: %d, %d", r, w)
	}
}

// FuzzCacheTokens: no input panics, and the tiers stay within
// [0, prompt_tokens] together.
func FuzzCacheTokens(f *testing.F) {
	f.Add(int64(100), `{"cached_tokens":30}`, `20`)
	f.Add(int64(5), `{"cached_tokens":[{"a":"\u00e9"}]}`, `-1`)
	f.Fuzz(func(t *testing.T, prompt int64, details, creation string) {
		r, w := openaiwire.CacheTokens(&flexwayv1.Usage{PromptTokens: prompt, ExtraFields: map[string]string{
			"prompt_tokens_details": details, "cache_creation_input_tokens": creation,
		}})
		if r < 0 || w < 0 || (prompt >= 0 && r+w > prompt) || (prompt < 0 && r+w != 0) {
			t.Fatalf("prompt %d: tiers %d, %d", prompt, r, w)
		}
	})
}

var benchUsage = &flexwayv1.Usage{PromptTokens: 2006, CompletionTokens: 300, ExtraFields: map[string]string{
	"prompt_tokens_details":       `{"cached_tokens":1920,"audio_tokens":0}`,
	"cache_creation_input_tokens": `40`,
}}

// BenchmarkCacheTokens is the reader the core runs on every served call.
func BenchmarkCacheTokens(b *testing.B) {
	b.ReportAllocs()
	var sink int64
	for range b.N {
		r, w := openaiwire.CacheTokens(benchUsage)
		sink += r + w
	}
	if sink == 0 {
		b.Fatal("read nothing")
	}
}

// BenchmarkCacheTokensEncodingJSON is the same read with encoding/json,
// the alternative the hand scan was measured against.
func BenchmarkCacheTokensEncodingJSON(b *testing.B) {
	b.ReportAllocs()
	var sink int64
	for range b.N {
		var d struct {
			CachedTokens int64 `json:"cached_tokens"`
		}
		var w int64
		_ = json.Unmarshal([]byte(benchUsage.ExtraFields["prompt_tokens_details"]), &d)
		_ = json.Unmarshal([]byte(benchUsage.ExtraFields["cache_creation_input_tokens"]), &w)
		sink += d.CachedTokens + w
	}
	if sink == 0 {
		b.Fatal("read nothing")
	}
}
