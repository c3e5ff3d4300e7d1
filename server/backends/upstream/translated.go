package upstream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/sse"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
)

// translated is the state of a backend whose wire format is not OpenAI's
// (Options.Wire): the kind's translation, and the names of the request
// fields already logged as dropped.
type translated struct {
	wire    backends.Wire
	base    *url.URL
	log     *slog.Logger
	dropped sync.Map     // field name → struct{}: logged once per name
	names   atomic.Int64 // names stored in dropped, at most maxDroppedNames
}

// Bounds of the dropped-field notices: field names come from callers, so
// a backend remembers and logs at most maxDroppedNames of them (then one
// notice that more are not named), each cut to maxDroppedNameBytes.
const (
	maxDroppedNames     = 64
	maxDroppedNameBytes = 64
)

// wireCall is the per-call context a wire needs.
func (b *Backend) wireCall(ctx context.Context, model string) backends.WireCall {
	wc := backends.WireCall{Backend: b.name, Model: model, Created: time.Now().Unix()}
	if st := call.FromContext(ctx); st != nil {
		wc.RequestID = st.RequestID
	}
	return wc
}

// wireURL is the backend's URL with the request's path and query added.
func (t *translated) wireURL(r backends.WireRequest) string {
	u := *t.base
	if r.Path != "" {
		// The wire escaped the model in Path already: join the raw paths.
		raw := u.EscapedPath()
		if raw == "" || raw[len(raw)-1] != '/' {
			raw += "/"
		}
		raw += r.Path
		if p, err := url.PathUnescape(raw); err == nil {
			u.Path, u.RawPath = p, raw
		}
	}
	if r.Query != "" {
		if u.RawQuery != "" {
			u.RawQuery += "&"
		}
		u.RawQuery += r.Query
	}
	return u.String()
}

// noteDropped logs, once per field name for the backend's life, the
// request fields the wire format could not carry: names only, never
// values, at most maxDroppedNames of them (callers choose the names), each
// cut to maxDroppedNameBytes.
func (t *translated) noteDropped(backend string, names []string) {
	for _, n := range names {
		if len(n) > maxDroppedNameBytes {
			n = n[:maxDroppedNameBytes]
		}
		if _, seen := t.dropped.Load(n); seen {
			continue
		}
		switch c := t.names.Add(1); {
		case c <= maxDroppedNames:
			if _, seen := t.dropped.LoadOrStore(n, struct{}{}); !seen {
				t.log.Warn("request field dropped: the backend's wire format has no counterpart (logged once per field)",
					"backend", backend, "field", n)
			}
		case c == maxDroppedNames+1:
			t.log.Warn("request fields dropped: more field names than are logged; later ones are dropped without a notice",
				"backend", backend, "logged_names", maxDroppedNames)
		default:
			t.names.Store(maxDroppedNames + 2) // no wrap, however many calls
			return
		}
	}
}

// sendWire sends one translated request and waits for its headers; a
// non-2xx answer is mapped by the wire ([backends.Wire.DecodeError]),
// except a 401 or 403, the upstream refusing the gateway's credentials,
// which the shared path maps itself.
func (b *Backend) sendWire(ctx context.Context, r backends.WireRequest, accept string) (*exchange, error) {
	ex, err := b.send(ctx, b.wire.wireURL(r), r.Body, accept)
	if err == nil {
		return ex, nil
	}
	var fe *faults.Error
	if errors.As(err, &fe) && fe.Reason == faults.UpstreamStatus {
		mapped := b.wire.wire.DecodeError(fe.UpstreamHTTPStatus, fe.RetryAfterSeconds, fe.UpstreamBody)
		if mapped.Err == nil {
			mapped.Err = fe.Err
		}
		return nil, mapped
	}
	return nil, err
}

// translatedChat serves a non-streamed chat call through the wire.
func (b *Backend) translatedChat(ctx context.Context, req *flexwayv1.CreateChatCompletionRequest, served backends.Served) (*flexwayv1.ChatCompletion, error) {
	wc := b.wireCall(ctx, served.ModelSent)
	r, err := b.wire.wire.Chat(req, wc, false)
	return wirePost(ctx, b, r, err, func(data []byte) (*flexwayv1.ChatCompletion, error) { return b.wire.wire.DecodeChat(data, wc) }, "an unreadable answer")
}

// translatedEmbedding serves an embeddings call through the wire, when it
// serves embeddings.
func (b *Backend) translatedEmbedding(ctx context.Context, req *flexwayv1.CreateEmbeddingRequest, served backends.Served) (*flexwayv1.CreateEmbeddingResponse, error) {
	em, ok := b.wire.wire.(backends.WireEmbedder)
	if !ok {
		return nil, faults.New(faults.InvalidRequest, "backend %s serves no embeddings", b.name)
	}
	wc := b.wireCall(ctx, served.ModelSent)
	r, err := em.Embeddings(req, wc)
	return wirePost(ctx, b, r, err, func(data []byte) (*flexwayv1.CreateEmbeddingResponse, error) {
		return em.DecodeEmbeddings(data, req, wc)
	},
		"unreadable embeddings")
}

// wirePost sends r, a translated unary request whose translation failed
// when encErr is not nil, and decodes its 2xx answer with decode; what
// says, in the error's message, what an answer decode refuses is.
func wirePost[T any](ctx context.Context, b *Backend, r backends.WireRequest, encErr error, decode func([]byte) (T, error), what string) (T, error) {
	var zero T
	if encErr != nil {
		return zero, encodeError(encErr)
	}
	b.wire.noteDropped(b.name, r.Dropped)
	ex, err := b.sendWire(ctx, r, "application/json")
	if err != nil {
		return zero, err
	}
	defer ex.release()
	data, err := ex.readAll(maxAnswerBytes)
	if err != nil {
		return zero, err
	}
	resp, err := decode(data)
	if err != nil {
		return zero, ex.scrubErr(upstreamFault(b.name, err, what))
	}
	return resp, nil
}

// upstreamFault keeps a *faults.Error a wire returned and wraps anything
// else as the upstream's unreadable answer.
func upstreamFault(backend string, err error, what string) error {
	var fe *faults.Error
	if errors.As(err, &fe) {
		return fe
	}
	return faults.Wrap(faults.UpstreamError, err, "upstream "+backend+" answered "+what)
}

// translatedStream starts a streamed chat call through the wire.
func (b *Backend) translatedStream(ctx context.Context, req *flexwayv1.CreateChatCompletionRequest, served backends.Served) (backends.ChunkStream, error) {
	wc := b.wireCall(ctx, served.ModelSent)
	r, err := b.wire.wire.Chat(req, wc, true)
	if err != nil {
		return nil, encodeError(err)
	}
	b.wire.noteDropped(b.name, r.Dropped)
	ex, err := b.sendWire(ctx, r, "text/event-stream")
	if err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(ex.resp.Header.Get("Content-Type")); mt == "application/json" || mt == "text/html" {
		ex.release()
		return nil, faults.New(faults.UpstreamError, "upstream %s answered %s, not an event stream", b.name, mt)
	}
	return &wireStream{ex: ex, r: sse.NewReader(ex.body, sseBufferBytes), dec: b.wire.wire.NewChatStream(wc)}, nil
}

// wireStream reads a translated stream: Server-Sent Events through
// package sse, each decoded by the wire's [backends.WireStream].
type wireStream struct {
	ex     *exchange
	r      *sse.Reader
	dec    backends.WireStream
	err    error // sticky: io.EOF after the stream's end, else the failure
	closed atomic.Bool
}

// Recv returns the next chunk. It implements [backends.ChunkStream.Recv]:
// io.EOF once the wire says the stream is complete (or its last chunk was
// returned at the body's end); a *faults.Error otherwise, an
// UpstreamError for a stream cut before its end.
func (s *wireStream) Recv() (*flexwayv1.ChatCompletionChunk, error) {
	for {
		if s.err != nil {
			return nil, s.err
		}
		if s.closed.Load() {
			return nil, s.fail(faults.New(faults.Canceled, "the stream was closed"))
		}
		name, data, err := s.r.Next()
		if err != nil {
			return s.end(err)
		}
		ch, done, err := s.dec.Event(name, data)
		if err != nil {
			return nil, s.fail(s.ex.scrubErr(err))
		}
		if done {
			s.err = io.EOF
			s.ex.release()
		}
		if ch != nil {
			return ch, nil
		}
	}
}

// end maps the end of the body: the wire's last chunk or cut-stream error
// at a clean end, the read's failure otherwise.
func (s *wireStream) end(err error) (*flexwayv1.ChatCompletionChunk, error) {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		ch, err := s.dec.End()
		if err != nil {
			return nil, s.fail(err)
		}
		s.err = io.EOF
		s.ex.release()
		if ch != nil {
			return ch, nil
		}
		return nil, io.EOF
	}
	if errors.Is(err, sse.ErrEventTooLarge) {
		return nil, s.fail(faults.Wrap(faults.UpstreamError, backends.ErrRequestCaused,
			"upstream "+s.ex.b.name+" sent a stream event over 64 MiB; lower n or max_tokens"))
	}
	if s.closed.Load() && s.ex.parent.Err() == nil && errors.Is(context.Cause(s.ex.ctx), errStreamClosed) {
		return nil, s.fail(faults.Wrap(faults.Canceled, err, "the stream was closed"))
	}
	fe := s.ex.readError(err)
	if fe.Reason == faults.UpstreamError {
		fe.Message = "upstream " + s.ex.b.name + " cut its stream short"
	}
	return nil, s.fail(fe)
}

// Close releases the connection. It implements [backends.ChunkStream.Close].
func (s *wireStream) Close() error {
	if !s.closed.Swap(true) {
		s.ex.abort(errStreamClosed)
	}
	return nil
}

// fail records err as the stream's end and closes the connection.
func (s *wireStream) fail(err error) error {
	s.err = err
	s.ex.abort(errStreamClosed)
	return err
}

// CheckChat implements [backends.Checker]: a translated backend asks its
// wire (when the wire can refuse a request, [backends.Checker]); OpenAI's
// own format expresses every request.
func (b *Backend) CheckChat(req *flexwayv1.CreateChatCompletionRequest) error {
	if b.wire == nil {
		return nil
	}
	if c, ok := b.wire.wire.(backends.Checker); ok {
		return c.CheckChat(req)
	}
	return nil
}
