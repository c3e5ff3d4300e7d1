// Package gateway is Flexway's composition root: it turns a loaded
// configuration into a running gateway. [New] builds every part (the
// backends behind their circuit breakers, the specialised-model proxy, the
// budget ledger and the audit log, metrics and tracing, the interceptor
// chain, the gRPC server and the HTTP front over the in-process channel)
// and [Gateway.Serve] serves them on listeners the caller opened, until
// its context is done.
//
// It lives beside the binary, not under server/: it is the one package
// that composes server/, interceptors/ and transcoder/, and nothing under
// server/ may import the other two. cmd/flexway keeps the flags, signals
// and subcommands; tests and benchmarks build a gateway here with their
// own listeners.
//
// The wiring chooses nothing of its own: each rule it applies (which
// backend is external for routing, what a relay is sent, the defaults of a
// key left out) is the owning package's, documented there, or is written
// on the function that applies it here.
package gateway
