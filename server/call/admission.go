package call

import "context"

// Admission is the result of the budget's check of a caller made before
// its request body is read (the HTTP front refuses a caller at a hard cap
// without reading the body): the ledger account checked and whether it
// was past a soft mark, and the caller it was made for. The identity
// interceptor, finding it on the context, takes its Caller as the call's
// identity instead of looking the API key up a second time; the budget
// interceptor, finding it in [State.Admitted] for the account it charges,
// does not read the ledger a second time.
type Admission struct {
	// Caller is who the check was made for: the identity the HTTP front
	// resolved (interceptors/identity's Identify) from the very metadata
	// of the call it then makes, the bearer key and the relay identity
	// headers alike, so that it is the identity the interceptor would
	// resolve. A Caller without a KeyName names nobody: the interceptor
	// then looks the key up itself.
	Caller Identity
	// Tenant and Agent name the ledger account checked (Agent is empty
	// for a tenant's own account).
	Tenant, Agent string
	// Soft is set when the account was at or past the soft mark of a cap.
	Soft bool
}

type admissionKey struct{}

// WithAdmission returns ctx carrying a, for the identity interceptor to
// record in the [State] it creates ([AdmissionFrom]). A caller sets it on
// the context of the call it makes; it reaches the chain through the
// in-process channel, never over the network.
//
// Security: the identity interceptor trusts a.Caller without looking the
// key up, which is sound because a context value exists only in this
// process. A remote gRPC caller cannot set one (its call's context is the
// gRPC server's, carrying metadata only); only code in the gateway can,
// and the HTTP front does so only with the identity it resolved from the
// metadata it passes along. Keep it a context value: never fill an
// Admission from metadata, headers or anything else a caller sends.
func WithAdmission(ctx context.Context, a Admission) context.Context {
	return context.WithValue(ctx, admissionKey{}, &a)
}

// AdmissionFrom returns the admission ctx carries, nil when it carries
// none.
func AdmissionFrom(ctx context.Context) *Admission {
	a, _ := ctx.Value(admissionKey{}).(*Admission)
	return a
}
