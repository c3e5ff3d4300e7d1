package transcoder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"strings"
	"time"

	"github.com/flexway/flexway/server/cache"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/bearer"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
	"github.com/flexway/flexway/server/requestid"
)

// front serves the HTTP surface; see [New].
type front struct {
	opts       Options
	chat       flexwayv1.ChatServiceClient
	embeddings flexwayv1.EmbeddingsServiceClient
	models     flexwayv1.ModelsServiceClient
	log        *slog.Logger
	forward    []string     // lower-case header names
	keyer      *cache.Keyer // the response cache's keys of chat bodies; nil: not keyed
	bodies     *inflight    // the bytes of the bodies being read
}

// New returns the HTTP front's handler. It is safe for concurrent use.
func New(opts Options) (http.Handler, error) {
	_, h, err := build(opts)
	return h, err
}

// build is [New], returning the front too.
func build(opts Options) (*front, http.Handler, error) {
	if opts.Conn == nil {
		return nil, nil, errors.New("transcoder: Options.Conn is required")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.BodyReadTimeout <= 0 {
		opts.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if opts.MaxInflightBodyBytes <= 0 {
		opts.MaxInflightBodyBytes = DefaultMaxInflightBodyBytes
	}
	opts.MaxInflightBodyBytes = max(opts.MaxInflightBodyBytes, opts.MaxBodyBytes)
	f := &front{
		opts:       opts,
		bodies:     &inflight{limit: opts.MaxInflightBodyBytes},
		chat:       flexwayv1.NewChatServiceClient(opts.Conn),
		embeddings: flexwayv1.NewEmbeddingsServiceClient(opts.Conn),
		models:     flexwayv1.NewModelsServiceClient(opts.Conn),
		log:        opts.Logger,
		forward:    []string{"authorization", "x-request-id"},
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	for _, h := range opts.ForwardHeaders {
		if h != "" {
			f.forward = append(f.forward, strings.ToLower(h))
		}
	}
	if opts.CacheKeyer != nil {
		f.keyer = opts.CacheKeyer
		f.forward = append(f.forward, "cache-control", "flexway-cache-similarity")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", f.chatCompletions)
	mux.HandleFunc("POST /v1/embeddings", f.createEmbedding)
	mux.HandleFunc("GET /v1/models", f.listModels)
	mux.HandleFunc("GET /v1/models/{model...}", f.retrieveModel)
	mux.HandleFunc("/v1/", f.v1NotFound)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.HandleFunc("GET /readyz", f.readyz)
	if opts.Fallback != nil {
		mux.Handle("/", opts.Fallback)
	} else {
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			WriteProblem(w, r, http.StatusNotFound, "no route for "+r.Method+" "+r.URL.Path)
		})
	}
	return f, withAccess(f.log, opts.BodyReadTimeout, opts.Observe, cleanPaths(mux)), nil
}

// cleanPaths answers a path that is not in canonical form (an empty
// segment, "." or "..") with 404 in the surface's format, where
// http.ServeMux would answer a redirect to the cleaned path in HTML: an
// empty tenant in /flexway/v1/tenants//usage names nothing.
func cleanPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		clean := path.Clean(p)
		if strings.HasSuffix(p, "/") && clean != "/" {
			clean += "/"
		}
		if p != "" && clean != p {
			if strings.HasPrefix(p, "/v1/") {
				writeOpenAIError(w, faults.New(faults.NotFound, "unknown path %s %s", r.Method, p))
				return
			}
			writeFaultProblem(w, r, faults.New(faults.NotFound, "no route for %s %s: the path has an empty, . or .. segment", r.Method, p))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (f *front) readyz(w http.ResponseWriter, r *http.Request) {
	if f.opts.Ready != nil {
		if err := f.opts.Ready(); err != nil {
			WriteProblem(w, r, http.StatusServiceUnavailable, err.Error())
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"status":"ready"}`+"\n")
}

// v1NotFound answers /v1/* paths and methods that do not exist, in OpenAI's
// envelope.
func (f *front) v1NotFound(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/chat/completions", "/v1/embeddings", "/v1/models":
		w.Header().Set("Allow", map[string]string{"/v1/models": "GET"}[r.URL.Path]+map[bool]string{true: "POST"}[r.URL.Path != "/v1/models"])
		fe := faults.New(faults.InvalidRequest, "method %s is not allowed on %s", r.Method, r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusMethodNotAllowed)
		_, _ = w.Write(openaiErrorBody(fe))
		return
	}
	writeOpenAIError(w, faults.New(faults.NotFound, "unknown path %s %s", r.Method, r.URL.Path))
}

// outgoing returns ctx carrying the forwarded request headers as gRPC
// metadata, marked as a call of the HTTP listener ([call.WithListener]:
// a context value, never a header a client could send), for
// ai.policies' match.listener.
func (f *front) outgoing(r *http.Request) context.Context {
	md := metadata.MD{}
	for _, h := range f.forward {
		if v := r.Header.Values(h); len(v) > 0 {
			md[h] = v
		}
	}
	return metadata.NewOutgoingContext(call.WithListener(r.Context(), config.ListenerHTTP), md)
}

// readBody reads the request body up to the limit; a larger body is
// refused as soon as it is known to be larger, never buffered whole. The
// body's bytes are held in the front's inflight bound (see
// [Options.MaxInflightBodyBytes]) until release is called, once the body
// is parsed; release is never nil and may be called more than once.
func (f *front) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), fe *faults.Error) {
	var held int64
	release = func() {
		f.bodies.give(held)
		held = 0
	}
	limit := f.opts.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, release, f.tooLarge()
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil, release, faults.New(faults.InvalidRequest, "Content-Encoding %q is not supported: send the body uncompressed", ce)
	}
	// A declared length is reserved whole before a byte is read; a
	// chunked body reserves each buffer before reading into it.
	take := func(n int64) bool {
		if !f.bodies.take(n) {
			return false
		}
		held += n
		return true
	}
	if r.ContentLength > 0 && !take(r.ContentLength) {
		closeUnread(w, r)
		return nil, release, f.bodies.busy()
	}
	// The body's read deadline was set by withAccess; it is lifted once
	// the whole body is in (streamed answers have none). After a failed
	// read the body is closed, so that the server closes the connection
	// instead of waiting for the rest of the body.
	// MaxBytesReader tells the server's own writer to close the
	// connection after a too-large body; it needs it unwrapped.
	mw := w
	if rec, ok := w.(*recorder); ok {
		mw = rec.ResponseWriter
	}
	var grow func(int64) bool
	if r.ContentLength < 0 {
		grow = take
	}
	body, err := readAll(http.MaxBytesReader(mw, r.Body, limit), r.ContentLength, grow)
	if err == nil {
		if rec, ok := w.(*recorder); ok {
			rec.bodyDone()
		}
	} else {
		_ = r.Body.Close()
		release()
	}
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.Is(err, errBusy):
			w.Header().Set("Connection", "close")
			return nil, release, f.bodies.busy()
		case errors.As(err, &mbe):
			return nil, release, f.tooLarge()
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, release, faults.Wrap(faults.InvalidRequest, err, fmt.Sprintf("the request body did not arrive within %s", f.opts.BodyReadTimeout))
		}
		return nil, release, faults.Wrap(faults.InvalidRequest, err, "could not read the request body")
	}
	return body, release, nil
}

// busyDrainTimeout bounds how long a body refused unread by the inflight
// bound is read and discarded after the refusal (see [front.writeBodyError]).
const busyDrainTimeout = 5 * time.Second

// writeBodyError answers fe, the refusal readBody gave. A body refused
// unread because it did not fit the inflight bound (503 with Retry-After)
// is then read and discarded, up to MaxBodyBytes and for at most
// busyDrainTimeout, into no buffer of its own: most clients (Python's
// http.client, the OpenAI SDKs) send the whole body before they read the
// answer, and a connection closed under their upload reaches them as a
// reset instead of the 503 and its Retry-After. The connection is closed
// after it (readBody set Connection: close).
func (f *front) writeBodyError(w http.ResponseWriter, r *http.Request, fe *faults.Error) {
	drain := fe.Reason == faults.Unavailable && r.ContentLength > 0
	rc := http.NewResponseController(w)
	if drain {
		// Reading the body after the answer is written needs full
		// duplex: net/http would otherwise close the body at the first
		// write.
		drain = rc.EnableFullDuplex() == nil
	}
	writeOpenAIError(w, fe)
	if !drain {
		return
	}
	_ = rc.Flush()
	_ = rc.SetReadDeadline(time.Now().Add(busyDrainTimeout))
	_, _ = io.CopyN(io.Discard, r.Body, min(r.ContentLength, f.opts.MaxBodyBytes))
}

// errBusy ends the reading of a chunked body whose next buffer does not
// fit in the inflight bound.
var errBusy = errors.New("transcoder: the inflight body bound is full")

// readChunk is the largest unit a body of unknown length is read in.
const readChunk = 256 << 10

// readAll reads r to its end. With a known length (n > 0) it reads into
// one buffer of that size; otherwise into chunks (4 KiB doubling up to
// readChunk) joined once at the end, so that memory stays within twice the body (and within
// the limit r enforces for a body refused half way), not the sum of a
// doubling buffer's copies. grow, when not nil, is asked for each chunk's
// size before it is allocated, and for the joined copy; false ends the
// read with errBusy.
func readAll(r io.Reader, n int64, grow func(int64) bool) ([]byte, error) {
	if n > 0 {
		var buf bytes.Buffer
		buf.Grow(int(n) + bytes.MinRead)
		_, err := buf.ReadFrom(r)
		return buf.Bytes(), err
	}
	if grow == nil {
		grow = func(int64) bool { return true }
	}
	var chunks [][]byte
	total, size := 0, 4096
	for {
		if !grow(int64(size)) {
			return nil, errBusy
		}
		c := make([]byte, size)
		size = min(2*size, readChunk)
		m, err := io.ReadFull(r, c)
		if m > 0 {
			chunks = append(chunks, c[:m])
			total += m
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if len(chunks) == 1 {
		return chunks[0], nil
	}
	if !grow(int64(total)) {
		return nil, errBusy
	}
	out := make([]byte, 0, total)
	for _, c := range chunks {
		out = append(out, c...)
	}
	return out, nil
}

func (f *front) tooLarge() *faults.Error {
	return faults.New(faults.RequestTooLarge, "request body is larger than %d bytes", f.opts.MaxBodyBytes)
}

// authorized refuses a request without a bearer key ([bearer.Token])
// before its body is read, and closes the connection after the answer
// ([closeUnread]) so that the refused body is not read either; the key
// itself is checked by the identity interceptor.
func authorized(w http.ResponseWriter, r *http.Request) bool {
	if _, ok := bearer.Token(r.Header.Get("Authorization")); !ok {
		closeUnread(w, r)
		writeOpenAIError(w, faults.New(faults.InvalidAPIKey, "missing API key: send Authorization: Bearer <key>"))
		return false
	}
	return true
}

// admit returns the context of the call of operation to the core, after
// asking Options.Admit, if any, whether the request may be read; on refusal
// it has written the error and returns nil.
func (f *front) admit(w http.ResponseWriter, r *http.Request, operation string) context.Context {
	ctx := f.outgoing(r)
	if f.opts.Admit == nil {
		return ctx
	}
	ctx, err := f.opts.Admit(ctx, operation)
	if err != nil {
		closeUnread(w, r)
		f.fail(w, r, err)
		return nil
	}
	return ctx
}

// closeUnread marks the answer to a request whose body was not read as the
// connection's last: net/http then answers at once instead of first
// reading (up to 256 KiB of) a body nobody will use, which a caller that
// sends slowly would make wait.
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
}

// copyHeaders writes the core's flexway-* and x-ratelimit-* (a per-minute
// cap's, OpenAI's names) response metadata as HTTP headers (X-Request-Id is
// set by the front itself, see [withAccess]).
func copyHeaders(w http.ResponseWriter, md metadata.MD) {
	for k, vs := range md {
		if strings.HasPrefix(k, "flexway-") || strings.HasPrefix(k, "x-ratelimit-") {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
	}
}

// readRequest checks that r carries a key, asks for admission, reads the
// body and parses it with parse: the steps of every /v1/* call with a
// body, in that order, so that nothing is read for a caller without a key
// or over the inflight bound; operation (ai.chatCompletions, ai.embeddings)
// is the call's, for the admission. It returns the context of the call to
// the core and the request; on failure it has written the error and ok is
// false.
func readRequest[T any](f *front, w http.ResponseWriter, r *http.Request, operation string, parse func([]byte) (T, error)) (ctx context.Context, req T, ok bool) {
	if !authorized(w, r) {
		return nil, req, false
	}
	if ctx = f.admit(w, r, operation); ctx == nil {
		return nil, req, false
	}
	body, release, fe := f.readBody(w, r)
	if fe != nil {
		f.writeBodyError(w, r, fe)
		return nil, req, false
	}
	req, err := parse(body)
	if err == nil && f.keyer != nil && operation == config.OperationChatCompletions {
		// the response cache's key, from the body as sent (one hash of
		// it when sent before byte for byte), before the buffer goes
		if ks, kerr := f.keyer.Keys(body, false); kerr == nil {
			ctx = call.WithCacheKey(ctx, ks.Exact)
		}
	}
	release()
	if err != nil {
		writeOpenAIError(w, faults.As(err))
		return nil, req, false
	}
	return ctx, req, true
}

func (f *front) chatCompletions(w http.ResponseWriter, r *http.Request) {
	ctx, req, ok := readRequest(f, w, r, config.OperationChatCompletions, openaiwire.ParseChatCompletionRequest)
	if !ok {
		return
	}
	if req.GetStream() {
		f.streamChat(ctx, w, r, req)
		return
	}
	var header, trailer metadata.MD
	resp, err := f.chat.CreateChatCompletion(ctx, req, grpc.Header(&header), grpc.Trailer(&trailer))
	copyHeaders(w, header)
	if err != nil {
		f.fail(w, r, err)
		return
	}
	writeJSONBody(w, http.StatusOK, append(openaiwire.AppendChatCompletion(make([]byte, 0, 1024), resp), '\n'))
}

func (f *front) createEmbedding(w http.ResponseWriter, r *http.Request) {
	ctx, req, ok := readRequest(f, w, r, config.OperationEmbeddings, openaiwire.ParseEmbeddingRequest)
	if !ok {
		return
	}
	var header metadata.MD
	resp, err := f.embeddings.CreateEmbedding(ctx, req, grpc.Header(&header))
	copyHeaders(w, header)
	if err != nil {
		f.fail(w, r, err)
		return
	}
	writeJSONBody(w, http.StatusOK, append(openaiwire.AppendEmbeddingResponse(nil, resp), '\n'))
}

// modelList asks the core for the caller's models; on failure it has
// written the error and returns nil.
func (f *front) modelList(w http.ResponseWriter, r *http.Request) *flexwayv1.ListModelsResponse {
	if !authorized(w, r) {
		return nil
	}
	var header metadata.MD
	resp, err := f.models.ListModels(f.outgoing(r), &flexwayv1.ListModelsRequest{}, grpc.Header(&header))
	copyHeaders(w, header)
	if err != nil {
		f.fail(w, r, err)
		return nil
	}
	return resp
}

// retrieveModel answers GET /v1/models/{model}: the entry of the list the
// caller can be served, or 404.
func (f *front) retrieveModel(w http.ResponseWriter, r *http.Request) {
	resp := f.modelList(w, r)
	if resp == nil {
		return
	}
	id := r.PathValue("model")
	for _, m := range resp.GetData() {
		if m.GetId() == id {
			writeJSONBody(w, http.StatusOK, append(openaiwire.AppendModel(nil, m), '\n'))
			return
		}
	}
	fe := faults.New(faults.NotFound, "The model %q does not exist or you do not have access to it.", id)
	fe.Param = "model"
	writeOpenAIError(w, fe)
}

// listModels answers GET /v1/models.
func (f *front) listModels(w http.ResponseWriter, r *http.Request) {
	if resp := f.modelList(w, r); resp != nil {
		writeJSONBody(w, http.StatusOK, append(openaiwire.AppendModelList(nil, resp), '\n'))
	}
}

// fail writes the error of a core call in OpenAI's envelope.
func (f *front) fail(w http.ResponseWriter, r *http.Request, err error) {
	fe := toFault(err)
	f.logFailure(r, fe, false)
	writeOpenAIError(w, fe)
}

// logFailure logs a failed call whose status is 5xx, or any failure after
// a stream started (the access line then says 200): request id, path,
// reason, status and the cause, which never holds a prompt or a secret.
func (f *front) logFailure(r *http.Request, fe *faults.Error, streamStarted bool) {
	if fe.HTTPStatus() < 500 && !streamStarted {
		return
	}
	attrs := []any{"request_id", r.Header.Get(requestid.Header), "path", logPath(r), "reason", string(fe.Reason), "status", fe.HTTPStatus()}
	if streamStarted {
		attrs = append(attrs, "stream_started", true)
	}
	if fe.Err != nil {
		attrs = append(attrs, "cause", fe.Err.Error())
	}
	f.log.WarnContext(r.Context(), "request failed", attrs...)
}
