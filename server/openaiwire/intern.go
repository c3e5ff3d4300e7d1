package openaiwire

// The usual short values and member names of the OpenAI format are
// returned as constants, so that parsing them does not allocate.

// internOrCopy returns the common short values of the OpenAI format
// without allocating, and a copy of b otherwise.
func internOrCopy(b []byte) string {
	if len(b) > 21 {
		return string(b)
	}
	switch string(b) {
	case "":
		return ""
	case "user":
		return "user"
	case "assistant":
		return "assistant"
	case "system":
		return "system"
	case "developer":
		return "developer"
	case "tool":
		return "tool"
	case "text":
		return "text"
	case "image_url":
		return "image_url"
	case "refusal":
		return "refusal"
	case "auto":
		return "auto"
	case "low":
		return "low"
	case "high":
		return "high"
	case "stop":
		return "stop"
	case "length":
		return "length"
	case "tool_calls":
		return "tool_calls"
	case "content_filter":
		return "content_filter"
	case "chat.completion":
		return "chat.completion"
	case "chat.completion.chunk":
		return "chat.completion.chunk"
	case "list":
		return "list"
	case "embedding":
		return "embedding"
	case "float":
		return "float"
	case "base64":
		return "base64"
	}
	return string(b)
}

// internKey returns the usual extra field names of the OpenAI format
// without allocating, and a copy of key otherwise.
func internKey(key []byte) string {
	switch string(key) {
	case "system_fingerprint":
		return "system_fingerprint"
	case "service_tier":
		return "service_tier"
	case "logprobs":
		return "logprobs"
	case "obfuscation":
		return "obfuscation"
	case "tool_calls":
		return "tool_calls"
	case "tool_call_id":
		return "tool_call_id"
	case "refusal":
		return "refusal"
	case "annotations":
		return "annotations"
	case "audio":
		return "audio"
	case "reasoning_content":
		return "reasoning_content"
	case "prompt_tokens_details":
		return "prompt_tokens_details"
	case "completion_tokens_details":
		return "completion_tokens_details"
	case "temperature":
		return "temperature"
	case "top_p":
		return "top_p"
	case "tools":
		return "tools"
	case "tool_choice":
		return "tool_choice"
	case "parallel_tool_calls":
		return "parallel_tool_calls"
	case "response_format":
		return "response_format"
	case "seed":
		return "seed"
	case "stop":
		return "stop"
	case "top_logprobs":
		return "top_logprobs"
	case "presence_penalty":
		return "presence_penalty"
	case "frequency_penalty":
		return "frequency_penalty"
	case "logit_bias":
		return "logit_bias"
	case "metadata":
		return "metadata"
	case "store":
		return "store"
	case "reasoning_effort":
		return "reasoning_effort"
	case "cache_control":
		return "cache_control"
	}
	return string(key)
}
