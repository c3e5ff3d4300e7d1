package main

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

const (
	// modelFail503 is the model name that always answers 503.
	modelFail503 = "sample-fail-503"
	// modelSlow is the model name that waits [slowDelay] before answering.
	modelSlow = "sample-slow"
	// slowDelay is how long [modelSlow] waits before writing any header.
	slowDelay = 500 * time.Millisecond

	// headerStatus names the request header that forces an error status.
	headerStatus = "X-Sample-Status"
	// headerDelay names the request header that delays the response.
	headerDelay = "X-Sample-Delay"

	// maxChunks bounds --chunks.
	maxChunks = 10000
	// modelCreated is the fixed "created" time reported for every model
	// (2025-01-01T00:00:00Z), so that model listings are deterministic.
	modelCreated = 1735689600
)

// options configures the handler built by [newHandler]. The zero value is
// not usable; start from [defaultOptions].
type options struct {
	// name is the owner reported by GET /v1/models. Required.
	name string
	// models are the model names served; the first is the fallback for
	// unknown names. Required, at least one.
	models []string
	// chunkDelay is the pause before each streamed content chunk. Optional.
	chunkDelay time.Duration
	// chunks is the number of content chunks a streamed answer is split
	// into. Required, at least 1.
	chunks int
	// requireBearer, when not empty, is the token every request must carry
	// as "Authorization: Bearer <token>". Optional.
	requireBearer string
	// wire is the format served: [wireOpenAI] (the default when empty),
	// [wireAnthropic], [wireGemini] or [wireA2A].
	wire string
	// requireKey, when not empty, is the API key every Anthropic request
	// must carry as "x-api-key" and every Gemini request as
	// "x-goog-api-key" (or ?key=). Optional.
	requireKey string
	// rateLimitKey, when not empty, is an API key answered 429 with
	// Retry-After: rateLimitRetryAfter seconds on every request that bears
	// it (see [presentedKey]), whatever the wire. Optional.
	rateLimitKey string
	// rateLimitRetryAfter is the Retry-After, in seconds, of a
	// rateLimitKey's 429; at least 1.
	rateLimitRetryAfter int
	// logger receives one line per request. Optional; nil discards.
	logger *slog.Logger
}

// defaultOptions returns the options the command uses when no flag is given.
func defaultOptions() options {
	return options{
		name:       "sample",
		models:     []string{"sample-small", "sample-large", wordsModel},
		chunkDelay: 30 * time.Millisecond,
		chunks:     8,
	}
}

// handler serves the sample OpenAI API. It is safe for concurrent use.
type handler struct {
	opts options
	// seq numbers chat completions for their ids.
	seq atomic.Uint64
}

// newHandler returns the sample server's HTTP handler: request logging, the
// optional bearer check, the header test hooks, then the /v1 routes. Missing
// options fall back to [defaultOptions].
func newHandler(opts options) http.Handler {
	def := defaultOptions()
	if opts.name == "" {
		opts.name = def.name
	}
	if opts.wire == "" {
		opts.wire = wireOpenAI
	}
	if len(opts.models) == 0 {
		opts.models = defaultModels(opts.wire)
	}
	if opts.chunks < 1 {
		opts.chunks = 1
	}
	if opts.logger == nil {
		opts.logger = slog.New(slog.DiscardHandler)
	}
	return &handler{opts: opts}
}

// ServeHTTP implements [http.Handler].
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		h.opts.logger.LogAttrs(r.Context(), slog.LevelInfo, "request",
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", status),
			slog.Duration("duration", time.Since(start)))
	}()
	if h.rateLimited(rec, r) {
		return
	}
	switch h.opts.wire {
	case wireAnthropic:
		h.serveAnthropic(rec, r)
	case wireGemini:
		h.serveGemini(rec, r)
	case wireA2A:
		h.serveA2A(rec, r)
	default:
		h.serve(rec, r)
	}
}

// serve runs the bearer check and the header hooks, then routes.
func (h *handler) serve(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="flexway-sample"`)
		writeError(w, http.StatusUnauthorized, "Incorrect or missing API key: send \"Authorization: Bearer <token>\" with the token given to --require-bearer.", "", "invalid_api_key")
		return
	}
	if !headerHooks(r, func(status int, message, code string) { writeError(w, status, message, "", code) }) {
		return
	}
	h.route(w, r)
}

// headerHooks applies the X-Sample-Delay and X-Sample-Status test hooks,
// writing their errors with fail, and reports whether the caller should go
// on serving.
func headerHooks(r *http.Request, fail failFunc) bool {
	if v := r.Header.Get(headerDelay); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			fail(http.StatusBadRequest, fmt.Sprintf("Invalid %s header %q: want a non-negative Go duration such as 200ms.", headerDelay, v), "invalid_test_hook")
			return false
		}
		if !sleep(r.Context(), d) {
			return false
		}
	}
	if v := r.Header.Get(headerStatus); v != "" {
		status, err := strconv.Atoi(v)
		if err != nil || status < 400 || status > 599 {
			fail(http.StatusBadRequest, fmt.Sprintf("Invalid %s header %q: want a status from 400 to 599.", headerStatus, v), "invalid_test_hook")
			return false
		}
		code := ""
		if status == http.StatusTooManyRequests {
			code = "rate_limit_exceeded"
		}
		fail(status, fmt.Sprintf("flexway-sample: simulated status %d requested by the %s header.", status, headerStatus), code)
		return false
	}
	return true
}

// route dispatches /v1 paths, answering unknown paths with 404 and wrong
// methods with 405, both in OpenAI's error envelope.
func (h *handler) route(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	var method string
	var serve http.HandlerFunc
	switch {
	case path == "/v1/chat/completions":
		method, serve = http.MethodPost, h.chatCompletions
	case path == "/v1/embeddings":
		method, serve = http.MethodPost, h.embeddings
	case path == "/v1/models":
		method, serve = http.MethodGet, h.listModels
	case path == webhookPath:
		method, serve = http.MethodPost, h.webhookCheck
	case strings.HasPrefix(path, "/v1/models/") && len(path) > len("/v1/models/"):
		method, serve = http.MethodGet, h.getModel
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("Unknown request URL: %s %s. flexway-sample serves POST /v1/chat/completions, POST /v1/embeddings, GET /v1/models and POST /guardrail/check (a sample guardrail webhook).", r.Method, path), "", "unknown_url")
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("Method %s is not allowed on %s; use %s.", r.Method, path, method), "", "method_not_allowed")
		return
	}
	serve(w, r)
}

// authorized reports whether r carries the required bearer token, or whether
// none is required.
func (h *handler) authorized(r *http.Request) bool {
	if h.opts.requireBearer == "" {
		return true
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), []byte(h.opts.requireBearer)) == 1
}

// modelObject is one entry of OpenAI's model list.
type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// modelList is OpenAI's GET /v1/models response.
type modelList struct {
	Object string        `json:"object"`
	Data   []modelObject `json:"data"`
}

// listModels serves GET /v1/models.
func (h *handler) listModels(w http.ResponseWriter, _ *http.Request) {
	list := modelList{Object: "list", Data: make([]modelObject, 0, len(h.opts.models))}
	for _, m := range h.opts.models {
		list.Data = append(list.Data, h.model(m))
	}
	writeJSON(w, http.StatusOK, list)
}

// getModel serves GET /v1/models/{id}.
func (h *handler) getModel(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	for _, m := range h.opts.models {
		if m == id {
			writeJSON(w, http.StatusOK, h.model(m))
			return
		}
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("The model '%s' does not exist", id), "model", "model_not_found")
}

// model describes one served model.
func (h *handler) model(id string) modelObject {
	return modelObject{ID: id, Object: "model", Created: modelCreated, OwnedBy: h.opts.name}
}

// resolveModel returns the model name to answer as: the requested one when
// served or when it is [modelSlow], else the first served model.
func (h *handler) resolveModel(requested string) string {
	if requested == modelSlow {
		return requested
	}
	for _, m := range h.opts.models {
		if m == requested {
			return m
		}
	}
	return h.opts.models[0]
}

// modelHooks applies the test models for the OpenAI wire, see
// [wireModelHooks].
func modelHooks(w http.ResponseWriter, r *http.Request, model string) bool {
	return wireModelHooks(r, model, func(status int, message, code string) { writeError(w, status, message, "", code) })
}

// wireModelHooks applies the test models: [modelSlow] sleeps, [modelFail503]
// fails with 503 through fail. It reports whether the caller should go on
// serving.
func wireModelHooks(r *http.Request, model string, fail failFunc) bool {
	switch model {
	case modelSlow:
		return sleep(r.Context(), slowDelay)
	case modelFail503:
		fail(http.StatusServiceUnavailable, "flexway-sample: model sample-fail-503 always fails with 503 (a test hook).", "sample_unavailable")
		return false
	}
	return true
}

// sleep waits for d or until ctx is done, and reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// statusRecorder remembers the status written through it, for the request
// log. It keeps flushing available, directly and through Unwrap for
// [http.ResponseController].
type statusRecorder struct {
	http.ResponseWriter
	status int
}

// WriteHeader implements [http.ResponseWriter].
func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write implements [http.ResponseWriter].
func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush implements [http.Flusher].
func (s *statusRecorder) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap returns the wrapped writer, for [http.ResponseController].
func (s *statusRecorder) Unwrap() http.ResponseWriter {
	return s.ResponseWriter
}
