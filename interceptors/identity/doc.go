// Package identity is the first interceptor of Flexway's chain: it turns
// the caller's API key (gRPC metadata "authorization: Bearer <key>", which
// the HTTP front fills from the Authorization header) into a tenant and an
// agent, and starts the call's [call.State].
//
// A trusted relay (another Flexway, identity.relays) authenticates with its
// own key and passes the caller's identity under its declared
// identity_headers; identity headers from anyone else are ignored.
//
// The key is looked up once per call: a call whose context carries the
// HTTP front's admission ([call.WithAdmission], an in-process context
// value no remote caller can set) takes the caller the front resolved,
// with [Identify], from the same metadata; every other call is identified
// here.
//
// The state's Listener is http for a call the HTTP front marked
// ([call.WithListener], an in-process context value as well) and grpc for
// every other, for ai.policies' match.listener.
//
// Errors: UNAUTHENTICATED with ErrorInfo reason invalid_api_key when the key
// is missing or unknown, or when a relay passes no tenant.
package identity
