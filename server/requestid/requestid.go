// Package requestid is the one rule for a call's request id: which id a
// caller may choose (its x-request-id header or gRPC metadata) and the id
// Flexway makes when the caller sent none it may use. The HTTP front and
// the identity interceptor both go through it, so a call keeps one id from
// the access log to the audit line.
package requestid

import (
	"crypto/rand"
	"encoding/hex"
)

// Header is the HTTP header and gRPC metadata key of the request id
// (lower case, as gRPC metadata keys are; HTTP headers compare it
// case-insensitively).
const Header = "x-request-id"

// MaxBytes bounds a caller's request id.
const MaxBytes = 128

// Valid reports whether a caller's request id may be used: 1 to [MaxBytes]
// bytes, each printable ASCII other than space (0x21 to 0x7e), so that it
// is safe in a header, a log line and an audit line as it is.
func Valid(id string) bool {
	if id == "" || len(id) > MaxBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// New returns a new random request id: "req_" and 24 hex digits (96 bits).
func New() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// OrNew returns id when it is [Valid], else [New].
func OrNew(id string) string {
	if Valid(id) {
		return id
	}
	return New()
}
