package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
)

// upstream is a scripted OpenAI-compatible server for one test. It records
// every request it sees and counts new connections.
type upstream struct {
	*httptest.Server
	mu       sync.Mutex
	reqs     []seenRequest
	newConns atomic.Int64
}

// seenRequest is what the upstream saw of one request.
type seenRequest struct {
	Path string
	// RawPath is the escaped path as sent, and Query the raw query.
	RawPath, Query string
	Header         http.Header
	Body           map[string]any
	Proto          int // major HTTP version
	Client         string
}

// newUpstream starts a plain-HTTP upstream running h.
func newUpstream(t testing.TB, h http.HandlerFunc) *upstream {
	t.Helper()
	u := newUnstartedUpstream(t, h)
	u.Start()
	return u
}

// newUnstartedUpstream is newUpstream for a caller that starts the server
// (StartTLS), after setting its TLS config.
func newUnstartedUpstream(t testing.TB, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen := seenRequest{Path: r.URL.Path, RawPath: r.URL.EscapedPath(), Query: r.URL.RawQuery, Header: r.Header.Clone(), Proto: r.ProtoMajor}
		_ = json.Unmarshal(body, &seen.Body)
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			seen.Client = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, seen)
		u.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h(w, r)
	}))
	u.Config.ErrorLog = log.New(io.Discard, "", 0) // handshake failures are expected
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.newConns.Add(1)
		}
	}
	t.Cleanup(u.Close)
	return u
}

// requests returns the requests seen so far.
func (u *upstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.reqs...)
}

// last returns the last request seen; the test fails if there is none.
func (u *upstream) last(t testing.TB) seenRequest {
	t.Helper()
	reqs := u.requests()
	if len(reqs) == 0 {
		t.Fatal("the upstream saw no request")
	}
	return reqs[len(reqs)-1]
}

// newBackend returns a backend named main over u's /v1, o's other fields
// kept.
func newBackend(t testing.TB, u *upstream, o Options) *Backend {
	t.Helper()
	if o.Name == "" {
		o.Name = "main"
	}
	if o.URL == "" {
		o.URL = u.URL + "/v1"
	}
	b, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(b.CloseIdleConnections)
	return b
}

// chatRequest is a one-message chat request for model.
func chatRequest(model string) *flexwayv1.CreateChatCompletionRequest {
	return &flexwayv1.CreateChatCompletionRequest{
		Model: model,
		Messages: []*flexwayv1.ChatMessage{
			{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "hello"}},
		},
	}
}

// embeddingRequest is a one-text embedding request for model.
func embeddingRequest(model string) *flexwayv1.CreateEmbeddingRequest {
	return &flexwayv1.CreateEmbeddingRequest{
		Model: model,
		Input: &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Text{Text: "hello"}},
	}
}

const (
	completionJSON = `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"small-1",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Hi there"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`
	embeddingJSON = `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.25,-0.5]}],` +
		`"model":"embed-small","usage":{"prompt_tokens":1,"total_tokens":1}}`
	usageChunkJSON = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"small-1",` +
		`"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`
)

// chunkJSON is a chunk whose one choice's delta carries content.
func chunkJSON(content string) string {
	c, _ := json.Marshal(content)
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"small-1",` +
		`"choices":[{"index":0,"delta":{"content":` + string(c) + `},"finish_reason":null}]}`
}

// serveCompletion answers a completion.
func serveCompletion(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, completionJSON)
}

// serveEmbedding answers embeddings.
func serveEmbedding(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, embeddingJSON)
}

// serveStream answers an event stream of one chunk per content, the usage
// chunk and [DONE].
func serveStream(contents ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range contents {
			fmt.Fprintf(w, "data: %s\n\n", chunkJSON(c))
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", usageChunkJSON)
	}
}

// block waits for the request's end (the client went away), at most 10s,
// and then reports on done, if not nil, without blocking.
func block(r *http.Request, done chan<- struct{}) {
	select {
	case <-r.Context().Done():
		if done != nil {
			select {
			case done <- struct{}{}:
			default:
			}
		}
	case <-time.After(10 * time.Second):
	}
}

// waitDone fails the test unless done reports within a second.
func waitDone(t testing.TB, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatalf("the upstream did not see %s within a second", what)
	}
}

// wantFault fails the test unless err is a *faults.Error of reason r.
func wantFault(t testing.TB, err error, r faults.Reason) *faults.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want reason %s", r)
	}
	fe, ok := errors.AsType[*faults.Error](err)
	if !ok {
		t.Fatalf("err = %T %v, want a *faults.Error of reason %s", err, err, r)
	}
	if fe.Reason != r {
		t.Fatalf("reason = %s (%q, cause %v), want %s", fe.Reason, fe.Message, fe.Err, r)
	}
	return fe
}

// headerNames returns h's names, sorted.
func headerNames(h http.Header) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// deltaText returns the content of a chunk's first choice.
func deltaText(c *flexwayv1.ChatCompletionChunk) string {
	if len(c.GetChoices()) == 0 {
		return ""
	}
	return c.GetChoices()[0].GetDelta().GetText()
}

// causeChain returns fmt.Sprint of err and of every error it wraps, for a
// test that nothing of an upstream's body reaches a log line.
func causeChain(err error) string {
	var b strings.Builder
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		b.WriteString(fmt.Sprint(err))
		b.WriteString(fmt.Sprintf(" %+v\n", err))
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return b.String()
}

// notContains fails the test if s contains any of subs.
func notContains(t testing.TB, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			t.Errorf("%s %q contains %q", what, s, sub)
		}
	}
}
