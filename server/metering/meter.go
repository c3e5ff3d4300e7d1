package metering

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/money"
	"github.com/flexway/flexway/server/policy"
	"github.com/flexway/flexway/server/routing"
)

// Config is what a [Meter] needs.
type Config struct {
	// Ledger holds the caps and the usage; nil plans every call and meters
	// none (a gateway built without a budget ledger, as flexway validate
	// builds it).
	Ledger *ledger.Ledger
	// Routes plans each call (with the caller's soft state). Required.
	Routes *routing.Table
	// Prices are each backend's prices, by backend name; a backend absent
	// here costs nothing. A served call is charged [ledger.Price.Charge]
	// (its cache tiers at CacheRead and CacheWrite, plus PerCall); its
	// reservation is [ledger.Price.Bound] at the plan's first backend.
	Prices map[string]ledger.Price
	// Check, when set, says whether a backend can express a chat request
	// (the backends.Checker of the anthropic, gemini and a2a kinds): nil
	// when it can, else a *faults.Error of reason invalid_request naming
	// the field. A planned backend that cannot is dropped from the plan
	// before anything is reserved; when none is left the call is refused
	// with the first backend's error. Nil: every backend can express every
	// request.
	Check func(backend string, req *flexwayv1.CreateChatCompletionRequest) error
	// ResolveAlias, when set, resolves the alias the call's requested
	// model names (ai.aliases) into its route, nil when it names none; it
	// may call an alias's classifier, bounded by its timeout. The route is
	// the call's default route ([routing.Request.Alias]).
	ResolveAlias func(ctx context.Context, st *call.State, req any) *routing.AliasRoute
	// Cache, when set, is the response cache's lookup (stage 6 of the AI
	// pipeline), run by [Meter.Reserve] once the call is planned (st.Plan,
	// st.Alias and the arm set: a lookup's partition holds them) and
	// before it reserves: hit reports a stored answer for the call, which
	// the lookup records in st for the service to replay; price is what
	// the hit is charged, in nano-euros (the policy's hit_price). A hit
	// reserves and commits price and 0 tokens, so that it counts toward
	// requests_per_minute and no token cap; a miss, or a lookup that
	// failed, is hit false and the call is reserved as any other.
	//
	// afford reserves the call's estimate as a miss would: a lookup calls
	// it before it spends anything of the caller's (semantic mode's
	// embeddings call), so that a call its budget refuses costs nothing;
	// its error, the refusal, is returned as err and the call refused. A
	// hit after afford commits price on that reservation (the rest goes
	// back).
	Cache func(ctx context.Context, st *call.State, req any, afford func() error) (price int64, hit bool, err error)
	// ReserveOutputTokens is reserved for output, per choice, when a
	// request sets neither max_completion_tokens nor max_tokens
	// (ai.budget.reserve_output_tokens).
	ReserveOutputTokens int64
	// ReserveTokensPerImage is reserved per image part
	// (ai.vision.reserve_tokens_per_image).
	ReserveTokensPerImage int64
	// MaxOutputTokens, when positive, is sent upstream as max_tokens and
	// reserved, per choice, for a chat request that sets neither
	// max_completion_tokens nor max_tokens (ai.budget.max_output_tokens).
	MaxOutputTokens int64
	// BackendOutputTokens is, by backend name, the max_tokens a backend
	// sends upstream itself for a chat request that sets no output limit
	// (kind anthropic's max_output_tokens, which the Messages API
	// requires), in tokens: such a request reserves, per choice, the
	// largest of these over its plan, since the upstream may use it all.
	BackendOutputTokens map[string]int64
	// PromptOverheadTokens is each backend's per-call chat-template
	// overhead, in tokens, by backend name
	// (ai.backends.NAME.prompt_overhead_tokens); a backend absent here has
	// [DefaultPromptOverheadTokens].
	PromptOverheadTokens map[string]int64
	// Known, when set, says whether a tenant (agent "") or an agent
	// exists. A call for an unknown tenant (a relay may pass any name) is
	// refused with faults.UnknownTenant: no budget can be charged to it. A
	// call for an unknown agent of a known tenant is charged to the
	// tenant alone (account {tenant, ""}): the tenant's caps hold, and the
	// agent has none of its own, as a declared agent without a budget; the
	// call state keeps the agent's name. Nil: every name is charged as it
	// is.
	Known func(tenant, agent string) bool
	// Proxied, when set, gives the metering of a proxied specialised-model
	// method by its full name ("/acme.ocr.v1.OcrService/Recognize"), false
	// for any other method.
	Proxied func(fullMethod string) (Proxied, bool)
	// FrameSize gives the size in bytes of a proxied call's message (a raw
	// frame), for per-byte metering.
	FrameSize func(msg any) (int, bool)
	// Policies, when set, are the compiled ai.policies: [Meter.Admit]
	// holds a caller, before its body is read, to the budgets of the
	// policies that select it whatever the model ([policy.Table.PreBody]).
	// The budgets of a chat, embeddings or proxied call are those of
	// [call.State].Policies, resolved by the governance interceptor. Nil:
	// the pre-body check holds the tenant's and agent's own caps only.
	Policies *policy.Table
	// Tracer records the ledger's spans (check and reserve, commit or
	// release); nil records none.
	Tracer trace.Tracer
	// Logger receives a line when a served call could not be committed
	// (amounts and ids, never content); nil discards.
	Logger *slog.Logger
}

// Meter is the metering policy; build it with [New]. It is safe for
// concurrent use.
type Meter struct {
	cfg Config
	log *slog.Logger
}

// New returns the meter for cfg.
func New(cfg Config) *Meter {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	return &Meter{cfg: cfg, log: log}
}

// Admit is the check made before a request body is read, for a call of
// operation (ai.chatCompletions, ai.embeddings) on the HTTP front: it
// refuses a caller already at a hard cap (faults.BudgetExceeded with
// Retry-After; faults.RateLimited with Retry-After and the x-ratelimit-*
// headers for a per-minute cap) or of an unknown tenant, and fails when the
// ledger is unavailable (faults.Unavailable). The caps are the tenant's,
// the agent's and those of the policies that select the call whatever its
// model ([Config.Policies]); a policy matched on model is held at
// [Meter.Reserve]. It reserves nothing. caller is who the call is
// from, resolved from the metadata of the call the returned context is
// for. That context carries the caller and its ledger state
// ([call.WithAdmission]): the identity interceptor takes the caller from
// it instead of looking the key up again, and the call's
// [call.State].Admitted then holds it, so that [Meter.Reserve] does not
// read the ledger a second time. Without a ledger it admits every caller
// and returns ctx as it is.
func (m *Meter) Admit(ctx context.Context, caller call.Identity, operation string) (context.Context, error) {
	if m.cfg.Ledger == nil {
		return ctx, nil
	}
	acct, err := m.account(caller.Tenant, caller.Agent)
	if err != nil {
		return ctx, err
	}
	if t := m.cfg.Policies; t != nil && !t.Empty() {
		acct.Policies = t.PreBody(policy.Key{Listener: config.ListenerHTTP, Operation: operation, Tenant: caller.Tenant, Agent: caller.Agent}).BudgetNames()
	}
	s, err := m.cfg.Ledger.Check(ctx, acct)
	if err := refusal(s, err); err != nil {
		return ctx, err
	}
	return call.WithAdmission(ctx, call.Admission{Caller: caller, Tenant: acct.Tenant, Agent: acct.Agent, Soft: s.Soft}), nil
}

// budgetNames is the names of the policies of st whose budgets hold its
// call ([ledger.Account.Policies]); nil when none.
func budgetNames(st *call.State) []string {
	if len(st.Policies.Policies) == 0 {
		return nil
	}
	return st.Policies.BudgetNames()
}

// account is the ledger account a call of tenant and agent is charged to;
// see [Config.Known].
func (m *Meter) account(tenant, agent string) (ledger.Account, error) {
	k := m.cfg.Known
	switch {
	case k == nil:
	case !k(tenant, ""):
		return ledger.Account{}, faults.New(faults.UnknownTenant, "tenant %.64q is not declared here: no budget can be charged to it", tenant)
	case agent != "" && !k(tenant, agent):
		agent = ""
	}
	return ledger.Account{Tenant: tenant, Agent: agent}, nil
}

// Metered reports whether req is a message the meter plans and meters: a
// chat or embeddings request.
func Metered(req any) bool {
	switch req.(type) {
	case *flexwayv1.CreateChatCompletionRequest, *flexwayv1.CreateEmbeddingRequest:
		return true
	}
	return false
}

// Reservation is a chat or embeddings call's hold on its budget, from
// [Meter.Reserve] to [Reservation.Settle]; the zero Reservation holds
// nothing. It is a value, so that holding it costs the call no allocation.
type Reservation struct {
	m   *Meter
	st  *call.State
	res *ledger.Reservation
	est Estimate
	// hit: a cache hit, charged hitPrice nano-euros and no token
	hit      bool
	hitPrice int64
}

// Reserve readies the call of st, whose decoded request is req, before the
// service runs: it checks the caller's caps (unless st.Admitted holds that
// check for the same account), plans the call into st.Plan (st.Soft set
// when the caller is past a soft mark), estimates it for that plan and
// reserves the estimate priced at the planned backend; st.OutputLimit
// gets the request's own output limit. A chat request is prepared first: a
// carried output-length field that is no non-negative integer is refused
// (faults.InvalidRequest naming it), and one that sets neither
// max_completion_tokens nor max_tokens gets MaxOutputTokens as max_tokens,
// when configured. The planned backends that cannot express a chat
// request ([Config.Check]) leave the plan; the reservation is priced at the
// first one left ([ledger.Price.Bound]: input at the dearest of its input
// tiers, plus its per-call price).
//
// The caps are the tenant's, the agent's and those of st.Policies' budgets
// ([policy.Set.BudgetNames]).
//
// With [Config.Cache], a planned call the cache answers is reserved its
// hit price and no token instead of its estimate (st.OutputLimit stays
// unset: nothing goes upstream).
//
// Errors: faults.UnknownTenant, faults.InvalidRequest (also the first
// planned backend's, when none can express the request), faults.BudgetExceeded
// (with Retry-After when waiting helps), faults.RateLimited (a per-minute
// cap: Retry-After when waiting helps, and the x-ratelimit-* headers in
// [faults.Error].Headers), faults.Unavailable (the ledger),
// and the routing table's planning errors. For a message it does not
// meter ([Metered]) it does nothing, and without a ledger it only plans:
// both return the zero reservation, whose Settle does nothing.
func (m *Meter) Reserve(ctx context.Context, st *call.State, req any) (r Reservation, err error) {
	if !Metered(req) {
		return Reservation{}, nil
	}
	st.NoteRequest(req)
	if m.cfg.Ledger == nil {
		if err := m.plan(ctx, st, req, false); err != nil {
			return Reservation{}, err
		}
		if m.cfg.Cache != nil {
			// nothing to charge without a ledger
			if _, _, err := m.cfg.Cache(ctx, st, req, func() error { return nil }); err != nil {
				return Reservation{}, err
			}
		}
		return Reservation{}, nil
	}
	ctx, span := m.cfg.Tracer.Start(ctx, "flexway.budget.reserve")
	defer func() { endSpan(span, err) }()
	acct, err := m.account(st.Tenant, st.Agent)
	if err != nil {
		return Reservation{}, err
	}
	acct.Policies = budgetNames(st)
	if err := m.prepare(req); err != nil {
		return Reservation{}, err
	}
	var soft bool
	if a := st.Admitted; a != nil && a.Tenant == acct.Tenant && a.Agent == acct.Agent {
		soft = a.Soft
	} else {
		s, err := m.cfg.Ledger.Check(ctx, acct)
		if err := refusal(s, err); err != nil {
			return Reservation{}, err
		}
		soft = s.Soft
	}
	if err := m.plan(ctx, st, req, soft); err != nil {
		return Reservation{}, err
	}
	var est Estimate
	reserve := func() (*ledger.Reservation, error) {
		est, _ = m.EstimateFor(req, st.Plan)
		st.OutputLimit = est.OutputLimit
		price := m.cfg.Prices[st.Plan[0]]
		res, err := m.cfg.Ledger.Reserve(ctx, acct, ledger.Amount{
			Tokens:  money.AddSat(est.Input, est.Output),
			NanoEUR: price.Bound(est.Input, est.Output),
		})
		if err != nil {
			return nil, refusal(ledger.State{}, err)
		}
		return res, nil
	}
	if m.cfg.Cache != nil {
		var held *ledger.Reservation
		afford := func() error {
			if held != nil {
				return nil
			}
			res, err := reserve()
			held = res
			return err
		}
		price, hit, err := m.cfg.Cache(ctx, st, req, afford)
		if err != nil {
			if held != nil {
				m.release(ctx, st, held)
			}
			return Reservation{}, err
		}
		if hit {
			price = max(price, 0)
			if held == nil {
				if held, err = m.cfg.Ledger.Reserve(ctx, acct, ledger.Amount{NanoEUR: price}); err != nil {
					return Reservation{}, refusal(ledger.State{}, err)
				}
			}
			st.OutputLimit = 0 // nothing goes upstream
			return Reservation{m: m, st: st, res: held, hit: true, hitPrice: price}, nil
		}
		if held != nil {
			return Reservation{m: m, st: st, res: held, est: est}, nil
		}
	}
	res, err := reserve()
	if err != nil {
		return Reservation{}, err
	}
	return Reservation{m: m, st: st, res: res, est: est}, nil
}

// Rate is the state of the call's per-minute caps after its own
// reservation, for the x-ratelimit-* headers ([RateHeaders]):
// [ledger.NoRate] for the zero reservation, or when no per-minute cap holds
// the call.
func (r Reservation) Rate() ledger.RateState {
	if r.res == nil {
		return ledger.NoRate
	}
	return r.res.Rate()
}

// plan plans the call of st, whose capability is recorded and whose
// request is req, into st.Plan and st.Soft, without the backends that
// cannot express a chat request ([Config.Check]); when none can, the
// error is the first one's and st.Plan is left unset.
//
// The call's policies (st.Policies) filter the plan last
// (governance.backends, stage 7): every backend an enforced rule refuses
// leaves it; when none is left the call is refused with
// faults.BackendNotAllowed naming the refusing policy. A shadow rule that
// would leave none of the final plan is recorded in st.WouldDeny (unless
// a would-be refusal already is) and refuses nothing.
func (m *Meter) plan(ctx context.Context, st *call.State, req any, soft bool) error {
	r := routing.Request{Tenant: st.Tenant, Agent: st.Agent, Capability: st.Capability, Sensitive: st.Sensitive, Soft: soft}
	if enforcesBackends(st.Policies) {
		r.Allow = &st.Policies // a pointer into the state: no allocation
	}
	if m.cfg.ResolveAlias != nil {
		r.Alias = m.cfg.ResolveAlias(ctx, st, req)
	}
	plan, err := m.cfg.Routes.Plan(r)
	var none *routing.NoBackendAllowedError
	if errors.As(err, &none) {
		name := ""
		if d := st.Policies.BackendDenial(none.Plan); d != nil {
			name = d.Policy
		}
		return faults.New(faults.BackendNotAllowed, "no backend that can serve this call is allowed for this caller by policy %.64q", name)
	}
	if err != nil {
		return err
	}
	if len(plan.Models) > 0 {
		st.Alias = r.Alias.Name
		st.AliasTargets = make(map[string]call.AliasTarget, len(plan.Models))
		for i, b := range plan.Backends {
			st.AliasTargets[b] = call.AliasTarget{Model: plan.Models[i], Arm: plan.Arms[i]}
		}
	}
	backends := plan.Backends
	if chat, ok := req.(*flexwayv1.CreateChatCompletionRequest); ok && m.cfg.Check != nil {
		if backends, err = m.expressible(backends, chat); err != nil {
			return err
		}
	}
	st.Plan, st.Soft = backends, soft
	if len(st.Policies.Policies) > 0 && st.WouldDeny == nil {
		st.WouldDeny = st.Policies.ShadowBackends(backends)
	}
	return nil
}

// enforcesBackends reports whether an enforced policy of s has a backend
// rule: only then does routing filter the plan.
func enforcesBackends(s policy.Set) bool {
	for _, p := range s.Policies {
		if !p.Shadow && p.HasBackendRule() {
			return true
		}
	}
	return false
}

// expressible returns the backends of plan that can express req, in
// order: plan itself when all can (no allocation), else a new slice; when
// none can, the first backend's error, as a *faults.Error (an error of
// another type is wrapped as invalid_request).
func (m *Meter) expressible(plan []string, req *flexwayv1.CreateChatCompletionRequest) ([]string, error) {
	var kept []string
	var first error
	for i, b := range plan {
		err := m.cfg.Check(b, req)
		switch {
		case err == nil && kept != nil:
			kept = append(kept, b)
		case err != nil && first == nil:
			first = err
			kept = append(make([]string, 0, len(plan)-1), plan[:i]...)
		}
	}
	switch {
	case first == nil:
		return plan, nil
	case len(kept) == 0:
		var fe *faults.Error
		if !errors.As(first, &fe) {
			fe = faults.Wrap(faults.InvalidRequest, first, first.Error())
		}
		return nil, fe
	}
	return kept, nil
}

// prepare readies a chat request for its reservation; see [Meter.Reserve].
func (m *Meter) prepare(req any) error {
	r, ok := req.(*flexwayv1.CreateChatCompletionRequest)
	if !ok {
		return nil
	}
	if _, ferr := OutputLengthFields(r.GetExtraFields()); ferr != nil {
		return ferr
	}
	if m.cfg.MaxOutputTokens > 0 && r.MaxTokens == nil && r.MaxCompletionTokens == nil {
		v := m.cfg.MaxOutputTokens
		r.MaxTokens = &v
	}
	return nil
}

// Settle ends the reservation once the service has returned: it commits
// what the call used, at the price of the backend that served
// ([ledger.Price.Charge]: cache tiers at their prices, plus the per-call
// price), or releases the reservation when nothing was served (no
// per-call price either). The call's outcome is
// updated with the charged cost, and with the charged usage when it was
// estimated (an answer served without reported usage), so that the audit
// line reads what was charged. A failed commit or release is logged, never
// returned: the call has been answered. Settle on the zero reservation
// does nothing.
func (r Reservation) Settle(ctx context.Context) {
	if r.m == nil {
		return
	}
	m, st, est := r.m, r.st, r.est
	ctx, span := m.cfg.Tracer.Start(ctx, "flexway.budget.settle")
	defer span.End()
	o := st.Outcome()
	if !o.Served {
		m.release(ctx, st, r.res)
		return
	}
	if r.hit {
		// a cache hit: its price, no token (the answer's usage is the
		// filling call's, which the service records as saved)
		o.CostNanoEUR = r.hitPrice
		st.SetOutcome(o)
		m.commit(ctx, st, r.res, o.Backend, ledger.Amount{NanoEUR: r.hitPrice}, true)
		return
	}
	if !o.UsageReported {
		// A charge, not a bound: about the truth for English, and at
		// least one token per content event relayed.
		o.InputTokens = est.InputCharge
		o.OutputTokens = max(TokensForBytes(o.OutputBytes), o.OutputEvents)
		o.CacheReadTokens, o.CacheWriteTokens = 0, 0 // no tier is assumed
		o.UsageEstimated = true
	}
	price := m.cfg.Prices[o.Backend]
	actual := ledger.Amount{
		// Token caps count every input token, cached ones included.
		Tokens:  money.AddSat(o.InputTokens, o.OutputTokens),
		NanoEUR: price.Charge(o.InputTokens, o.CacheReadTokens, o.CacheWriteTokens, o.OutputTokens),
	}
	o.CostNanoEUR = actual.NanoEUR
	o.UsageOverReservation = o.UsageReported && actual.Tokens > money.AddSat(est.Input, est.Output)
	st.SetOutcome(o) // the audit line reads what was charged
	m.commit(ctx, st, r.res, o.Backend, actual, true)
}

// release returns res, logging a failure (the reservation then expires at
// its deadline).
func (m *Meter) release(ctx context.Context, st *call.State, res *ledger.Reservation) {
	if err := m.cfg.Ledger.Release(ctx, res); err != nil {
		m.log.WarnContext(ctx, "budget reservation not released; it expires at its deadline",
			"request_id", st.RequestID, "tenant", st.Tenant, "agent", st.Agent, "error", err.Error())
	}
}

// commit commits amt on res for the call of st served by backend,
// logging a failure; the log line counts tokens only for a call metered in
// tokens (a proxied call is charged in euros alone).
func (m *Meter) commit(ctx context.Context, st *call.State, res *ledger.Reservation, backend string, amt ledger.Amount, inTokens bool) {
	err := m.cfg.Ledger.Commit(ctx, res, amt)
	if err == nil {
		return
	}
	msg := "served call not committed to the budget ledger"
	if errors.Is(err, ledger.ErrNotDurable) {
		msg = "served call counted in memory only: the budget ledger cannot write to disk; metered calls are refused until it can"
	}
	attrs := []any{"request_id", st.RequestID, "tenant", st.Tenant, "agent", st.Agent, "backend", backend}
	if inTokens {
		attrs = append(attrs, "tokens", amt.Tokens)
	}
	attrs = append(attrs, "nano_eur", amt.NanoEUR, "error", err.Error())
	m.log.ErrorContext(ctx, msg, attrs...)
}

// refusal turns a ledger state or error into the call's error: nil when
// the call may go on.
func refusal(s ledger.State, err error) error {
	var ex *ledger.ExceededError
	switch {
	case err == nil && s.Exceeded == nil:
		return nil
	case errors.As(err, &ex):
	case err != nil:
		fe := faults.Wrap(faults.Unavailable, err, "the budget ledger is unavailable: metered calls are refused until an operator restores it")
		fe.RetryAfterSeconds = ledgerRetrySeconds
		return fe
	default:
		ex = s.Exceeded
	}
	// The x-ratelimit-* headers go with every refusal while a per-minute
	// cap holds the account, a longer cap's included.
	fe := &faults.Error{Reason: faults.BudgetExceeded, Message: ex.Error(), Headers: RateHeaders(ex.Rate)}
	if ex.PerMinute() {
		fe.Reason = faults.RateLimited
	}
	if ex.Requested <= ex.Limit {
		// A call bigger than the whole cap never fits: waiting for the
		// rollover (or for the window to slide) would not help, so no
		// Retry-After.
		fe.RetryAfterSeconds = retryAfterSeconds(ex.RetryAfter)
	}
	return fe
}

// The response headers of a metered call's answer while a per-minute cap
// is in force (OpenAI's names): the limit of the tightest tokens_per_minute
// and requests_per_minute cap of its account, and what is left of it in
// the current 60-second window after the call's own reservation (see
// [ledger.RateState]). A kind with no cap in force has neither of its two
// headers.
const (
	// HeaderLimitTokens is the tokens_per_minute cap, in tokens.
	HeaderLimitTokens = "x-ratelimit-limit-tokens"
	// HeaderRemainingTokens is what is left of it, in tokens.
	HeaderRemainingTokens = "x-ratelimit-remaining-tokens"
	// HeaderLimitRequests is the requests_per_minute cap, in requests.
	HeaderLimitRequests = "x-ratelimit-limit-requests"
	// HeaderRemainingRequests is what is left of it, in requests.
	HeaderRemainingRequests = "x-ratelimit-remaining-requests"
)

// RateHeaders returns the x-ratelimit-* headers of rs by name
// ([HeaderLimitTokens]...): nil when no per-minute cap is in force. A
// remaining value below 0 is written as 0.
func RateHeaders(rs ledger.RateState) map[string]string {
	if rs.TokensLimit < 0 && rs.RequestsLimit < 0 {
		return nil
	}
	h := make(map[string]string, 4)
	if rs.TokensLimit >= 0 {
		h[HeaderLimitTokens] = strconv.FormatInt(rs.TokensLimit, 10)
		h[HeaderRemainingTokens] = strconv.FormatInt(max(rs.TokensRemaining, 0), 10)
	}
	if rs.RequestsLimit >= 0 {
		h[HeaderLimitRequests] = strconv.FormatInt(rs.RequestsLimit, 10)
		h[HeaderRemainingRequests] = strconv.FormatInt(max(rs.RequestsRemaining, 0), 10)
	}
	return h
}

// ledgerRetrySeconds is the Retry-After of a call refused because the
// ledger is unavailable.
const ledgerRetrySeconds = 5

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		return 1
	}
	return s
}

// endSpan ends span with err's reason, if any.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, string(faults.As(err).Reason))
	}
	span.End()
}
