// Package sensitivity is the interceptor that flags a call sensitive: when
// the caller sends the sensitivity header (ai.sensitive_header, "true" or
// "1"), or its tenant or agent is declared sensitive: true. A flag only
// ever narrows: nothing unflags a call that identity, the header or the
// configuration made sensitive. Route planning then keeps a sensitive call
// on internal backends (server/routing).
//
// It runs after identity, which creates the call's state; a call without
// state passes unchanged (health, reflection).
package sensitivity
