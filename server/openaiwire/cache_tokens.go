package openaiwire

import "unsafe"

// usageFields is what [CacheTokens] reads of a usage message: both
// flexwayv1.Usage (chat) and flexwayv1.EmbeddingUsage have it.
type usageFields interface {
	GetPromptTokens() int64
	GetExtraFields() map[string]string
}

// CacheTokens returns how many of a usage's prompt_tokens the provider
// read from its prompt cache (prompt_tokens_details.cached_tokens, OpenAI's
// field, which the anthropic and gemini kinds also fill:
// https://platform.openai.com/docs/api-reference/chat/object#chat/object-usage)
// and wrote to it (cache_creation_input_tokens, Anthropic's field, which
// only the anthropic kind sets:
// https://docs.anthropic.com/en/api/messages#response-usage), in tokens.
// prompt_tokens counts every input token, cached ones included, so the two
// are clamped to it: read to [0, prompt_tokens], then write to [0,
// prompt_tokens - read]. A field that is absent, null, not an integer (or
// an object without cached_tokens), or negative counts as 0. u may be nil.
// It allocates nothing unless a key is written with escapes.
func CacheTokens(u usageFields) (read, write int64) {
	prompt := u.GetPromptTokens()
	if prompt <= 0 {
		return 0, 0
	}
	extra := u.GetExtraFields()
	if len(extra) == 0 {
		return 0, 0
	}
	if raw, ok := extra["prompt_tokens_details"]; ok {
		read = min(memberInt(raw, "cached_tokens"), prompt)
	}
	if raw, ok := extra["cache_creation_input_tokens"]; ok {
		write = min(rawInt(raw), prompt-read)
	}
	return read, write
}

// memberInt returns the non-negative integer member key of the JSON object
// raw (the last one, when repeated, as encoding/json reads it); 0 when raw
// is no valid object, or the member is absent, null or no non-negative
// integer.
func memberInt(raw, key string) int64 {
	d := decoder{data: unsafe.Slice(unsafe.StringData(raw), len(raw))}
	d.ws()
	if d.openObject() != nil {
		return 0
	}
	var v int64
	for first := true; ; first = false {
		d.ws()
		k, ok, err := d.member(first)
		if err != nil {
			return 0
		}
		if !ok {
			break
		}
		if string(k) != key {
			if d.skip(1) != nil {
				return 0
			}
			continue
		}
		if v, err = d.int64(); err != nil {
			return 0
		}
	}
	if d.end() != nil {
		return 0
	}
	return max(v, 0)
}

// rawInt returns the JSON value raw as a non-negative integer; 0 when it
// is none.
func rawInt(raw string) int64 {
	d := decoder{data: unsafe.Slice(unsafe.StringData(raw), len(raw))}
	d.ws()
	v, err := d.int64()
	if err != nil || d.end() != nil {
		return 0
	}
	return max(v, 0)
}
