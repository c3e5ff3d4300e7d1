package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
)

// TestCanFallBack pins DESIGN.md's fallback rule: connection errors, 5xx,
// timeouts and open circuits are fallen back from; a 4xx never is, an
// upstream 401 or 403 (reported as an upstream error) included.
func TestCanFallBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "upstream_error", err: faults.New(faults.UpstreamError, "upstream main answered 502"), want: true},
		{name: "upstream_timeout", err: faults.New(faults.UpstreamTimeout, "timed out"), want: true},
		{name: "open_circuit", err: faults.New(faults.NoBackendAvailable, "circuit open"), want: true},
		{name: "wrapped_upstream_error", err: fmt.Errorf("attempt: %w", faults.New(faults.UpstreamError, "x")), want: true},
		{name: "upstream_4xx", err: &faults.Error{Reason: faults.UpstreamStatus, UpstreamHTTPStatus: 429}},
		{
			name: "upstream_auth_refused",
			err:  faults.Wrap(faults.UpstreamError, fmt.Errorf("upstream main status 401: %w", backends.ErrUpstreamAuth), "refused"),
		},
		{name: "canceled", err: faults.New(faults.Canceled, "the request was canceled")},
		{name: "invalid_request", err: faults.New(faults.InvalidRequest, "bad")},
		{name: "not_a_fault", err: errors.New("plain")},
		{name: "context_canceled", err: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := canFallBack(tt.err); got != tt.want {
				t.Errorf("canFallBack(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestHasContent pins which chunks are held as preamble (no content) and
// which are content: only the latter reach the client before the stream is
// committed to a backend.
func TestHasContent(t *testing.T) {
	t.Parallel()
	str := func(s string) *string { return &s }
	delta := func(d *flexwayv1.ChatMessage) *flexwayv1.ChatCompletionChunk {
		return &flexwayv1.ChatCompletionChunk{Choices: []*flexwayv1.ChatCompletionChunkChoice{{Delta: d}}}
	}
	tests := []struct {
		name  string
		chunk *flexwayv1.ChatCompletionChunk
		want  bool
	}{
		{name: "role only", chunk: delta(&flexwayv1.ChatMessage{Role: "assistant", Content: &flexwayv1.ChatMessage_Text{Text: ""}})},
		{name: "openai first chunk with refusal null", chunk: delta(&flexwayv1.ChatMessage{Role: "assistant", Content: &flexwayv1.ChatMessage_Text{Text: ""}, ExtraFields: map[string]string{"refusal": "null"}})},
		{name: "no choices", chunk: &flexwayv1.ChatCompletionChunk{}},
		{name: "text", chunk: delta(&flexwayv1.ChatMessage{Content: &flexwayv1.ChatMessage_Text{Text: "Hi"}}), want: true},
		{name: "tool call", chunk: delta(&flexwayv1.ChatMessage{ExtraFields: map[string]string{"tool_calls": `[{"index":0}]`}}), want: true},
		{name: "finish reason", chunk: &flexwayv1.ChatCompletionChunk{Choices: []*flexwayv1.ChatCompletionChunkChoice{{Delta: &flexwayv1.ChatMessage{}, FinishReason: str("stop")}}}, want: true},
		{name: "usage", chunk: &flexwayv1.ChatCompletionChunk{Usage: &flexwayv1.Usage{TotalTokens: 3}}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hasContent(tt.chunk); got != tt.want {
				t.Fatalf("hasContent = %v, want %v", got, tt.want)
			}
		})
	}
}
