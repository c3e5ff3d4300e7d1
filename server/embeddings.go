package server

import (
	"context"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/openaiwire"
)

// CreateEmbedding implements
// [flexwayv1.EmbeddingsServiceServer.CreateEmbedding] on the backends
// planned for the embeddings capability, with the same fallback rules as
// chat ([Core.runPlan]).
func (c *Core) CreateEmbedding(ctx context.Context, req *flexwayv1.CreateEmbeddingRequest) (*flexwayv1.CreateEmbeddingResponse, error) {
	st, err := state(ctx)
	if err != nil {
		return nil, err
	}
	var resp *flexwayv1.CreateEmbeddingResponse
	err = c.runPlan(ctx, st, req.GetModel(), func(ctx context.Context, b backends.Backend, o call.Outcome, _ bool) (call.Outcome, bool, error) {
		r, served, err := b.CreateEmbedding(ctx, req)
		o.ModelServed = served.ModelSent
		if err != nil {
			return o, false, err
		}
		if r.GetModel() != "" {
			o.ModelServed = r.GetModel()
		}
		o.Served = true
		if u := r.GetUsage(); u != nil {
			o.InputTokens, o.UsageReported = u.GetPromptTokens(), true
			o.CacheReadTokens, o.CacheWriteTokens = openaiwire.CacheTokens(u)
		}
		resp = r
		return o, false, nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}
