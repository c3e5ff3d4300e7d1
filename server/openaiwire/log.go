package openaiwire

import (
	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// AppendMessages appends msgs to dst as a JSON array of OpenAI message
// objects, as [AppendChatCompletionRequest] writes a request's messages,
// and returns the extended slice. It never fails: an extra_fields value
// that is not one valid JSON value is written as null, as in a response,
// so that the array is always valid JSON (for the prompt log).
func AppendMessages(dst []byte, msgs []*flexwayv1.ChatMessage) []byte {
	dst = append(dst, '[')
	for i, m := range msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendMessage(dst, m)
	}
	return append(dst, ']')
}

// AppendMessage appends m to dst as one OpenAI message object (role,
// content, name, then its extra fields sorted by key; a value that is not
// valid JSON is written as null) and returns the extended slice.
func AppendMessage(dst []byte, m *flexwayv1.ChatMessage) []byte {
	out, _ := appendMessage(dst, m, false) // lenient: never an error
	return out
}

// AppendEmbeddingInputs appends an embeddings request's input to dst as a
// JSON array of inputs, and returns the extended slice: a string input is
// ["text"], an array of strings as it is, one token array [[1,2]], an
// array of token arrays as it is; an unset input is null.
func AppendEmbeddingInputs(dst []byte, in *flexwayv1.EmbeddingInput) []byte {
	switch in.GetInput().(type) {
	case *flexwayv1.EmbeddingInput_Text, *flexwayv1.EmbeddingInput_Tokens:
		dst = append(dst, '[')
		dst, _ = appendEmbeddingInput(dst, in)
		return append(dst, ']')
	}
	if out, ok := appendEmbeddingInput(dst, in); ok {
		return out
	}
	return append(dst, "null"...)
}
