// Package audit is the audit interceptor: it writes one metadata line per
// inference call (chat, embeddings, proxied specialised models) to the
// audit log, after the call, whatever its outcome, and refuses new
// inference calls (UNAVAILABLE, HTTP 503) while the audit log cannot be
// written: nothing is served unaudited. It runs after identity (a call
// that names no caller writes no line) and before the interceptors that
// may refuse a call, so that refusals are audited too.
package audit

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/auditlog"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/money"
)

// Config is what the interceptor needs.
type Config struct {
	// Writer is the audit log. Required.
	Writer *auditlog.Writer
	// Proxied reports whether a full method is a proxied specialised
	// model's, and its feature; nil: none is.
	Proxied func(fullMethod string) (feature string, ok bool)
	// MeteredBy returns a backend's metering, local or upstream; nil:
	// local.
	MeteredBy func(backend string) string
	// Record, when set, is given every line written (for metrics).
	Record func(ctx context.Context, l *auditlog.Line)
	// ModelRequested maps the caller's model to what the line records as
	// model_requested: the model when the configuration declares it, else
	// "other" (telemetry's Metrics.Model); nil records it as given.
	ModelRequested func(model string) string
}

// Inference methods of flexway.v1.
var inference = map[string]bool{
	flexwayv1.ChatService_CreateChatCompletion_FullMethodName:  true,
	flexwayv1.ChatService_StreamChatCompletion_FullMethodName:  true,
	flexwayv1.EmbeddingsService_CreateEmbedding_FullMethodName: true,
}

// UnaryServerInterceptor audits unary inference calls.
func UnaryServerInterceptor(c Config) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		a, ok := c.begin(ctx, info.FullMethod)
		if !ok {
			return handler(ctx, req)
		}
		if err := c.Writer.Healthy(); err != nil {
			return nil, refuse(err)
		}
		a.request(req)
		resp, err := handler(c.noting(ctx, a), req)
		a.noted()
		c.write(ctx, a, err)
		return resp, err
	}
}

// StreamServerInterceptor audits streaming inference calls (streamed chat,
// proxied specialised models).
func StreamServerInterceptor(c Config) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		a, ok := c.begin(ss.Context(), info.FullMethod)
		if !ok {
			return handler(srv, ss)
		}
		if err := c.Writer.Healthy(); err != nil {
			return refuse(err)
		}
		err := handler(srv, &stream{ServerStream: ss, a: a, ctx: c.noting(ss.Context(), a)})
		a.noted()
		c.write(ss.Context(), a, err)
		return err
	}
}

// refuse is the answer to an inference call while the audit log cannot be
// written.
func refuse(err error) error {
	fe := faults.Wrap(faults.Unavailable, err, "the audit log cannot be written: inference calls are refused until it can; retry later")
	fe.RetryAfterSeconds = 5
	return fe
}

// auditing is one call being audited.
type auditing struct {
	st       *call.State
	feature  string
	user     string
	note     *[]byte // the buffer of the commit's note, from notePool
	noteLine auditlog.Line
	userHash string // Hash(user), once computed
}

// notePool holds the buffers of commit notes: the ledger copies a note
// into its journal record before Commit returns, so the buffer is reused
// once the handler (which commits) has returned.
var notePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// noted gives the note's buffer back, once the call's commit is done.
func (a *auditing) noted() {
	if a.note != nil && cap(*a.note) <= maxNoteBuffer {
		notePool.Put(a.note)
	}
	a.note = nil
}

// maxNoteBuffer is the largest note buffer kept for reuse.
const maxNoteBuffer = 16 << 10

// begin returns the call's audit record, false for a call that is not an
// inference call or names no caller.
func (c Config) begin(ctx context.Context, method string) (*auditing, bool) {
	st := call.FromContext(ctx)
	if st == nil {
		return nil, false
	}
	if inference[method] {
		return &auditing{st: st}, true
	}
	if c.Proxied != nil {
		if feature, ok := c.Proxied(method); ok {
			st.Capability = call.GRPC
			return &auditing{st: st, feature: feature}, true
		}
	}
	return nil, false
}

// request notes what the audit line needs of the request: its capability
// (recorded in the call's state, where the budget then reads it) and the
// OpenAI user field (hashed when written).
func (a *auditing) request(req any) {
	if a.st.Capability == call.GRPC {
		return
	}
	a.st.NoteRequest(req)
	switch r := req.(type) {
	case *flexwayv1.CreateChatCompletionRequest:
		a.user = r.GetUser()
	case *flexwayv1.CreateEmbeddingRequest:
		a.user = r.GetUser()
	}
}

// stream notes the request of a streaming call, and carries the note of
// its commit.
type stream struct {
	grpc.ServerStream
	a    *auditing
	ctx  context.Context
	seen bool
}

// Context is the call's context with the note of its commit.
func (s *stream) Context() context.Context { return s.ctx }

func (s *stream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && !s.seen {
		s.seen = true
		s.a.request(m)
	}
	return err
}

// noting returns ctx carrying, for the budget ledger's commit of the
// call, the note it journals with the commit (budget.WithNote): the call's
// audit line as it stands at the commit, ended there. If the process dies
// after the commit and before this interceptor's line is written, the
// gateway's next start rebuilds the line from the journal
// (auditlog.Rebuild), so that every call the ledger charged is audited.
func (c Config) noting(ctx context.Context, a *auditing) context.Context {
	return ledger.WithNote(ctx, func() []byte {
		l := &a.noteLine
		c.fill(l, a, nil)
		if l.UsageEstimated {
			// Usage is estimated only for a stream cut after its output
			// began: most often by the caller.
			l.Outcome, l.Status = "canceled", (&faults.Error{Reason: faults.Canceled}).HTTPStatus()
		}
		bp := a.note
		if bp == nil {
			bp = notePool.Get().(*[]byte)
			a.note = bp
		}
		b, err := auditlog.AppendEncoded((*bp)[:0], l)
		if err != nil {
			return nil
		}
		*bp = b
		return b
	})
}

// write builds the call's line and queues it.
func (c Config) write(ctx context.Context, a *auditing, err error) {
	l := c.line(a, err)
	// A call already served is audited even while the log is failing:
	// the writer keeps the line and retries.
	_ = c.Writer.Write(l)
	if c.Record != nil {
		c.Record(ctx, l)
	}
}

// line is the call's audit line, for a call that ended now with err.
func (c Config) line(a *auditing, err error) *auditlog.Line {
	l := new(auditlog.Line)
	c.fill(l, a, err)
	return l
}

// fill sets *l to the call's audit line, for a call that ended now with
// err.
func (c Config) fill(l *auditlog.Line, a *auditing, err error) {
	st, o := a.st, a.st.Outcome()
	if a.userHash == "" && a.user != "" {
		a.userHash = c.Writer.Hash(a.user) // once per call: the note and the line
	}
	*l = auditlog.Line{
		Time:                 st.Start.UTC(),
		RequestID:            st.RequestID,
		Operation:            st.Operation,
		Tenant:               st.Tenant,
		Agent:                st.Agent,
		Backend:              o.Backend,
		ModelRequested:       o.ModelRequested,
		ModelServed:          o.ModelServed,
		Capability:           string(st.Capability),
		Feature:              a.feature,
		Alias:                o.Alias,
		Arm:                  o.Arm,
		InputTokens:          o.InputTokens,
		OutputTokens:         o.OutputTokens,
		CacheReadTokens:      o.CacheReadTokens,
		CacheWriteTokens:     o.CacheWriteTokens,
		CacheSavedTokens:     o.CacheSavedTokens,
		CostEUR:              money.FormatEURFixed(o.CostNanoEUR),
		CostNanoEUR:          o.CostNanoEUR,
		UsageEstimated:       o.UsageEstimated,
		UsageOverReservation: o.UsageOverReservation,
		MeteredBy:            "local",
		Fallback:             o.Fallback,
		Soft:                 st.Soft,
		DurationMS:           float64(time.Since(st.Start).Microseconds()) / 1000,
		KeyHash:              c.Writer.HashName(st.KeyName),
		UserHash:             a.userHash,
	}
	if v := st.Cache; v != nil {
		l.Cache = v.Status
	}
	if d := st.WouldDeny; d != nil {
		// A shadow policy's would-be refusal: its name and reason only.
		l.WouldDeny = auditlog.WouldDeny{Policy: d.Policy, Reason: d.Reason}
	}
	if vs := st.Guardrails(); len(vs) > 0 {
		// The guardrail verdicts of both phases: names only, never a text.
		l.Guardrails = make([]auditlog.Guardrail, len(vs))
		for i, v := range vs {
			l.Guardrails[i] = auditlog.Guardrail{Policy: v.Policy, Rule: v.Rule, Phase: v.Phase, Action: v.Action}
		}
	}
	if c.ModelRequested != nil {
		l.ModelRequested = c.ModelRequested(l.ModelRequested)
	}
	if c.MeteredBy != nil && o.Backend != "" {
		l.MeteredBy = c.MeteredBy(o.Backend)
	}
	l.Outcome, l.Status = outcome(err, o.Backend != "")
}

// outcome classifies a call's error: ok, refused (the gateway said no
// before or without an upstream: a bad request, a cap, the sensitivity
// pin, a capability), upstream_error (an upstream's failure, or a status
// a proxied upstream returned), canceled or error; and the HTTP status of
// the answer.
func outcome(err error, reachedBackend bool) (string, int) {
	if err == nil {
		return "ok", 200
	}
	var own *faults.Error
	if !errors.As(err, &own) && reachedBackend {
		// A status the upstream itself returned (a proxied model's error,
		// relayed as is): its failure, whatever its code.
		return "upstream_error", faults.As(err).HTTPStatus()
	}
	fe := faults.As(err)
	switch fe.Reason {
	case faults.Canceled:
		return "canceled", fe.HTTPStatus()
	case faults.UpstreamError, faults.UpstreamTimeout, faults.NoBackendAvailable, faults.UpstreamStatus:
		return "upstream_error", fe.HTTPStatus()
	case faults.Unavailable, faults.Internal:
		return "error", fe.HTTPStatus()
	}
	return "refused", fe.HTTPStatus()
}
