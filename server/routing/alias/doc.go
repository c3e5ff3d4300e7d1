// Package alias resolves a requested model that names an ai.aliases entry
// into its route: the ordered {backend, model} targets that serve the call,
// the first serving and the rest its failover.
//
// It is a package of its own, beside server/routing rather than inside it,
// for two reasons: it reads a *config.Config (compiling the aliases once at
// load, prices and expected latencies included) where server/routing takes
// a table built by the gateway and imports no configuration; and the
// classifier strategy makes the one bounded network call of routing
// ([Classify]), which server/routing, pure and without network, must not
// hold. Everything but [Classify] and [Score] is pure and allocation-free
// on the call's path.
//
// Resolution is deterministic but for canary, whose weighted draw reads the
// [Subject]'s random source; ab hashes the alias name and a sticky subject
// with FNV-1a 64 and MurmurHash3's finalizer, so every replica and every restart assigns a subject the
// same arm.
package alias
