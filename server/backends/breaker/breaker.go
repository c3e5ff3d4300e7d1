// Package breaker puts a circuit breaker (sony/gobreaker v2) in front of a
// backend: after `failures` consecutive failed calls the circuit opens and
// calls are refused at once, without a network call, for `open_for`; then
// one trial call (half-open) closes it again on success or reopens it on
// failure. DESIGN.md, "Routing and fallback rules": an open circuit counts
// as a failure to fall back from.
//
// A failure is what the core falls back from: a connection error, a 5xx, a
// timeout (faults.UpstreamError, UpstreamTimeout, NoBackendAvailable). An
// upstream 4xx (429 included) is an answer: the backend is up. The caller's
// cancellation, an upstream refusing Flexway's own credentials
// (backends.ErrUpstreamAuth, a configuration problem) and a failure the
// call's own request explains (backends.ErrRequestCaused: an event stream
// answered to a unary call, an answer over 64 MiB) count neither way: no
// caller can open a circuit that every tenant shares.
package breaker

import (
	"context"
	"errors"
	"time"

	"github.com/sony/gobreaker/v2"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
)

// State names, as the admin API and metrics report them.
const (
	Closed   = "closed"
	Open     = "open"
	HalfOpen = "half_open"
)

// Backend is a backend behind its circuit breaker. It implements
// [backends.Backend] and is safe for concurrent use.
type Backend struct {
	backends.Backend
	cb *gobreaker.TwoStepCircuitBreaker[struct{}]
}

var _ backends.Backend = (*Backend)(nil)

// Wrap returns b behind a breaker that opens after failures consecutive
// failures (at least 1) and stays open for openFor (> 0) before one trial
// call. onChange, if not nil, is told of every state change (backend name,
// new state).
func Wrap(b backends.Backend, failures int, openFor time.Duration, onChange func(backend, state string)) *Backend {
	if failures < 1 {
		failures = 1
	}
	st := gobreaker.Settings{
		Name:        b.Name(),
		MaxRequests: 1,
		Timeout:     openFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(failures) },
		IsSuccessful: func(err error) bool {
			return err == nil || !failure(err)
		},
		IsExcluded: excluded,
	}
	if onChange != nil {
		st.OnStateChange = func(name string, _, to gobreaker.State) { onChange(name, stateName(to)) }
	}
	return &Backend{Backend: b, cb: gobreaker.NewTwoStepCircuitBreaker[struct{}](st)}
}

// State returns the circuit's state: [Closed], [Open] or [HalfOpen].
func (b *Backend) State() string { return stateName(b.cb.State()) }

func stateName(s gobreaker.State) string {
	switch s {
	case gobreaker.StateOpen:
		return Open
	case gobreaker.StateHalfOpen:
		return HalfOpen
	}
	return Closed
}

// failure reports whether err means the backend is unavailable.
func failure(err error) bool { return backends.Unavailable(err) }

// excluded reports whether err says nothing of the backend: the caller
// went away, the upstream refused Flexway's credentials, or the call's own
// request explains the failure.
func excluded(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, backends.ErrUpstreamAuth) || errors.Is(err, backends.ErrRequestCaused) {
		return true
	}
	var fe *faults.Error
	return errors.As(err, &fe) && fe.Reason == faults.Canceled
}

// allow asks the breaker for one call; an open circuit (or a half-open one
// whose trial call is in flight) is faults.NoBackendAvailable, which the
// core falls back from.
func (b *Backend) allow() (func(error), error) {
	done, err := b.cb.Allow()
	if err != nil {
		return nil, faults.Wrap(faults.NoBackendAvailable, err, "backend "+b.Name()+" is failing (circuit open); retry later")
	}
	return done, nil
}

// CreateChatCompletion implements [backends.Backend].
func (b *Backend) CreateChatCompletion(ctx context.Context, req *flexwayv1.CreateChatCompletionRequest) (*flexwayv1.ChatCompletion, backends.Served, error) {
	return guard(b, func() (*flexwayv1.ChatCompletion, backends.Served, error) {
		return b.Backend.CreateChatCompletion(ctx, req)
	})
}

// CreateEmbedding implements [backends.Backend].
func (b *Backend) CreateEmbedding(ctx context.Context, req *flexwayv1.CreateEmbeddingRequest) (*flexwayv1.CreateEmbeddingResponse, backends.Served, error) {
	return guard(b, func() (*flexwayv1.CreateEmbeddingResponse, backends.Served, error) {
		return b.Backend.CreateEmbedding(ctx, req)
	})
}

// guard runs one non-streamed call through the breaker: refused without a
// network call while the circuit is open, else reported by its error.
func guard[T any](b *Backend, call func() (T, backends.Served, error)) (T, backends.Served, error) {
	done, err := b.allow()
	if err != nil {
		var zero T
		return zero, backends.Served{Backend: b.Name()}, err
	}
	resp, served, err := call()
	done(err)
	return resp, served, err
}

// StreamChatCompletion implements [backends.Backend]. The call is judged
// by its beginning: a failure to open the stream, or an error before its
// first chunk, is a failure; the first chunk is a success. A stream closed
// before either (the caller went away) counts neither way.
func (b *Backend) StreamChatCompletion(ctx context.Context, req *flexwayv1.CreateChatCompletionRequest) (backends.ChunkStream, backends.Served, error) {
	done, err := b.allow()
	if err != nil {
		return nil, backends.Served{Backend: b.Name()}, err
	}
	s, served, err := b.Backend.StreamChatCompletion(ctx, req)
	if err != nil {
		done(err)
		return nil, served, err
	}
	return &stream{ChunkStream: s, done: done}, served, nil
}

// stream reports its first chunk or its first error to the breaker.
type stream struct {
	backends.ChunkStream
	done func(error) // nil once reported
}

func (s *stream) Recv() (*flexwayv1.ChatCompletionChunk, error) {
	ch, err := s.ChunkStream.Recv()
	if s.done != nil {
		s.done(err)
		s.done = nil
	}
	return ch, err
}

func (s *stream) Close() error {
	if s.done != nil {
		s.done(context.Canceled)
		s.done = nil
	}
	return s.ChunkStream.Close()
}
