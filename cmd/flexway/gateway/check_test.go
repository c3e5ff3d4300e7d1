package gateway

import (
	"context"
	"errors"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
)

// plainBackend can express every request (it has no CheckChat).
type plainBackend struct{ name string }

func (b plainBackend) Name() string { return b.name }
func (plainBackend) CreateChatCompletion(context.Context, *flexwayv1.CreateChatCompletionRequest) (*flexwayv1.ChatCompletion, backends.Served, error) {
	return nil, backends.Served{}, errors.New("not called")
}
func (plainBackend) StreamChatCompletion(context.Context, *flexwayv1.CreateChatCompletionRequest) (backends.ChunkStream, backends.Served, error) {
	return nil, backends.Served{}, errors.New("not called")
}
func (plainBackend) CreateEmbedding(context.Context, *flexwayv1.CreateEmbeddingRequest) (*flexwayv1.CreateEmbeddingResponse, backends.Served, error) {
	return nil, backends.Served{}, errors.New("not called")
}

// noN is a backend whose wire format has no n (as Anthropic's).
type noN struct{ plainBackend }

func (noN) CheckChat(req *flexwayv1.CreateChatCompletionRequest) error {
	if req.GetN() > 1 {
		return &faults.Error{Reason: faults.InvalidRequest, Message: "n > 1 cannot be sent to this backend", Param: "n"}
	}
	return nil
}

// TestCheckChat: the meter's check asks the backends that implement
// backends.Checker, and nothing else.
func TestCheckChat(t *testing.T) {
	if check := checkChat(map[string]backends.Backend{"gpt": plainBackend{"gpt"}}); check != nil {
		t.Error("a check without any checking backend: the meter would ask for nothing")
	}
	check := checkChat(map[string]backends.Backend{"gpt": plainBackend{"gpt"}, "claude": noN{plainBackend{"claude"}}})
	n := int32(2)
	two := &flexwayv1.CreateChatCompletionRequest{Model: "m", N: &n}
	if err := check("claude", two); faults.As(err).Param != "n" {
		t.Errorf("claude, n=2: %v, want the backend's error naming n", err)
	}
	for _, tc := range []struct {
		backend string
		req     *flexwayv1.CreateChatCompletionRequest
	}{{"claude", &flexwayv1.CreateChatCompletionRequest{Model: "m"}}, {"gpt", two}, {"grpc-only", two}} {
		if err := check(tc.backend, tc.req); err != nil {
			t.Errorf("%s: %v, want nil", tc.backend, err)
		}
	}
}
