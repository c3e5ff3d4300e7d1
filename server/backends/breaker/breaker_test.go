package breaker_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/breaker"
	"github.com/flexway/flexway/server/faults"
)

// fake answers with err (nil: success) and counts the calls that reach it.
type fake struct {
	calls atomic.Int64
	err   atomic.Pointer[error]
}

func (f *fake) set(err error) { f.err.Store(&err) }

func (f *fake) result() error {
	f.calls.Add(1)
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *fake) Name() string { return "main" }

func (f *fake) CreateChatCompletion(context.Context, *flexwayv1.CreateChatCompletionRequest) (*flexwayv1.ChatCompletion, backends.Served, error) {
	if err := f.result(); err != nil {
		return nil, backends.Served{Backend: "main"}, err
	}
	return &flexwayv1.ChatCompletion{Id: "ok"}, backends.Served{Backend: "main"}, nil
}

func (f *fake) StreamChatCompletion(context.Context, *flexwayv1.CreateChatCompletionRequest) (backends.ChunkStream, backends.Served, error) {
	return &chunks{err: f.result()}, backends.Served{Backend: "main"}, nil
}

func (f *fake) CreateEmbedding(context.Context, *flexwayv1.CreateEmbeddingRequest) (*flexwayv1.CreateEmbeddingResponse, backends.Served, error) {
	return nil, backends.Served{}, f.result()
}

// chunks is a stream that fails with err at once, or sends one chunk.
type chunks struct {
	err  error
	sent bool
}

func (c *chunks) Recv() (*flexwayv1.ChatCompletionChunk, error) {
	if c.err != nil {
		return nil, c.err
	}
	if c.sent {
		return nil, io.EOF
	}
	c.sent = true
	return &flexwayv1.ChatCompletionChunk{Id: "c"}, nil
}

func (c *chunks) Close() error { return nil }

var (
	down     = faults.New(faults.UpstreamError, "upstream main is unreachable")
	tooMany  = &faults.Error{Reason: faults.UpstreamStatus, UpstreamHTTPStatus: 429, Message: "slow down"}
	canceled = faults.New(faults.Canceled, "the client went away")
)

func call(b *breaker.Backend) error {
	_, _, err := b.CreateChatCompletion(context.Background(), &flexwayv1.CreateChatCompletionRequest{})
	return err
}

func TestBreakerOpensSkipsAndRecovers(t *testing.T) {
	f := &fake{}
	var changes []string
	b := breaker.Wrap(f, 3, 100*time.Millisecond, func(name, state string) { changes = append(changes, name+":"+state) })
	f.set(down)
	for i := range 3 {
		if err := call(b); !errors.Is(err, down) {
			t.Fatalf("call %d: %v, want the upstream's error", i, err)
		}
	}
	if b.State() != breaker.Open {
		t.Fatalf("state %s after 3 failures, want open", b.State())
	}
	// Open: refused without reaching the upstream.
	for range 10 {
		err := call(b)
		var fe *faults.Error
		if !errors.As(err, &fe) || fe.Reason != faults.NoBackendAvailable {
			t.Fatalf("open circuit: %v, want no_backend_available", err)
		}
	}
	if n := f.calls.Load(); n != 3 {
		t.Fatalf("%d calls reached the upstream, want 3: an open circuit makes no call", n)
	}
	// After open_for, one trial call; it succeeds and closes the circuit.
	time.Sleep(120 * time.Millisecond)
	if b.State() != breaker.HalfOpen {
		t.Fatalf("state %s after open_for, want half_open", b.State())
	}
	f.set(nil)
	if err := call(b); err != nil {
		t.Fatalf("trial call: %v", err)
	}
	if b.State() != breaker.Closed || f.calls.Load() != 4 {
		t.Fatalf("state %s, %d calls, want closed after one trial", b.State(), f.calls.Load())
	}
	want := []string{"main:open", "main:half_open", "main:closed"}
	if len(changes) != 3 || changes[0] != want[0] || changes[1] != want[1] || changes[2] != want[2] {
		t.Errorf("state changes %v, want %v", changes, want)
	}
}

func TestBreakerFailedTrialReopens(t *testing.T) {
	f := &fake{}
	b := breaker.Wrap(f, 1, 50*time.Millisecond, nil)
	f.set(down)
	_ = call(b)
	time.Sleep(70 * time.Millisecond)
	_ = call(b) // the trial fails
	if b.State() != breaker.Open || f.calls.Load() != 2 {
		t.Fatalf("state %s, %d calls; want open again after a failed trial", b.State(), f.calls.Load())
	}
}

func TestBreakerCountsOnlyUnavailability(t *testing.T) {
	f := &fake{}
	b := breaker.Wrap(f, 2, time.Minute, nil)
	for _, err := range []error{tooMany, canceled, tooMany, canceled, backends.ErrUpstreamAuth} {
		f.set(err)
		for range 3 {
			_ = call(b)
		}
	}
	if b.State() != breaker.Closed {
		t.Fatalf("state %s after 4xx, cancellations and auth refusals; want closed", b.State())
	}
	// Failures interrupted by a success do not add up.
	f.set(down)
	_ = call(b)
	f.set(nil)
	_ = call(b)
	f.set(down)
	_ = call(b)
	if b.State() != breaker.Closed {
		t.Fatalf("state %s after non-consecutive failures, want closed", b.State())
	}
	_ = call(b)
	if b.State() != breaker.Open {
		t.Fatalf("state %s after 2 consecutive failures, want open", b.State())
	}
}

func TestBreakerJudgesStreamsByTheirStart(t *testing.T) {
	f := &fake{}
	b := breaker.Wrap(f, 2, time.Minute, nil)
	f.set(down)
	for range 2 {
		s, _, err := b.StreamChatCompletion(context.Background(), &flexwayv1.CreateChatCompletionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); !errors.Is(err, down) {
			t.Fatalf("recv: %v", err)
		}
		s.Close()
	}
	if b.State() != breaker.Open {
		t.Fatalf("state %s after two streams failing before their first chunk, want open", b.State())
	}

	// A stream closed before anything (the caller left) counts neither way.
	f2 := &fake{}
	b2 := breaker.Wrap(f2, 1, time.Minute, nil)
	f2.set(down)
	s, _, _ := b2.StreamChatCompletion(context.Background(), &flexwayv1.CreateChatCompletionRequest{})
	s.Close()
	if b2.State() != breaker.Closed {
		t.Fatalf("state %s after a stream the caller closed, want closed", b2.State())
	}
}

// BenchmarkOpenCircuit measures the refusal of a call by an open circuit:
// what skipping a failing backend costs.
func BenchmarkOpenCircuit(b *testing.B) {
	f := &fake{}
	br := breaker.Wrap(f, 1, time.Hour, nil)
	f.set(down)
	_ = call(br)
	b.ReportAllocs()
	for b.Loop() {
		if err := call(br); err == nil {
			b.Fatal("open circuit let a call through")
		}
	}
}

// TestRequestCausedFailuresCountNeitherWay: failures the call's own
// request explains (backends.ErrRequestCaused) neither open the circuit nor
// reset the count of real failures, on unary calls and on streams.
func TestRequestCausedFailuresCountNeitherWay(t *testing.T) {
	f := &fake{}
	b := breaker.Wrap(f, 5, time.Minute, nil)
	caused := faults.Wrap(faults.UpstreamError, backends.ErrRequestCaused, "upstream main answered an event stream to a unary call")
	f.set(caused)
	for range 10 {
		if err := call(b); !errors.Is(err, backends.ErrRequestCaused) {
			t.Fatalf("call: %v, want the request-caused failure", err)
		}
		s, _, err := b.StreamChatCompletion(context.Background(), &flexwayv1.CreateChatCompletionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); !errors.Is(err, backends.ErrRequestCaused) {
			t.Fatalf("stream: %v", err)
		}
		s.Close()
	}
	if b.State() != breaker.Closed || f.calls.Load() != 20 {
		t.Fatalf("after 20 request-caused failures: %s, %d calls reached the backend; want closed, 20", b.State(), f.calls.Load())
	}
	// Four real failures, one request-caused (not a success), one real:
	// the circuit opens.
	f.set(down)
	for range 4 {
		call(b)
	}
	f.set(caused)
	call(b)
	f.set(down)
	call(b)
	if b.State() != breaker.Open {
		t.Fatalf("after 5 real failures around a request-caused one: %s, want open", b.State())
	}
}
