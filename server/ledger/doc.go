// Package ledger is Flexway's budget ledger: per-tenant, per-agent and
// per-policy caps on tokens per minute, requests per minute, tokens per
// day, tokens per month and euros per month, enforced by reserving an
// estimate before a model call and committing the actual usage after it
// (or releasing the reservation when the call never reached an upstream).
//
// Money is integer nano-euros (1e-9 €) everywhere; tokens are integer
// counts. Nothing is accumulated in floating point.
//
// A [Ledger] applies a [Policy] (caps, soft fraction, time zone of the
// periods) over a [Store]. Two stores exist: [OpenEmbedded], a bbolt file
// owned by one process, and [OpenRedis], a Redis server shared by replicas
// (one atomic Lua script per reserve, commit and release). A reservation is
// a lease ([LeaseTTL], 30 s) that its ledger renews while the call runs; one
// not committed, released or renewed before its lease ends expires, so a
// crashed process strands no budget for longer than the lease.
//
// Every account has three buckets per period — tokens of the day, tokens of
// the month, nano-euros of the month — for the tenant and, for an agent's
// call, for the agent as well. Usage is committed to all of them whether or
// not a cap is set; limits are checked only where a cap is set.
//
// The per-minute caps (tokens_per_minute, requests_per_minute) are sliding
// windows of 61 one-second slots rather than GCRA: a window holds exact
// amounts, so that a reservation can be held and reconciled with the
// actual usage at commit like any other cap, in the same all-or-nothing
// operation, which a GCRA's single timestamp cannot undo. A call counts in
// the slot of the second it was reserved in until that second + 61 s, so
// no 60-second span ever holds more than the cap; its hold counts while it
// runs; a released call counts nothing. Windows are tracked only where a
// cap is set, and are not durable in the embedded store (a restart forgets
// the last minute).
//
// A policy's caps ([Policy.Policies], named by [Account.Policies]) are
// further scopes, counted per tenant, per agent or per policy; every cap
// of every scope must hold.
//
// The package depends on nothing else in Flexway.
package ledger
