package server

import (
	"context"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
)

// pieceStream makes a fresh chunk of each piece on every Recv (the same
// cost with and without guardrails), then a finish chunk, then io.EOF.
type pieceStream struct {
	pieces []string
	i      int
}

func (s *pieceStream) Recv() (*flexwayv1.ChatCompletionChunk, error) {
	switch {
	case s.i < len(s.pieces):
		s.i++
		return textChunk(0, s.pieces[s.i-1]), nil
	case s.i == len(s.pieces):
		s.i++
		return finishChunk(0), nil
	}
	return nil, io.EOF
}

// discard is a client that reads every chunk and keeps none.
type discard struct{ grpc.ServerStream }

func (discard) Context() context.Context                  { return context.Background() }
func (discard) Send(*flexwayv1.ChatCompletionChunk) error { return nil }

// BenchmarkRelayGuardrails measures the relay per streamed chunk of
// prose (tokens of 2 to 8 bytes, as models stream them): none is a call
// whose policies have no response rule (no guard, the relay as before),
// guarded has pii, secrets, injection and banned on, hold-back included.
// The figure to read is ns/chunk.
func BenchmarkRelayGuardrails(b *testing.B) {
	words := strings.Fields(strings.Repeat("The quarterly report shows revenue grew in every region, and the team thanks you for your patience while we reconcile the accounts. ", 8))
	pieces := make([]string, len(words))
	for i, w := range words {
		pieces[i] = " " + w
	}
	rules := []config.GuardrailRule{
		{Type: "pii", Action: "redact"},
		{Type: "secrets", Action: "deny"},
		{Type: "injection", Action: "deny"},
		{Type: "banned", Action: "redact", Words: []string{"confidential", "internal only", "project falcon", "darn", "heck"}},
	}
	for _, bc := range []struct {
		name string
		st   *call.State
	}{
		{"none", &call.State{}},
		{"guarded", guardState(b, false, nil, rules...)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := New(Options{})
			b.ReportAllocs()
			for b.Loop() {
				var o call.Outcome
				g := c.newAnswerGuard(context.Background(), bc.st, nil)
				if _, err := c.relay(discard{}, &pieceStream{pieces: pieces}, &o, false, false, 0, g); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(len(pieces)+1)), "ns/chunk")
		})
	}
}
