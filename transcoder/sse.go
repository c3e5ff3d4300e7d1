package transcoder

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
	"github.com/flexway/flexway/transcoder/inproc"
)

// streamChat relays a streamed chat completion as server-sent events. The
// core's handler runs in this goroutine and each chunk it sends is written
// and flushed here at once (see [inproc.Channel.ServerStream]).
func (f *front) streamChat(ctx context.Context, w http.ResponseWriter, r *http.Request, req *flexwayv1.CreateChatCompletionRequest) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeOpenAIError(w, faults.New(faults.Internal, "streaming is not supported by this connection"))
		return
	}
	sw := &sseWriter{w: w, flusher: flusher, rc: http.NewResponseController(w), buf: make([]byte, 0, 512)}
	if idle := f.opts.StreamIdleTimeout; idle != nil {
		ctx = call.WithServedHook(ctx, func(backend string) { sw.idle = idle(backend) })
	}
	defer sw.noDeadline()
	trailer, err := f.opts.Conn.ServerStream(ctx, flexwayv1.ChatService_StreamChatCompletion_FullMethodName, req, sw)
	if err != nil {
		fe := toFault(err)
		f.logFailure(r, fe, sw.started)
		if !sw.started {
			copyHeaders(w, trailer)
		}
		sw.fail(fe)
		return
	}
	sw.done()
}

// sseWriter writes chunks as `data: <json>` events, each flushed as soon
// as it is written, and `data: [DONE]` at the end. An error before the
// first event is written as a plain OpenAI error response with its status;
// after it, the status can no longer change, so the error goes out as a
// final `data: {"error":...}` event and the stream ends without [DONE]: a
// cut stream never looks complete. The response headers are written with
// the first event. It is shaped like grpc-gateway's ForwardResponseStream.
//
// With idle set (the serving backend's idle_timeout, see
// [Options.StreamIdleTimeout]), each event's write and flush must complete
// within idle: a client that stops reading cannot hold the stream, its
// upstream connection and its reservation longer. The write then fails,
// and the core ends the call as for a client that went away.
type sseWriter struct {
	w        http.ResponseWriter
	flusher  http.Flusher
	rc       *http.ResponseController
	idle     time.Duration // 0: writes are not bounded
	deadline bool          // a write deadline is set
	buf      []byte
	started  bool
}

var _ inproc.Sink = (*sseWriter)(nil)

// Header implements [inproc.Sink]: the core's flexway-* header metadata
// become response headers.
func (s *sseWriter) Header(md metadata.MD) { copyHeaders(s.w, md) }

// Send implements [inproc.Sink]: one chunk, one event, flushed. A write
// error (the client went away) ends the core's call.
func (s *sseWriter) Send(m any) error {
	ch, ok := m.(*flexwayv1.ChatCompletionChunk)
	if !ok {
		return faults.New(faults.Internal, "unexpected stream message %T", m)
	}
	s.buf = append(s.buf[:0], "data: "...)
	s.buf = openaiwire.AppendChatCompletionChunk(s.buf, ch)
	s.buf = append(s.buf, "\n\n"...)
	if err := s.write(s.buf); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return faults.Wrap(faults.Canceled, err, fmt.Sprintf("the client read nothing for %s", s.idle))
		}
		return faults.Wrap(faults.Canceled, err, "the client went away")
	}
	return nil
}

// write writes and flushes p (the response headers first, with the first
// event), within s.idle when it is set.
func (s *sseWriter) write(p []byte) error {
	if s.idle > 0 {
		if err := s.rc.SetWriteDeadline(time.Now().Add(s.idle)); err == nil {
			s.deadline = true
		}
	}
	s.start()
	if _, err := s.w.Write(p); err != nil {
		return err
	}
	if s.deadline {
		// The flush is what blocks on a client that does not read: its
		// error counts.
		return s.rc.Flush()
	}
	s.flusher.Flush()
	return nil
}

// noDeadline lifts the write deadline once the stream is over, so that it
// does not outlive the response on a kept-alive connection.
func (s *sseWriter) noDeadline() {
	if s.deadline {
		_ = s.rc.SetWriteDeadline(time.Time{})
	}
}

func (s *sseWriter) start() {
	if !s.started {
		startSSE(s.w)
		s.started = true
	}
}

// done ends a complete stream with [DONE].
func (s *sseWriter) done() { _ = s.write([]byte("data: [DONE]\n\n")) }

// fail ends the stream with fe: an error response before the first event,
// an error event after it.
func (s *sseWriter) fail(fe *faults.Error) {
	if !s.started {
		writeOpenAIError(s.w, fe)
		return
	}
	s.buf = append(s.buf[:0], "data: "...)
	s.buf = openaiwire.AppendError(s.buf, fe.Message, fe.Reason.OpenAIType(), fe.Param, string(fe.Reason))
	s.buf = append(s.buf, "\n\n"...)
	_ = s.write(s.buf)
}

func startSSE(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}
