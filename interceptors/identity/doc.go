// Package identity is the first interceptor of Flexway's chain: it turns
// the caller's API key (gRPC metadata "authorization: Bearer <key>", which
// the HTTP front fills from the Authorization header) into a tenant and an
// agent, and starts the call's [call.State].
//
// A trusted relay (another Flexway, identity.relays) authenticates with its
// own key and passes the caller's identity under its declared
// identity_headers; identity headers from anyone else are ignored.
//
// Errors: UNAUTHENTICATED with ErrorInfo reason invalid_api_key when the key
// is missing or unknown, or when a relay passes no tenant.
package identity
