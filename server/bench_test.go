package server_test

import (
	"context"
	"testing"
	"time"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/breaker"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/routing"
)

// instant answers at once, or fails at once with err.
type instant struct {
	name string
	err  error
}

func (b instant) Name() string { return b.name }

func (b instant) CreateChatCompletion(context.Context, *flexwayv1.CreateChatCompletionRequest) (*flexwayv1.ChatCompletion, backends.Served, error) {
	if b.err != nil {
		return nil, backends.Served{Backend: b.name}, b.err
	}
	return &flexwayv1.ChatCompletion{Id: "c", Model: "m"}, backends.Served{Backend: b.name, ModelSent: "m"}, nil
}

func (b instant) StreamChatCompletion(context.Context, *flexwayv1.CreateChatCompletionRequest) (backends.ChunkStream, backends.Served, error) {
	return nil, backends.Served{}, b.err
}

func (b instant) CreateEmbedding(context.Context, *flexwayv1.CreateEmbeddingRequest) (*flexwayv1.CreateEmbeddingResponse, backends.Served, error) {
	return nil, backends.Served{}, b.err
}

// BenchmarkFallback measures what the core adds to a call when the first
// backend fails: direct is the serving backend alone; after-failure has a
// backend failing at once before it; after-open-circuit has one whose
// circuit is open. The differences are the failed attempt's own cost plus
// the fallback's (the target: the fallback adds nothing beyond the failed
// attempt).
func BenchmarkFallback(b *testing.B) {
	down := faults.New(faults.UpstreamError, "upstream a is unreachable")
	open := breaker.Wrap(instant{name: "a", err: down}, 1, time.Hour, nil)
	_, _, _ = open.CreateChatCompletion(context.Background(), nil) // opens it
	for _, bc := range []struct {
		name string
		a    backends.Backend
		plan []string
	}{
		{"direct", nil, []string{"b"}},
		{"after-failure", instant{name: "a", err: down}, []string{"a", "b"}},
		{"after-open-circuit", open, []string{"a", "b"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bs := map[string]backends.Backend{"b": instant{name: "b"}}
			if bc.a != nil {
				bs["a"] = bc.a
			}
			core := server.New(server.Options{Backends: bs, Routes: &routing.Table{}})
			req := &flexwayv1.CreateChatCompletionRequest{Model: "m"}
			b.ReportAllocs()
			for b.Loop() {
				st := &call.State{Tenant: "acme", Plan: bc.plan}
				if _, err := core.CreateChatCompletion(call.NewContext(context.Background(), st), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
