package transcoder

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/flexway/flexway/server/requestid"
)

// unreadBodyGrace is how long the server may still read a request body
// that the handler did not read (it reads up to 256 KiB of it before
// replying, to keep the connection): a stalled sender cannot hold the reply
// longer.
const unreadBodyGrace = time.Second

// withAccess gives every request a request id (the caller's x-request-id
// when [requestid.Valid], else a new one, set on the request so that it is
// passed to the core for its logs and audit lines), sets it on the response,
// bounds the time its body may take to arrive, and logs one line per
// request when it ends: method, escaped path (at most 256 bytes), status,
// bytes written, duration and request id — never a header value, a query
// or a body. observe, when not nil, gets the same request's status and
// duration.
//
// A request with a body gets a read deadline of bodyTimeout. readBody lifts
// it once the whole body is in (a streamed answer then has none); when a
// handler answers without reading the body (401, 404, 405), the deadline is
// cut to unreadBodyGrace before the first byte of the answer, so that a
// stalled body can neither hold the answer nor the connection.
func withAccess(log *slog.Logger, bodyTimeout time.Duration, observe func(*http.Request, int, time.Duration), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get(requestid.Header)
		if !requestid.Valid(id) {
			id = requestid.New()
			r.Header.Set(requestid.Header, id)
		}
		w.Header().Set(requestid.Header, id)
		closeAfterSmuggling(w, r)
		rec := &recorder{ResponseWriter: w, rc: http.NewResponseController(w), hasBody: r.ContentLength != 0}
		if rec.hasBody {
			_ = rec.rc.SetReadDeadline(start.Add(bodyTimeout))
		}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		took := time.Since(start)
		if rec.complete() {
			// The whole answer is in the buffer (its Content-Length is
			// written): send it before logging and measuring, which the
			// caller need not wait for.
			rec.Flush()
		}
		if observe != nil {
			observe(r, rec.status, took)
		}
		level := slog.LevelInfo
		if rec.status >= 500 {
			level = slog.LevelWarn
		}
		log.LogAttrs(r.Context(), level, "http request",
			slog.String("request_id", id),
			slog.String("method", r.Method),
			slog.String("path", logPath(r)),
			slog.Int("status", rec.status),
			slog.Int64("bytes", rec.bytes),
			slog.Float64("duration_ms", float64(took.Microseconds())/1000),
		)
	})
}

// logPath is the request's escaped path, cut to 256 bytes.
func logPath(r *http.Request) string {
	p := r.URL.EscapedPath()
	if len(p) > 256 {
		p = p[:256] + "…"
	}
	return p
}

// recorder notes the status and size of a response and whether the
// request body was read. It keeps http.Flusher and, through Unwrap,
// http.ResponseController working.
type recorder struct {
	http.ResponseWriter
	rc       *http.ResponseController
	hasBody  bool // the request has a body (or may: chunked)
	bodyRead bool // readBody read all of it
	status   int
	bytes    int64
}

// bodyDone records that the whole body was read and lifts its deadline.
func (r *recorder) bodyDone() {
	r.bodyRead = true
	_ = r.rc.SetReadDeadline(time.Time{})
}

// answering runs before the first byte of the answer.
func (r *recorder) answering() {
	if r.hasBody && !r.bodyRead {
		_ = r.rc.SetReadDeadline(time.Now().Add(unreadBodyGrace))
	}
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
		r.answering()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
		r.answering()
	}
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

// complete reports whether the answer declared a Content-Length and wrote
// that many bytes: nothing more will be written, so flushing it now sends
// it as net/http would at the handler's return.
func (r *recorder) complete() bool {
	n, err := strconv.ParseInt(r.ResponseWriter.Header().Get("Content-Length"), 10, 64)
	return err == nil && n == r.bytes
}

// Flush implements http.Flusher.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
