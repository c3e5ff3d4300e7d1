package metering

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/flexway/flexway/server/faults"
)

// outputLengthKeys are, in lower case, the request fields other than
// OpenAI's max_tokens and max_completion_tokens that OpenAI-compatible
// servers read as the most tokens to generate. A carried field whose name
// equals one of them case-insensitively (servers decoding with Go's
// encoding/json match names so) counts toward the reservation and is sent
// on unchanged.
var outputLengthKeys = map[string]bool{
	"n_predict":            true, // llama.cpp server (read before max_tokens)
	"num_predict":          true, // Ollama (top level, and in options)
	"max_new_tokens":       true, // Hugging Face TGI (and in parameters), SGLang (in sampling_params)
	"max_output_tokens":    true, // OpenAI Responses API, LiteLLM, Gemini (in generation_config)
	"maxoutputtokens":      true, // Gemini's generationConfig.maxOutputTokens
	"maxtokens":            true, // Amazon Bedrock's inferenceConfig.maxTokens
	"max_gen_len":          true, // Meta Llama API, Bedrock Llama
	"max_tokens_to_sample": true, // Anthropic's text completions
	"max_length":           true, // Hugging Face generate (prompt included: an upper bound of output)
}

// outputLengthContainers are, in lower case, the carried objects in which
// servers read generation options; inside them OpenAI's own names count
// too (vLLM and TGI accept max_tokens there).
var outputLengthContainers = map[string]bool{
	"options":           true, // Ollama
	"parameters":        true, // TGI
	"sampling_params":   true, // SGLang
	"generation_config": true, // Gemini (snake case)
	"generationconfig":  true, // Gemini
	"inferenceconfig":   true, // Bedrock
}

// OutputLengthFields returns the largest value among a request's carried
// output-length fields (see outputLengthKeys and outputLengthContainers;
// names matched case-insensitively, JSON null being absent), and 0 when
// there is none. A present value that is not a non-negative integer is
// refused: the error is faults.InvalidRequest naming the field as Param
// (`n_predict`, `options.num_predict`). A negative value is refused
// rather than reserved as the default because llama.cpp and Ollama read
// -1 as "no limit" and -2 as "until the context is full": no reservation
// can bound that. The largest valid value is returned with the error.
func OutputLengthFields(extra map[string]string) (int64, *faults.Error) {
	var most int64
	var first *faults.Error
	check := func(name, raw string) {
		v, ferr := outputLength(name, raw)
		if ferr != nil {
			if first == nil || ferr.Param < first.Param {
				first = ferr // the same field every time, whatever the map order
			}
			return
		}
		most = max(most, v)
	}
	for k, raw := range extra {
		key := strings.ToLower(k)
		switch {
		case outputLengthKeys[key]:
			check(k, raw)
		case outputLengthContainers[key]:
			var inner map[string]json.RawMessage
			if json.Unmarshal([]byte(raw), &inner) != nil {
				continue // not an object: nothing a server reads as options
			}
			for ik, v := range inner {
				ikey := strings.ToLower(ik)
				if outputLengthKeys[ikey] || ikey == "max_tokens" || ikey == "max_completion_tokens" {
					check(k+"."+ik, string(v))
				}
			}
		}
	}
	return most, first
}

// outputLength reads one output-length field's raw JSON value: 0 for
// null, the integer, or an error naming the field.
func outputLength(name, raw string) (int64, *faults.Error) {
	b := bytes.TrimSpace([]byte(raw))
	if string(b) == "null" {
		return 0, nil
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || v < 0 {
		fe := faults.New(faults.InvalidRequest,
			"%s must be a non-negative integer: it bounds the output, and the call's budget reservation is counted from it (a negative value means no limit to some servers)", name)
		fe.Param = name
		return 0, fe
	}
	return v, nil
}
