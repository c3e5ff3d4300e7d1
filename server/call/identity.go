package call

// Identity is who a call is from, as its API key resolves (for a trusted
// relay's key, with the identity headers the relay passed): what
// interceptors/identity's Identify returns and records in the call's
// [State].
type Identity struct {
	// KeyName is the name of the API key or relay key used (never the
	// key).
	KeyName string
	// Relay is the relay's key name when a trusted relay called, else "".
	Relay string
	// Tenant and Agent are the caller's; Agent may be empty.
	Tenant, Agent string
	// Sensitive is set when a relay passed its sensitivity header.
	Sensitive bool
}
