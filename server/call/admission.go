package call

import "context"

// Admission is the result of the budget's check of a caller made before
// its request body is read (the HTTP front refuses a caller at a hard cap
// without reading the body): the ledger account checked and whether it
// was past a soft mark. The budget interceptor, finding it in
// [State.Admitted] for the account it charges, does not read the ledger a
// second time.
type Admission struct {
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
func WithAdmission(ctx context.Context, a Admission) context.Context {
	return context.WithValue(ctx, admissionKey{}, &a)
}

// AdmissionFrom returns the admission ctx carries, nil when it carries
// none.
func AdmissionFrom(ctx context.Context) *Admission {
	a, _ := ctx.Value(admissionKey{}).(*Admission)
	return a
}
