package server

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
)

// Header metadata keys the services set; the HTTP front writes them as
// response headers.
const (
	// HeaderDegraded is set to "backend-fallback" when a fallback served.
	HeaderDegraded = "flexway-degraded"
	// HeaderRoute is "<alias>/<arm>" when an alias's target served: the
	// arm is the target's arm name, else its index in the alias's
	// targets.
	HeaderRoute = "flexway-route"
)

// attemptFunc is one kind of call's try on one backend: chat JSON, chat
// streams and embeddings each write one, and the wire formats of later
// issues plug theirs in the same way; [Core.runPlan] runs it for each
// backend of the plan until one serves.
//
// It calls b with ctx (the attempt's span's context) and returns o, whose
// Backend and ModelRequested the runner has set, completed with what the
// attempt learnt: the model sent or served (ModelServed), Served once the
// caller got an answer from b, and the usage (InputTokens, OutputTokens,
// UsageReported, OutputBytes, OutputEvents); o is passed by value, so that
// an attempt costs no allocation for it. fallback is set when b is not the
// plan's first backend.
//
// committed reports that the attempt answered the caller itself: a
// streaming attempt sets it once a chunk reached the client (it sends the
// served headers, [setServedHeaders], before that first chunk) and when
// its stream ended; no other backend is tried after a committed attempt,
// and the runner sends no headers of its own for it. A unary attempt
// returns false and leaves its response to the caller of the runner.
//
// err is the attempt's failure, as the backends report it
// ([backends.Backend]): [canFallBack] decides whether the next backend is
// tried.
type attemptFunc func(ctx context.Context, b backends.Backend, o call.Outcome, fallback bool) (_ call.Outcome, committed bool, err error)

// runPlan runs try on the backends of the call's plan (st.Plan), in order,
// until one serves, under DESIGN.md's fallback rules: the next backend is
// tried only after a failure that [canFallBack] allows (never a 4xx or a
// request-caused error), before anything was committed to the client,
// while the caller is still there; each backend of the plan is tried once.
// For each attempt it starts a span (flexway.upstream_attempt), records
// the attempt's outcome in st and logs its failure. When a backend serves,
// its outcome marks a fallback (Outcome.Fallback, for any but the plan's
// first) and, for an attempt that did not answer itself, the runner sends
// the served headers (Flexway-Degraded). It returns
// nil when a backend served, else the error to answer with: the failure
// that ended the plan.
func (c *Core) runPlan(ctx context.Context, st *call.State, model string, try attemptFunc) error {
	plan, err := plan(st)
	if err != nil {
		return err
	}
	var last error
	for i, name := range plan {
		b, ok := c.opts.Backends[name]
		if !ok {
			return faults.New(faults.Internal, "backend %q is not configured", name)
		}
		actx, span := c.startAttempt(ctx, name, i)
		o := call.Outcome{Backend: name, ModelRequested: model}
		if t, ok := st.AliasTargets[name]; ok {
			// An alias's target: its model id is sent as is.
			actx = backends.WithModel(actx, t.Model)
			o.Alias, o.Arm = st.Alias, t.Arm
		}
		o, committed, err := try(actx, b, o, i > 0)
		endAttempt(span, err)
		o.Fallback = err == nil && i > 0
		st.SetOutcome(o)
		if err == nil {
			if !committed {
				setServedHeaders(ctx, i > 0, o.Route())
			}
			return nil
		}
		c.attempt(ctx, st, name, err)
		last = err
		if committed || !canFallBack(err) || ctx.Err() != nil {
			return err
		}
	}
	return last
}

// canFallBack reports whether a failed attempt may be followed by the next
// backend: connection errors, 5xx, timeouts and open circuits, never a 4xx
// (an upstream 401 or 403, [backends.ErrUpstreamAuth], included, although
// it is reported as an upstream error) or a cancellation.
func canFallBack(err error) bool { return backends.Unavailable(err) }

// attempt logs a failed attempt with its cause; the cause never reaches the
// client.
func (c *Core) attempt(ctx context.Context, st *call.State, backend string, err error) {
	fe := faults.As(err)
	attrs := []any{"request_id", st.RequestID, "backend", backend, "reason", string(fe.Reason)}
	if fe.Err != nil {
		attrs = append(attrs, "cause", fe.Err.Error())
	}
	if fe.Reason == faults.GuardrailViolation {
		// The backend answered; the call's policies refused the answer.
		c.log.InfoContext(ctx, "answer refused by a response guardrail", attrs...)
		return
	}
	if fe.Reason == faults.Canceled {
		// The caller went away: not the backend's failure.
		c.log.InfoContext(ctx, "call canceled by the caller", attrs...)
		return
	}
	c.log.WarnContext(ctx, "upstream attempt failed", attrs...)
}

// startAttempt starts the span of the call's attempt number i (from 0)
// on backend name.
func (c *Core) startAttempt(ctx context.Context, name string, i int) (context.Context, trace.Span) {
	return c.opts.Tracer.Start(ctx, "flexway.upstream_attempt", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("flexway.backend", name), attribute.Int("flexway.attempt", i+1), attribute.Bool("flexway.fallback", i > 0)))
}

// endAttempt ends an attempt's span with its error, if any: its reason,
// never its message.
func endAttempt(span trace.Span, err error) {
	if err != nil {
		reason := string(faults.As(err).Reason)
		span.SetAttributes(attribute.String("flexway.reason", reason))
		span.SetStatus(codes.Error, reason)
	}
	span.End()
}

// setServedHeaders sends the header metadata of a served call:
// Flexway-Degraded after a fallback, Flexway-Route (route, "<alias>/<arm>")
// for a call served through an alias.
func setServedHeaders(ctx context.Context, fallback bool, route string) {
	var md metadata.MD
	if fallback {
		md = metadata.Pairs(HeaderDegraded, "backend-fallback")
	}
	if route != "" {
		md = metadata.Join(md, metadata.Pairs(HeaderRoute, route))
	}
	if md != nil {
		_ = grpc.SetHeader(ctx, md)
	}
}
