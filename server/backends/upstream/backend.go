package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/credentials"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// Body limits.
const (
	// maxAnswerBytes bounds a non-streamed answer body and one SSE event.
	maxAnswerBytes = 64 << 20
	// maxStatusBodyBytes bounds the upstream 4xx body kept for relay.
	maxStatusBodyBytes = 1 << 20
)

// Backend is a `kind: openai` or `kind: relay` backend. It implements [backends.Backend] and
// is safe for concurrent use; all calls share one connection pool.
type Backend struct {
	name          string
	chatURL       string
	embeddingsURL string
	models        map[string]struct{} // nil: every model is sent as is
	defaultModel  string
	timeout       time.Duration
	idleTimeout   time.Duration
	userAgent     string

	// auth is the credential of a backend with Options.Auth; pool and
	// keys (at the pool's indices) replace it for Options.Credentials.
	auth    credential
	pool    *credentials.Pool
	keys    []credential
	keyUsed func(credential, outcome string)

	// identity holds the canonical identity header names of a relay;
	// zero for an openai backend.
	identity IdentityHeaders
	// meteredBy is MeteredLocal or MeteredUpstream.
	meteredBy string

	// header holds Options.Header, sent with every request.
	header http.Header
	// wire is set for a backend whose wire format is translated
	// (Options.Wire); nil for OpenAI's own.
	wire *translated

	client    *http.Client
	transport *http.Transport // nil when Options.Transport was given
}

var _ backends.Backend = (*Backend)(nil)

// Name returns the backend's key in ai.backends. It implements
// [backends.Backend.Name].
func (b *Backend) Name() string { return b.name }

// MeteredBy returns who meters and bills the backend's calls:
// [MeteredLocal] or [MeteredUpstream] (Options.MeteredBy), the value of
// the metered_by label of audit lines and metric series.
func (b *Backend) MeteredBy() string { return b.meteredBy }

// CloseIdleConnections closes the pool's idle connections, for a backend
// being replaced by a configuration reload; calls in flight are not
// affected and the backend stays usable.
func (b *Backend) CloseIdleConnections() { b.client.CloseIdleConnections() }

// served returns who serves a call asking for model requested: the model
// ctx names ([backends.WithModel], an alias target's) as is, else
// requested mapped by the backend's models and default_model.
func (b *Backend) served(ctx context.Context, requested string) backends.Served {
	if m, ok := backends.ModelFrom(ctx); ok {
		return backends.Served{Backend: b.name, ModelSent: m}
	}
	s := backends.Served{Backend: b.name, ModelSent: requested}
	if b.models == nil {
		if requested == "" {
			s.ModelSent = b.defaultModel
		}
		return s
	}
	if _, ok := b.models[requested]; !ok {
		s.ModelSent = b.defaultModel
	}
	return s
}

// CreateChatCompletion sends req with stream off to <url>/chat/completions
// and returns the upstream's completion. It implements
// [backends.Backend.CreateChatCompletion]: Served is filled on errors too,
// and errors are as the package doc lists them. The answer body is read up
// to 64 MiB.
func (b *Backend) CreateChatCompletion(ctx context.Context, req *flexwayv1.CreateChatCompletionRequest) (*flexwayv1.ChatCompletion, backends.Served, error) {
	served := b.served(ctx, req.GetModel())
	if b.wire != nil {
		resp, err := b.translatedChat(ctx, req, served)
		return resp, served, err
	}
	body, err := openaiwire.AppendChatCompletionRequest(nil, req, openaiwire.Upstream{Model: served.ModelSent})
	resp, err := postJSON(ctx, b, b.chatURL, body, err, "choices", openaiwire.ParseChatCompletion, "an unreadable completion")
	return resp, served, err
}

// CreateEmbedding sends req to <url>/embeddings and returns the upstream's
// embeddings. It implements [backends.Backend.CreateEmbedding], as
// [Backend.CreateChatCompletion] does for a completion.
func (b *Backend) CreateEmbedding(ctx context.Context, req *flexwayv1.CreateEmbeddingRequest) (*flexwayv1.CreateEmbeddingResponse, backends.Served, error) {
	served := b.served(ctx, req.GetModel())
	if b.wire != nil {
		resp, err := b.translatedEmbedding(ctx, req, served)
		return resp, served, err
	}
	body, err := openaiwire.AppendEmbeddingRequest(nil, req, served.ModelSent)
	resp, err := postJSON(ctx, b, b.embeddingsURL, body, err, "data", openaiwire.ParseEmbeddingResponse, "unreadable embeddings")
	return resp, served, err
}

// postJSON posts body, whose encoding failed when encErr is not nil, to
// url ([Backend.post], result naming the answer's result member) and parses
// the answer with parse; unreadable says what an answer parse refuses is,
// in the error's message.
func postJSON[T any](ctx context.Context, b *Backend, url string, body []byte, encErr error, result string, parse func([]byte) (T, error), unreadable string) (T, error) {
	var zero T
	if encErr != nil {
		return zero, encodeError(encErr)
	}
	data, err := b.post(ctx, url, body, result)
	if err != nil {
		return zero, err
	}
	resp, err := parse(data)
	if err != nil {
		return zero, faults.Wrap(faults.UpstreamError, err, "upstream "+b.name+" answered "+unreadable)
	}
	return resp, nil
}

// post sends a non-streamed request and returns the 2xx answer's body. An
// answer that is an OpenAI error object (a non-null top-level "error")
// without its result member (choices, data) is an upstream error, never
// an empty result: some upstreams report failures with a 200. An event
// stream (declared text/event-stream, or a body of SSE fields) is an
// upstream error wrapping [backends.ErrRequestCaused]: the call asked for
// JSON, and only a field of its own request can have asked the upstream
// to stream; its connection is closed rather than read.
func (b *Backend) post(ctx context.Context, url string, body []byte, result string) ([]byte, error) {
	ex, err := b.send(ctx, url, body, "application/json")
	if err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(ex.resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		ex.abort(errReleased)
		return nil, b.unaskedStream()
	}
	defer ex.release()
	data, err := ex.readAll(maxAnswerBytes)
	if err != nil {
		return nil, err
	}
	if isErrorAnswer(data, result) {
		return nil, faults.Wrap(faults.UpstreamError, errorObjectCause("error object", data),
			fmt.Sprintf("upstream %s answered %d with an error object", b.name, ex.resp.StatusCode))
	}
	if looksLikeEventStream(data) {
		return nil, b.unaskedStream()
	}
	return data, nil
}

// unaskedStream is the error of an event stream answered to a unary call.
func (b *Backend) unaskedStream() *faults.Error {
	return faults.Wrap(faults.UpstreamError, backends.ErrRequestCaused,
		"upstream "+b.name+" answered an event stream to a call that asked for JSON; a field of the request may have asked it to stream")
}

// looksLikeEventStream reports whether a body that should be JSON starts
// with an SSE field instead ("data:", "event:", "id:" or a ":" comment),
// whatever its Content-Type said.
func looksLikeEventStream(data []byte) bool {
	data = bytes.TrimLeft(data, " \t\r\n")
	for _, p := range [][]byte{dataField, eventField, []byte("id")} {
		if rest, ok := bytes.CutPrefix(data, p); ok && len(rest) > 0 && rest[0] == ':' {
			return true
		}
	}
	return len(data) > 0 && data[0] == ':'
}

// encodeError maps a request encoding failure: a *faults.Error is kept,
// anything else is a bug.
func encodeError(err error) error {
	var fe *faults.Error
	if errors.As(err, &fe) {
		return fe
	}
	return faults.Wrap(faults.Internal, err, "internal error")
}

// Causes of a request context's cancellation, told apart by
// context.Cause.
var (
	errHeaderTimeout = errors.New("upstream backend: timeout awaiting response headers")
	errIdleTimeout   = errors.New("upstream backend: idle timeout reading the answer")
	errDrainTimeout  = errors.New("upstream backend: timeout draining the answer")
	errReleased      = errors.New("upstream backend: exchange released")
)

// exchange is one upstream request whose response headers arrived.
type exchange struct {
	b      *Backend
	parent context.Context // the caller's
	ctx    context.Context // the request's, canceled with a cause
	cancel context.CancelCauseFunc
	resp   *http.Response
	idle   *time.Timer // armed while a body read waits
	body   io.Reader   // decoded body, reads bounded by idle
	// secret is the credential sent (its value, without "Bearer "),
	// scrubbed from whatever of the answer reaches the caller.
	secret string

	releaseOnce sync.Once
}

// send builds and sends a POST of body to url and waits for the response
// headers. A 2xx answer is returned as an exchange whose body the caller
// reads and then releases; any other status is turned into its error here.
// A backend with a pool of credentials picks the call's key and moves to
// the next one on a 429, 401, 402 or 403 ([Backend.sendPooled]).
func (b *Backend) send(ctx context.Context, url string, body []byte, accept string) (*exchange, error) {
	if b.pool != nil {
		return b.sendPooled(ctx, url, body, accept)
	}
	ex, _, err := b.sendWith(ctx, url, body, accept, b.auth, false)
	return ex, err
}

// sendWith is one attempt of send with credential c. With pooled set, an
// answer whose status a pool handles (429, 401, 402, 403: see
// [Backend.poolStatus]) is released and returned as its status alone,
// with no exchange and no error.
func (b *Backend) sendWith(ctx context.Context, url string, body []byte, accept string, c credential, pooled bool) (*exchange, *http.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, contextError(ctx)
	}
	authName, authValue, err := c.header(b.name)
	if err != nil {
		return nil, nil, err
	}
	reqCtx, cancel := context.WithCancelCause(ctx)
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		cancel(errReleased)
		return nil, nil, faults.Wrap(faults.Internal, redactURLError(err), "internal error")
	}
	// Built from scratch: nothing of the caller's request reaches the
	// upstream but the body.
	req.Header = http.Header{
		"Content-Type": {"application/json"},
		"Accept":       {accept},
		"User-Agent":   {b.userAgent},
	}
	for k, v := range b.header {
		req.Header[k] = v
	}
	if authName != "" {
		req.Header[authName] = []string{authValue}
	}
	b.setIdentity(ctx, req.Header)
	// W3C trace context of Flexway's own span (none without tracing).
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	headerTimer := time.AfterFunc(b.timeout, func() { cancel(errHeaderTimeout) })
	resp, err := b.client.Do(req)
	headerTimer.Stop()
	if err != nil {
		fe := b.failure(ctx, reqCtx, err, "upstream "+b.name+" is unreachable")
		cancel(errReleased)
		return nil, nil, fe
	}
	ex := &exchange{b: b, parent: ctx, ctx: reqCtx, cancel: cancel, resp: resp, secret: strings.TrimPrefix(authValue, "Bearer ")}
	ex.idle = time.AfterFunc(time.Hour, func() { cancel(errIdleTimeout) })
	ex.idle.Stop()
	var idle io.Reader = &idleReader{r: resp.Body, timer: ex.idle, d: b.idleTimeout}
	ex.body, err = decodedBody(resp, idle)
	if pooled && b.poolStatus(resp.StatusCode) {
		ex.release()
		return nil, resp, nil
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fe := ex.scrub(ex.statusError(err))
		ex.release()
		return nil, nil, fe
	}
	if err != nil {
		ex.release()
		return nil, nil, faults.Wrap(faults.UpstreamError, err, "upstream "+b.name+" answered an unreadable body")
	}
	return ex, resp, nil
}

// setIdentity adds, for a relay, the call's identity under the declared
// header names, from the call state: never from the caller's headers.
func (b *Backend) setIdentity(ctx context.Context, h http.Header) {
	if b.identity.isZero() {
		return
	}
	st := call.FromContext(ctx)
	if st == nil {
		return
	}
	// Values from an API key or a relay's headers: a value that could
	// not be sent as a header is left out rather than mangled.
	set := func(name, v string) {
		if name != "" && v != "" && validHeaderValue(v) {
			h[name] = []string{v}
		}
	}
	set(b.identity.Tenant, st.Tenant)
	set(b.identity.Agent, st.Agent)
	if st.Sensitive {
		set(b.identity.Sensitive, "true")
	}
}

// readAll reads the whole answer body, up to limit bytes.
func (ex *exchange) readAll(limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if n := ex.resp.ContentLength; n > 0 && n <= limit {
		buf.Grow(int(n))
	}
	n, err := buf.ReadFrom(io.LimitReader(ex.body, limit+1))
	if err != nil {
		return nil, ex.readError(err)
	}
	if n > limit {
		// The call's own n and max_tokens explain an answer this large.
		return nil, faults.Wrap(faults.UpstreamError, backends.ErrRequestCaused,
			fmt.Sprintf("upstream %s answered more than %d MiB; lower n or max_tokens", ex.b.name, limit>>20))
	}
	return buf.Bytes(), nil
}

// release ends the exchange: the body is drained briefly so that the
// connection can be reused, then closed, and the request context is
// released. It is safe to call more than once and concurrently with a
// body read (which then fails).
func (ex *exchange) release() {
	ex.releaseOnce.Do(func() {
		ex.drain()
		ex.resp.Body.Close()
		ex.idle.Stop()
		ex.cancel(errReleased)
	})
}

// abort ends the exchange without draining: the request is canceled (the
// connection is closed) and the body released.
func (ex *exchange) abort(cause error) {
	ex.releaseOnce.Do(func() {
		ex.cancel(cause)
		ex.resp.Body.Close()
		ex.idle.Stop()
	})
}

// Draining bounds: what is left of an answer is read, for the connection
// to go back to the pool, only if it is short and comes at once; else the
// connection is closed.
const (
	drainBytes   = 64 << 10
	drainTimeout = 250 * time.Millisecond
)

// drain reads what is left of the raw body, within drainBytes and
// drainTimeout.
func (ex *exchange) drain() {
	if ex.ctx.Err() != nil {
		return
	}
	t := time.AfterFunc(drainTimeout, func() { ex.cancel(errDrainTimeout) })
	defer t.Stop()
	_, _ = io.CopyN(io.Discard, ex.resp.Body, drainBytes)
}

// userAgent is "flexway/<version>": the main module's version, or "dev".
func userAgent() string {
	v := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok && strings.HasPrefix(bi.Main.Version, "v") && validHeaderValue(bi.Main.Version) {
		v = strings.TrimPrefix(bi.Main.Version, "v")
	}
	return "flexway/" + v
}
