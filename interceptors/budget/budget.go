// Package budget is the budget interceptor: it holds every chat and
// embeddings call to its tenant's and agent's caps (DESIGN.md, "Budget
// ledger").
//
// Before the service runs it reads the caller's state in the ledger (a
// caller at a hard cap is refused with RESOURCE_EXHAUSTED, ErrorInfo reason
// budget_exceeded and retry_after_seconds; one past a soft mark gets header
// metadata "flexway-budget: soft" and is planned on ai.budget.soft_backend),
// plans the call (server/routing), and reserves its estimate priced at the
// planned backend against every cap at once. After the service returns, it
// commits the reported usage at the price of the backend that served, an
// estimate marked usage_estimated when an answer was served without usage
// (a stream cut after output began), or releases the reservation when
// nothing was served: a failing backend never drains a budget.
//
// Other messages (gRPC health, reflection, proxied frames) pass unmetered.
package budget

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/routing"
)

// HeaderBudget is the header metadata key set to "soft" on a call whose
// caller is at or past the soft mark of a cap; the HTTP front writes it as
// Flexway-Budget.
const HeaderBudget = "flexway-budget"

// Config is what the interceptor needs.
type Config struct {
	// Ledger holds the caps and the usage. Required.
	Ledger *ledger.Ledger
	// Routes plans each call (with the caller's soft state). Required.
	Routes *routing.Table
	// Prices are each backend's prices, by backend name; a backend absent
	// here costs nothing.
	Prices map[string]ledger.Price
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
	// Tracer records the ledger's spans (check and reserve, commit or
	// release); nil records none.
	Tracer trace.Tracer
	// Logger receives a line when a served call could not be committed
	// (amounts and ids, never content); nil discards.
	Logger *slog.Logger
}

// Meter is the interceptor; build it with [New].
type Meter struct {
	cfg Config
	log *slog.Logger
}

// New returns the interceptor for cfg.
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

// Estimate is what a request may cost, in tokens, before it is served:
// the reservation.
type Estimate struct {
	// Input is an upper bound of the prompt no honest tokenizer exceeds
	// (see [InputBound]): for chat, one token per UTF-8 byte of every text
	// the model reads (roles, names, content, tool definitions and every
	// other carried field's JSON), plus [MessageOverheadTokens] per message,
	// plus the planned backends' prompt_overhead_tokens, plus
	// ReserveTokensPerImage per image; for embeddings, the token ids given,
	// or one token per text byte, plus [EmbeddingInputOverheadTokens] per
	// input.
	Input int64
	// Output is the per-choice output bound times n: the largest of
	// max_completion_tokens, max_tokens and the output-length fields other
	// servers read ([OutputLengthFields]); when the request sets neither
	// max_completion_tokens nor max_tokens, ReserveOutputTokens (or
	// MaxOutputTokens, which is then sent as max_tokens) joins the
	// largest. 0 for embeddings.
	Output int64
	// InputCharge is the input charged for a call served without reported
	// usage (a stream cut after output began): an estimate of the truth,
	// not a bound — text bytes / 3, rounded up, plus 4 tokens per message
	// and 3 (English averages about 4 bytes a token). For embeddings it
	// equals Input.
	InputCharge int64
	// OutputLimit is the output, in tokens per choice, the request itself
	// bounds: the largest of max_completion_tokens, max_tokens and the
	// output-length fields; 0 when it sets none. A stream whose relayed
	// output passes it is cut (the upstream ignored it).
	OutputLimit int64
}

// Template overheads of the input bound.
const (
	// MessageOverheadTokens is reserved per chat message for the tokens a
	// chat template wraps it in: ChatML's <|im_start|>, role line end,
	// <|im_end|> and newline are 4 or 5 tokens; Llama 3's
	// <|start_header_id|>, <|end_header_id|>, "\n\n" and <|eot_id|> are 4;
	// the role itself is counted as text. 8 leaves room for templates a
	// little more verbose (Gemma, Mistral).
	MessageOverheadTokens = 8
	// DefaultPromptOverheadTokens is the per-call template overhead of a
	// backend that declares no prompt_overhead_tokens: Llama 3.1's
	// <|begin_of_text|> (1), its default system header with the knowledge
	// and today's dates (about 22) and the assistant priming (4) make 27;
	// ChatML's priming is 3.
	DefaultPromptOverheadTokens = 32
	// EmbeddingInputOverheadTokens is reserved per embeddings input for the
	// tokens an encoder adds ([CLS] and [SEP], or BOS and EOS).
	EmbeddingInputOverheadTokens = 2
)

// TokensForBytes is the charged token estimate of n bytes of text: one
// token per 3 bytes, rounded up. English averages about 4 bytes a token,
// so the estimate errs on the side of charging more; it is no bound.
func TokensForBytes(n int64) int64 { return (n + 2) / 3 }

// InputBound is the most tokens n bytes of UTF-8 text can be: every
// byte-level BPE token (GPT, Llama 3, Qwen) and every SentencePiece token
// with byte fallback (Llama 2, Mistral, Gemma) stands for at least one
// byte, so no honest tokenizer makes more tokens than bytes.
func InputBound(n int64) int64 { return n }

// Estimate returns the estimate of a chat or embeddings request planned
// on backends it knows nothing of (each one's prompt overhead is
// [DefaultPromptOverheadTokens]), and false for any other message.
func (m *Meter) Estimate(req any) (Estimate, bool) { return m.EstimateFor(req, nil) }

// EstimateFor returns the estimate of a chat or embeddings request whose
// plan is backends (the first serves, the others are its fallbacks): the
// input bound counts the largest prompt overhead among them. Output-length
// fields whose value is no non-negative integer are left out here (see
// [OutputLengthFields]). It returns false for any other message.
func (m *Meter) EstimateFor(req any, backends []string) (Estimate, bool) {
	switch r := req.(type) {
	case *flexwayv1.CreateChatCompletionRequest:
		var textBytes, images int64
		for _, msg := range r.GetMessages() {
			textBytes += int64(len(msg.GetRole()) + len(msg.GetText()) + len(msg.GetName()))
			for _, p := range msg.GetParts().GetParts() {
				if p.GetType() == "image_url" {
					images++
					continue
				}
				textBytes += int64(len(p.GetText()))
			}
			textBytes += extraBytes(msg.GetExtraFields())
		}
		// Tools, response formats and other request fields the model reads.
		textBytes += extraBytes(r.GetExtraFields())
		msgs := int64(len(r.GetMessages()))
		imageTokens := images * m.cfg.ReserveTokensPerImage
		e := Estimate{
			Input:       saturatingAdd(saturatingAdd(InputBound(textBytes)+MessageOverheadTokens*msgs, m.promptOverhead(backends)), imageTokens),
			InputCharge: saturatingAdd(TokensForBytes(textBytes)+4*msgs+3, imageTokens),
		}
		aliases, _ := OutputLengthFields(r.GetExtraFields())
		switch {
		case r.MaxCompletionTokens != nil || r.MaxTokens != nil:
			// Both go upstream, and an upstream may honour either: the
			// larger one is what the call may use.
			e.OutputLimit = max(r.GetMaxCompletionTokens(), r.GetMaxTokens(), aliases)
			e.Output = e.OutputLimit
		default:
			e.OutputLimit = aliases
			e.Output = max(m.cfg.ReserveOutputTokens, aliases)
		}
		if n := int64(r.GetN()); n > 1 {
			e.Output = saturatingMul(e.Output, n)
		}
		return e, true
	case *flexwayv1.CreateEmbeddingRequest:
		in := r.GetInput()
		var e Estimate
		switch {
		case in.GetTokens() != nil:
			e.Input = int64(len(in.GetTokens().GetValues())) + EmbeddingInputOverheadTokens
		case in.GetTokenArrays() != nil:
			for _, a := range in.GetTokenArrays().GetValues() {
				e.Input += int64(len(a.GetValues())) + EmbeddingInputOverheadTokens
			}
		case in.GetTexts() != nil:
			for _, t := range in.GetTexts().GetValues() {
				e.Input += InputBound(int64(len(t))) + EmbeddingInputOverheadTokens
			}
		default:
			e.Input = InputBound(int64(len(in.GetText()))) + EmbeddingInputOverheadTokens
		}
		e.InputCharge = e.Input
		return e, true
	}
	return Estimate{}, false
}

// promptOverhead is the largest per-call template overhead among backends
// ([Config.PromptOverheadTokens]); [DefaultPromptOverheadTokens] for none.
func (m *Meter) promptOverhead(backends []string) int64 {
	if len(backends) == 0 {
		return DefaultPromptOverheadTokens
	}
	var most int64
	for _, b := range backends {
		v, ok := m.cfg.PromptOverheadTokens[b]
		if !ok {
			v = DefaultPromptOverheadTokens
		}
		most = max(most, v)
	}
	return most
}

// extraBytes sums the JSON of the non-null fields Flexway carries without
// reading them.
func extraBytes(extra map[string]string) int64 {
	var n int64
	for _, v := range extra {
		if v != "null" {
			n += int64(len(v))
		}
	}
	return n
}

// Admit is the check made before a request body is read: it refuses a
// caller already at a hard cap (budget_exceeded with Retry-After) and
// fails when the ledger is unavailable. It reserves nothing. The returned
// context carries the caller's state, so that the interceptor, run with
// it, does not read the ledger a second time.
func (m *Meter) Admit(ctx context.Context, tenant, agent string) (context.Context, error) {
	acct, err := m.account(tenant, agent)
	if err != nil {
		return ctx, err
	}
	s, err := m.cfg.Ledger.Check(ctx, acct)
	if err := refusal(s, err); err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, checkedKey{}, checked{acct, s}), nil
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

// checked is a caller's state read by [Meter.Admit].
type checked struct {
	acct  ledger.Account
	state ledger.State
}

type checkedKey struct{}

// UnaryServerInterceptor meters unary chat and embeddings calls.
func (m *Meter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		st := call.FromContext(ctx)
		if !metered(req) || st == nil {
			return handler(ctx, req)
		}
		res, est, err := m.admit(ctx, st, req, func(md metadata.MD) { _ = grpc.SetHeader(ctx, md) })
		if err != nil {
			return nil, err
		}
		resp, err := handler(ctx, req)
		m.settle(ctx, st, res, est)
		return resp, err
	}
}

// StreamServerInterceptor meters streamed chat calls (the reservation is
// made when the service receives the request, and settled when the call
// ends) and proxied specialised-model calls (see [Config.Proxied]).
func (m *Meter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		st := call.FromContext(ss.Context())
		if st == nil {
			return handler(srv, ss)
		}
		if m.cfg.Proxied != nil {
			if p, ok := m.cfg.Proxied(info.FullMethod); ok {
				if p.Metering == "" {
					return handler(srv, ss) // authenticated, not metered
				}
				return m.meterProxied(srv, ss, st, p, handler)
			}
		}
		ms := &stream{ServerStream: ss, m: m, st: st}
		err := handler(srv, ms)
		if ms.res != nil {
			m.settle(ss.Context(), st, ms.res, ms.est)
		}
		return err
	}
}

// stream reserves when its request is received.
type stream struct {
	grpc.ServerStream
	m   *Meter
	st  *call.State
	res *ledger.Reservation
	est Estimate
}

func (s *stream) RecvMsg(msg any) error {
	if err := s.ServerStream.RecvMsg(msg); err != nil {
		return err
	}
	if !metered(msg) || s.res != nil {
		return nil
	}
	res, est, err := s.m.admit(s.Context(), s.st, msg, func(md metadata.MD) { _ = s.ServerStream.SetHeader(md) })
	if err != nil {
		return err
	}
	s.res, s.est = res, est
	return nil
}

// metered reports whether req is a chat or embeddings request.
func metered(req any) bool {
	switch req.(type) {
	case *flexwayv1.CreateChatCompletionRequest, *flexwayv1.CreateEmbeddingRequest:
		return true
	}
	return false
}

// prepare readies a chat request for its reservation: a carried
// output-length field that is no non-negative integer is refused (400
// naming it), and a request that sets neither max_completion_tokens nor
// max_tokens gets MaxOutputTokens as max_tokens, when configured.
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

// admit checks the caller's caps, plans the call into st.Plan, estimates
// it for that plan, and reserves the estimate priced at the planned
// backend. st.OutputLimit gets the request's own output limit.
func (m *Meter) admit(ctx context.Context, st *call.State, req any, setHeader func(metadata.MD)) (res *ledger.Reservation, est Estimate, err error) {
	ctx, span := m.cfg.Tracer.Start(ctx, "flexway.budget.reserve")
	defer func() { endSpan(span, err) }()
	acct, err := m.account(st.Tenant, st.Agent)
	if err != nil {
		return nil, est, err
	}
	if err := m.prepare(req); err != nil {
		return nil, est, err
	}
	c, ok := ctx.Value(checkedKey{}).(checked)
	s := c.state
	if !ok || c.acct != acct {
		var err error
		s, err = m.cfg.Ledger.Check(ctx, acct)
		if err := refusal(s, err); err != nil {
			return nil, est, err
		}
	}
	capability, _ := server.CapabilityOf(req)
	plan, err := m.cfg.Routes.Plan(routing.Request{
		Tenant: st.Tenant, Agent: st.Agent, Capability: capability, Sensitive: st.Sensitive, Soft: s.Soft,
	})
	if err != nil {
		return nil, est, err
	}
	st.Plan, st.Soft = plan.Backends, s.Soft
	est, _ = m.EstimateFor(req, plan.Backends)
	st.OutputLimit = est.OutputLimit
	if s.Soft {
		setHeader(metadata.Pairs(HeaderBudget, "soft"))
	}
	price := m.cfg.Prices[plan.Backends[0]]
	res, err = m.cfg.Ledger.Reserve(ctx, acct, ledger.Amount{
		Tokens:  saturatingAdd(est.Input, est.Output),
		NanoEUR: price.Cost(est.Input, est.Output),
	})
	if err != nil {
		return nil, est, refusal(ledger.State{}, err)
	}
	return res, est, nil
}

// settle commits what the call used, or releases the reservation when
// nothing was served. The outcome is updated with the charged usage when
// it was estimated.
func (m *Meter) settle(ctx context.Context, st *call.State, res *ledger.Reservation, est Estimate) {
	ctx, span := m.cfg.Tracer.Start(ctx, "flexway.budget.settle")
	defer span.End()
	o := st.Outcome()
	if !o.Served {
		if err := m.cfg.Ledger.Release(ctx, res); err != nil {
			m.log.WarnContext(ctx, "budget reservation not released; it expires at its deadline",
				"request_id", st.RequestID, "tenant", st.Tenant, "agent", st.Agent, "error", err.Error())
		}
		return
	}
	if !o.UsageReported {
		// A charge, not a bound: about the truth for English, and at
		// least one token per content event relayed.
		o.InputTokens = est.InputCharge
		o.OutputTokens = max(TokensForBytes(o.OutputBytes), o.OutputEvents)
		o.UsageEstimated = true
	}
	price := m.cfg.Prices[o.Backend]
	actual := ledger.Amount{
		Tokens:  saturatingAdd(o.InputTokens, o.OutputTokens),
		NanoEUR: price.Cost(o.InputTokens, o.OutputTokens),
	}
	o.CostNanoEUR = actual.NanoEUR
	o.UsageOverReservation = o.UsageReported && actual.Tokens > saturatingAdd(est.Input, est.Output)
	st.SetOutcome(o) // the audit line reads what was charged
	if err := m.cfg.Ledger.Commit(ctx, res, actual); err != nil {
		m.log.ErrorContext(ctx, commitFailure(err),
			"request_id", st.RequestID, "tenant", st.Tenant, "agent", st.Agent, "backend", o.Backend,
			"tokens", actual.Tokens, "nano_eur", actual.NanoEUR, "error", err.Error())
	}
}

// commitFailure is the log message of a served call whose Commit failed.
func commitFailure(err error) string {
	if errors.Is(err, ledger.ErrNotDurable) {
		return "served call counted in memory only: the budget ledger cannot write to disk; metered calls are refused until it can"
	}
	return "served call not committed to the budget ledger"
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
	fe := &faults.Error{Reason: faults.BudgetExceeded, Message: ex.Error()}
	if ex.Requested <= ex.Limit {
		// A call bigger than the whole cap never fits: waiting for the
		// rollover would not help, so no Retry-After.
		fe.RetryAfterSeconds = retryAfterSeconds(ex.RetryAfter)
	}
	return fe
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

// saturatingMul is a*b for a, b ≥ 0, capped at math.MaxInt64.
func saturatingMul(a, b int64) int64 {
	if b != 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

func saturatingAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// endSpan ends span with err's reason, if any.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, string(faults.As(err).Reason))
	}
	span.End()
}
