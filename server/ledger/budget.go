package ledger

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/flexway/flexway/server/money"
)

// Cap names one of the budget caps: [TokensPerMinute], [RequestsPerMinute],
// [TokensPerDay], [TokensPerMonth] or [EURPerMonth]. The string is the
// configuration key and the name shown in errors and in the admin API.
type Cap string

// The caps. The first cap reached decides.
const (
	// TokensPerMinute caps input+output tokens in any 60 seconds (a
	// sliding window of 1-second slots). Unit: tokens.
	TokensPerMinute Cap = "tokens_per_minute"
	// RequestsPerMinute caps the calls committed in any 60 seconds (a
	// sliding window of 1-second slots; a refused or released call is not
	// counted). Unit: requests.
	RequestsPerMinute Cap = "requests_per_minute"
	// TokensPerDay caps input+output tokens per calendar day
	// ("2026-11-30") in [Policy.Location]. Unit: tokens.
	TokensPerDay Cap = "tokens_per_day"
	// TokensPerMonth caps input+output tokens per calendar month
	// ("2026-11") in [Policy.Location]. Unit: tokens.
	TokensPerMonth Cap = "tokens_per_month"
	// EURPerMonth caps spend per calendar month ("2026-11") in
	// [Policy.Location]. Unit: nano-euros (1e-9 €).
	EURPerMonth Cap = "eur_per_month"
)

// Unit is the unit of a cap's limit and usage: [UnitTokens], [UnitNanoEUR]
// or [UnitRequests].
type Unit string

// The units of the caps.
const (
	// UnitTokens counts tokens ([TokensPerMinute], [TokensPerDay],
	// [TokensPerMonth]).
	UnitTokens Unit = "tokens"
	// UnitNanoEUR counts nano-euros, 1e-9 € ([EURPerMonth]).
	UnitNanoEUR Unit = "nano_eur"
	// UnitRequests counts calls ([RequestsPerMinute]).
	UnitRequests Unit = "requests"
)

// Unit returns the unit of the cap: [UnitNanoEUR] for [EURPerMonth],
// [UnitRequests] for [RequestsPerMinute], [UnitTokens] for the token caps
// (and for an unknown cap name).
func (c Cap) Unit() Unit {
	switch c {
	case EURPerMonth:
		return UnitNanoEUR
	case RequestsPerMinute:
		return UnitRequests
	}
	return UnitTokens
}

// Limits are one account's caps. A nil field is no cap. Values are tokens
// (TokensPerMinute, TokensPerDay, TokensPerMonth), calls
// (RequestsPerMinute) and nano-euros (NanoEURPerMonth); a
// negative value is treated as 0 (every metered call refused) — the
// configuration loader is expected to refuse negative caps before that.
//
// The per-minute caps are sliding windows of 61 one-second slots: what a
// call used is counted in the slot of the second it was reserved in, and
// counts while now is before that second + 61 s, so that no 60-second span
// ever holds more than the cap (a hold of a call in flight counts too).
// They are kept in memory by the embedded store (a restart forgets the
// last minute; the day and month caps are durable) and in keys that
// expire two minutes after their last use by the Redis store.
type Limits struct {
	// TokensPerMinute is ai.budget's tokens_per_minute, in tokens.
	TokensPerMinute *int64
	// RequestsPerMinute is requests_per_minute, in calls.
	RequestsPerMinute *int64
	// TokensPerDay is tokens_per_day, in tokens.
	TokensPerDay *int64
	// TokensPerMonth is tokens_per_month, in tokens.
	TokensPerMonth *int64
	// NanoEURPerMonth is eur_per_month, in nano-euros.
	NanoEURPerMonth *int64
}

// Price is what a backend charges: Input, Output, CacheRead and
// CacheWrite in nano-euros per million tokens (0.50 € per million input
// tokens is Input = 500_000_000), PerCall in nano-euros per call served.
// CacheRead and CacheWrite price the input tokens the provider read from
// or wrote to its prompt cache (ai.backends.NAME.price.cache_read and
// cache_write; the gateway sets them to Input when the configuration does
// not); Input prices the other input tokens.
type Price struct {
	Input, Output         int64
	CacheRead, CacheWrite int64
	PerCall               int64
}

// perMillion is the denominator of parts per million (the soft threshold).
const perMillion = 1_000_000

// Cost returns the price in nano-euros of a call that used in input and
// out output tokens: (in*Input + out*Output) / 1e6, rounded up to the next
// nano-euro for the call as a whole, saturating at math.MaxInt64
// ([money.TokenCost]). Negative token counts and negative prices count as 0.
func (p Price) Cost(in, out int64) int64 { return money.TokenCost(in, p.Input, out, p.Output) }

// Charge returns the price in nano-euros of a call served with in input
// tokens (every one, cached included), cacheRead and cacheWrite of them
// read from and written to the provider's cache, and out output tokens:
// the uncached input (in - cacheRead - cacheWrite) at Input, the tiers at
// CacheRead and CacheWrite, out at Output, rounded up once
// ([money.TieredTokenCost]), plus PerCall, saturating at math.MaxInt64.
// The tiers are clamped to [0, in] (reads first), so that a tier larger
// than the input is never charged twice. Negative counts and prices count
// as 0.
func (p Price) Charge(in, cacheRead, cacheWrite, out int64) int64 {
	in = max(in, 0)
	cacheRead = min(max(cacheRead, 0), in)
	cacheWrite = min(max(cacheWrite, 0), in-cacheRead)
	tokens := money.TieredTokenCost(
		[4]int64{in - cacheRead - cacheWrite, cacheRead, cacheWrite, out},
		[4]int64{p.Input, p.CacheRead, p.CacheWrite, p.Output})
	return money.AddSat(tokens, max(p.PerCall, 0))
}

// Bound returns an upper bound in nano-euros of [Price.Charge] for a call
// of at most in input and out output tokens, whatever tier its input falls
// in: the input at the highest of Input, CacheRead and CacheWrite, plus
// PerCall; for a reservation.
func (p Price) Bound(in, out int64) int64 {
	return money.AddSat(money.TokenCost(in, max(p.Input, p.CacheRead, p.CacheWrite), out, p.Output), max(p.PerCall, 0))
}

// Amount is a quantity charged to the caps: Tokens (input+output tokens)
// against the token caps and NanoEUR (nano-euros) against the euro cap.
// Negative fields count as 0.
type Amount struct {
	Tokens, NanoEUR int64
	// Continued marks a further reservation of a call already admitted (a
	// per-byte proxied stream's, each time it outgrows what it holds): it
	// holds nothing on requests_per_minute, which counts calls, not
	// reservations. Ignored by Commit.
	Continued bool
}

// Account is who a call is charged to: a tenant, or an agent of a tenant.
// Agent "" is the tenant itself. An agent's call is held to its own caps
// and to its tenant's caps.
type Account struct {
	Tenant, Agent string
	// Policies names the policies ([Policy.Policies]) whose caps hold the
	// call besides the tenant's and agent's own, in any order; a name the
	// ledger does not know is ignored. Nil for none.
	Policies []string
}

// String renders the account as in messages: `tenant "acme"` or
// `agent "bot" of tenant "acme"`.
func (a Account) String() string {
	if a.Agent == "" {
		return "tenant " + strconv.Quote(a.Tenant)
	}
	return "agent " + strconv.Quote(a.Agent) + " of tenant " + strconv.Quote(a.Tenant)
}

// Policy is the set of caps a [Ledger] enforces.
type Policy struct {
	// Default applies to every tenant unless overridden in Tenants.
	Default Limits
	// Tenants overrides Default per tenant name, cap by cap.
	Tenants map[string]TenantPolicy
	// Soft is the fraction of each cap, in (0,1], at or past which an
	// account is in the soft state (Flexway-Budget: soft). It is used with a
	// precision of 1e-6. 0 (unset), a negative value, a value above 1 or NaN
	// mean 1: soft only at the cap itself.
	Soft float64
	// Location is where days and months roll over; nil means UTC.
	Location *time.Location
	// Policies are the caps of ai.policies[].budget, by policy name: a
	// call whose [Account.Policies] names one is held to them too.
	Policies map[string]PolicyLimits
}

// PolicyLimits are one policy's caps and whose buckets count them.
type PolicyLimits struct {
	// Limits are the caps; a nil field is no cap.
	Limits Limits
	// Per says whose buckets count the caps: [PerTenant] (the default,
	// ""), [PerAgent] or [PerPolicy].
	Per Per
}

// Per is whose buckets count a policy's caps.
type Per string

// The owners of a policy's buckets.
const (
	// PerTenant counts a policy's caps per tenant.
	PerTenant Per = "tenant"
	// PerAgent counts them per agent of a tenant (the tenant's own calls
	// share one bucket of the tenant's).
	PerAgent Per = "agent"
	// PerPolicy counts every call the policy matches in one bucket.
	PerPolicy Per = "policy"
)

// TenantPolicy is one tenant's override.
type TenantPolicy struct {
	// Limits overrides Default cap by cap: a nil field inherits Default's.
	Limits Limits
	// Agents are agents' own caps, enforced in addition to the tenant's.
	// They do not inherit Default: a nil field is no cap of the agent's own.
	Agents map[string]Limits
}

// Options tune a [Ledger].
type Options struct {
	// Now is the clock; nil means time.Now. Periods and reservation
	// deadlines are computed from it (and passed to the store, so a Redis
	// store expires reservations by this clock, not by the server's).
	Now func() time.Time
	// ReservationTTL is the lease of a reservation: how long it holds
	// budget unless committed, released or renewed; the ledger renews the
	// leases of the reservations it holds every third of it, so only a
	// holder that died (or cannot reach the store) lets one expire, and its
	// amount is then available again. 0 or negative means [LeaseTTL] (30 s).
	ReservationTTL time.Duration
}

// ErrUnavailable is wrapped by every error caused by the store being
// unreachable or unusable: Redis down or failing, a Redis ledger without its
// marker (see [ErrNoMarker]), an embedded file locked by another process,
// unreadable or closed. Callers should refuse metered calls (503) rather than
// serve them unmetered. Messages never contain a Redis password.
var ErrUnavailable = errors.New("budget ledger unavailable")

// ErrNotDurable is wrapped (together with [ErrUnavailable]) by
// [Ledger.Commit] when the embedded ledger counted the usage in memory but
// could not write it to disk (a full or unwritable disk). The process keeps
// it and writes it at the next checkpoint that can write; a crash before
// then loses it. The reservation is settled: retrying the Commit changes
// nothing. Until the ledger can write again, new metered calls are refused.
var ErrNotDurable = errors.New("usage counted in memory, not yet written to disk")

// ErrNoMarker is wrapped (together with [ErrUnavailable]) when a Redis
// ledger has no marker key: the Redis is new and was never initialised with
// [InitRedis], or it lost its data. Metered calls must be refused until the
// operator runs `flexway ledger init` (new ledger) or restores the data.
var ErrNoMarker = errors.New("the Redis ledger has no marker — it is new or lost its data; run `flexway ledger init` for a new one, or restore its data; metered calls are refused until then")

// ErrRolledBack is wrapped (together with [ErrUnavailable]) once a Redis
// ledger was found to hold fewer commits than a replica had seen: its
// commit sequence went back (Redis restarted from an RDB snapshot or an
// AOF that missed its last writes, a failover promoted a replica that
// lagged, or a backup was restored). The budget it holds is then too low,
// so every replica refuses metered calls until an operator checks it and
// runs `flexway ledger accept-rollback` ([AcceptRedisRollback]).
var ErrRolledBack = errors.New("the Redis ledger went back in time: it lost commits that replicas had seen (a restart from an older RDB snapshot or an AOF without its last writes, a failover to a replica that lagged, or a restored backup); metered calls are refused until an operator checks it and runs `flexway ledger accept-rollback`")

// ExceededError reports a hard cap: the account's usage (committed plus
// reserved) reached its limit ([Ledger.Check]) or would pass it with the
// amount asked for ([Ledger.Reserve]). Its message is safe to show the
// caller.
type ExceededError struct {
	// Account is the account of the call.
	Account Account
	// Scope is "tenant" when the tenant's cap refused, "agent" when the
	// agent's own cap did, "policy" when a policy's cap did (see Policy
	// and Per).
	Scope string
	// Cap is the cap that refused.
	Cap Cap
	// Period is the cap's current period: "2026-11-30" for a day cap,
	// "2026-11" for a month cap, in [Policy.Location]; "" for a
	// per-minute cap (a sliding window has no period).
	Period string
	// Limit is the cap in its unit ([Cap.Unit]: tokens or nano-euros).
	Limit int64
	// Used is committed+reserved usage of that cap's bucket at the time of
	// the refusal, in the same unit, not counting the refused amount.
	Used int64
	// Requested is the amount the refused reservation asked of that cap,
	// in its unit; 0 when the cap was found already reached ([Ledger.Check]).
	Requested int64
	// RetryAfter is the time from the ledger's Now to the rollover of the
	// cap's period: the next midnight, or the first of the next month, in
	// [Policy.Location]; when ByReservations, the time until enough of the
	// reservations' leases end (at most the lease, [LeaseTTL]). For a
	// per-minute cap it is the time until enough of the window's slots age
	// out, or reservations' leases end, for the call to fit (Reserve) or
	// for the cap not to be reached (Check), in whole seconds, at least 1s;
	// 0 when the call alone is bigger than the cap (it never fits).
	RetryAfter time.Duration
	// ByReservations is true when the refusal is caused by reservations
	// (calls in flight): the cap would fit the call (Reserve) or would not
	// be reached (Check) if nothing were reserved. It lasts until those
	// calls commit or release, or their leases end; retrying after
	// RetryAfter may succeed.
	ByReservations bool
	// Reserved is, when ByReservations, the part of Used held by
	// reservations, in the cap's unit.
	Reserved int64
	// Policy is, when Scope is "policy", the name of the policy whose cap
	// refused.
	Policy string
	// Per is, when Scope is "policy", whose bucket of that policy refused:
	// [PerTenant] (Account's tenant), [PerAgent] (Account's agent; its
	// tenant's when Account has no agent) or [PerPolicy] (every call of
	// the policy). "" for the other scopes.
	Per Per
	// Rate is the state of the account's per-minute caps at the refusal,
	// for the x-ratelimit-* headers of the 429.
	Rate RateState
}

// PerMinute reports whether the cap that refused is a per-minute one
// ([TokensPerMinute], [RequestsPerMinute]): a 429 rate_limited, where the
// longer caps are budget_exceeded.
func (e *ExceededError) PerMinute() bool {
	return e.Cap == TokensPerMinute || e.Cap == RequestsPerMinute
}

// RateState is, for OpenAI's x-ratelimit-* response headers, the
// tightest per-minute caps in force for a call's account (its tenant's,
// its agent's and its policies'): for tokens_per_minute and for
// requests_per_minute, the limit of the cap with the least left and what
// is left of it in the current 60-second window after the call's own
// reservation (never below 0). A limit of -1 means no cap of that kind is
// in force (no header).
type RateState struct {
	// TokensLimit and TokensRemaining are in tokens.
	TokensLimit, TokensRemaining int64
	// RequestsLimit and RequestsRemaining are in requests.
	RequestsLimit, RequestsRemaining int64
}

// NoRate is the RateState of an account with no per-minute cap.
var NoRate = RateState{TokensLimit: -1, RequestsLimit: -1}

// Error returns e.g. `tenant "acme" reached its tokens_per_day cap
// (100 tokens) for 2026-11-30; it resets in 3h12m`, or, when the cap is not
// reached but this call's reservation does not fit in what is left,
// `tenant "acme" has 40 tokens left of its tokens_per_day cap (100 tokens)
// for 2026-11-30, less than this call may use (1100 tokens: ...); it resets
// in 3h12m`, or, when the call alone is bigger than the cap, a message
// saying so without a wait. When ByReservations, the wait is the
// reservations': `...; 60 tokens of it are held by calls in flight, whose
// reservations end or are settled within 20s`. A per-minute cap reads
// `tenant "acme" reached its tokens_per_minute cap (100 tokens) in the
// last 60 seconds; retry in 12s`. A policy's cap names the policy and the
// bucket: `policy "team-a" for tenant "acme" reached its ...`.
func (e *ExceededError) Error() string {
	who := e.who()
	u := e.Cap.Unit()
	if e.Requested > e.Limit {
		if e.Cap == RequestsPerMinute {
			return fmt.Sprintf("%s's requests_per_minute cap is %s: it admits no call", who, formatQuantity(u, e.Limit))
		}
		return fmt.Sprintf("this call may use %s (its input and output allowance), more than %s's whole %s cap (%s): lower max_tokens or send less",
			formatQuantity(u, e.Requested), who, e.Cap, formatQuantity(u, e.Limit))
	}
	period := "for " + e.Period
	if e.PerMinute() {
		period = "in the last 60 seconds"
	}
	allowance := "its input and output allowance, max_tokens or the configured default"
	if e.Cap == RequestsPerMinute {
		allowance = "a call counts one"
	}
	var wait string
	switch {
	case e.PerMinute() && e.ByReservations:
		wait = fmt.Sprintf("%s of it are held by calls in flight; retry in %s", formatQuantity(u, e.Reserved), formatSeconds(e.RetryAfter))
	case e.PerMinute():
		wait = "retry in " + formatSeconds(e.RetryAfter)
	case e.ByReservations:
		wait = fmt.Sprintf("%s of it are held by calls in flight, whose reservations end or are settled within %s", formatQuantity(u, e.Reserved), formatWait(e.RetryAfter))
	default:
		wait = "it resets in " + formatWait(e.RetryAfter)
	}
	if e.Requested > 0 && e.Used < e.Limit {
		return fmt.Sprintf("%s has %s left of its %s cap (%s) %s, less than this call may use (%s: %s); %s",
			who, formatQuantity(u, e.Limit-e.Used), e.Cap, formatQuantity(u, e.Limit), period, formatQuantity(u, e.Requested), allowance, wait)
	}
	return fmt.Sprintf("%s reached its %s cap (%s) %s; %s", who, e.Cap, formatQuantity(u, e.Limit), period, wait)
}

// who names the refusing scope's owner in messages.
func (e *ExceededError) who() string {
	tenant := "tenant " + strconv.Quote(e.Account.Tenant)
	agent := "agent " + strconv.Quote(e.Account.Agent) + " of " + tenant
	switch e.Scope {
	case "agent":
		return agent
	case "policy":
		pol := "policy " + strconv.Quote(e.Policy)
		switch {
		case e.Per == PerPolicy:
			return pol
		case e.Per == PerAgent && e.Account.Agent != "":
			return pol + " for " + agent
		}
		return pol + " for " + tenant
	}
	return tenant
}

// formatQuantity renders 100 tokens as "100 tokens", 3 calls as "3
// requests" and 50e9 nano-euros as "50.00 EUR" (exact: as many decimals as
// needed, at least two).
func formatQuantity(u Unit, v int64) string {
	switch u {
	case UnitTokens:
		return strconv.FormatInt(v, 10) + " tokens"
	case UnitRequests:
		if v == 1 {
			return "1 request"
		}
		return strconv.FormatInt(v, 10) + " requests"
	}
	return money.FormatEUR(v) + " EUR"
}

// formatSeconds renders a wait in whole seconds, rounded up: "61s".
func formatSeconds(d time.Duration) string {
	return strconv.FormatInt(int64((max(d, 0)+time.Second-1)/time.Second), 10) + "s"
}

// formatWait renders a wait rounded up: "45s", "12m", "3h12m", "17d4h5m".
func formatWait(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	if d < time.Minute {
		return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10) + "s"
	}
	m := int64((d + time.Minute - 1) / time.Minute)
	days, hours, mins := m/(24*60), m/60%24, m%60
	var b strings.Builder
	if days > 0 {
		b.WriteString(strconv.FormatInt(days, 10) + "d")
	}
	if days > 0 || hours > 0 {
		b.WriteString(strconv.FormatInt(hours, 10) + "h")
	}
	b.WriteString(strconv.FormatInt(mins, 10) + "m")
	return b.String()
}
