package gemini

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
)

// randRead fills b with random bytes; tests replace it.
var randRead = func(b []byte) { _, _ = rand.Read(b) }

// ToolCallID returns a new tool call id, "call_" + 16 random base64url
// characters (96 bits: unique across turns and replicas without state),
// followed by "." + signature when Gemini attached a thoughtSignature (a
// base64 string, https://ai.google.dev/gemini-api/docs/thought-signatures)
// to the function call, so that the client echoing the tool call back
// carries the signature to the next turn.
func ToolCallID(signature string) string {
	var b [12]byte
	randRead(b[:])
	var id [len("call_") + 16]byte
	copy(id[:], "call_")
	base64.RawURLEncoding.Encode(id[len("call_"):], b[:])
	if signature == "" {
		return string(id[:])
	}
	return string(id[:]) + "." + signature
}

// SplitToolCallID returns the parts of an id [ToolCallID] made: the call's
// own id and the thoughtSignature it carries ("" when none). An id of
// another shape is returned whole, with no signature.
func SplitToolCallID(id string) (base, signature string) {
	if !strings.HasPrefix(id, "call_") {
		return id, ""
	}
	base, signature, _ = strings.Cut(id, ".")
	return base, signature
}
