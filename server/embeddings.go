package server

import (
	"context"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
)

// CreateEmbedding implements
// [flexwayv1.EmbeddingsServiceServer.CreateEmbedding] on the backends
// planned for the embeddings capability, with the same fallback rules as
// chat.
func (c *Core) CreateEmbedding(ctx context.Context, req *flexwayv1.CreateEmbeddingRequest) (*flexwayv1.CreateEmbeddingResponse, error) {
	st, err := state(ctx)
	if err != nil {
		return nil, err
	}
	plan, err := c.plan(st, call.Embeddings)
	if err != nil {
		return nil, err
	}
	var last error
	for i, name := range plan {
		b, ok := c.opts.Backends[name]
		if !ok {
			return nil, faults.New(faults.Internal, "backend %q is not configured", name)
		}
		actx, span := c.startAttempt(ctx, name, i)
		resp, served, err := b.CreateEmbedding(actx, req)
		endAttempt(span, err)
		o := call.Outcome{Backend: name, ModelRequested: req.GetModel(), ModelServed: served.ModelSent}
		if err != nil {
			c.attempt(ctx, st, name, err)
			st.SetOutcome(o)
			last = err
			if canFallBack(err) && ctx.Err() == nil {
				continue
			}
			return nil, err
		}
		if resp.GetModel() != "" {
			o.ModelServed = resp.GetModel()
		}
		o.Served = true
		if u := resp.GetUsage(); u != nil {
			o.InputTokens, o.UsageReported = u.GetPromptTokens(), true
		}
		st.SetOutcome(o)
		if i > 0 {
			st.SetFallback()
		}
		setServedHeaders(ctx, i > 0)
		return resp, nil
	}
	return nil, last
}
