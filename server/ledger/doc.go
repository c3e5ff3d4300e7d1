// Package ledger is Flexway's budget ledger: per-tenant and per-agent caps
// on tokens per day, tokens per month and euros per month, enforced by
// reserving an estimate before a model call and committing the actual usage
// after it (or releasing the reservation when the call never reached an
// upstream).
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
// The package depends on nothing else in Flexway.
package ledger
