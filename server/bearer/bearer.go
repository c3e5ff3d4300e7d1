// Package bearer reads the credential of an Authorization header value of
// the Bearer scheme, the one rule for every place Flexway takes a key: API
// keys on /v1/* and gRPC, the admin key on the admin API and the console.
package bearer

import "strings"

// Token returns the token of the Authorization value v when v is
// "Bearer <token>": the scheme in any case (RFC 6750 §2.1, RFC 9110
// §11.1), a space, then the token with surrounding whitespace trimmed. For
// any other value, an empty one or one whose token is empty included, ok
// is false.
//
// The token may hold any bytes a header value can, not only RFC 6750's
// b64token characters: keys are chosen by operators (server.admin_key,
// identity.api_keys) and compared by SHA-256, and a key that worked must
// keep working. Only a token's surrounding whitespace is not part of it.
func Token(v string) (token string, ok bool) {
	scheme, rest, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(rest)
	return token, token != ""
}
