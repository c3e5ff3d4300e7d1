package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/a2a"
	"github.com/flexway/flexway/server/backends/anthropic"
	"github.com/flexway/flexway/server/backends/gemini"
	"github.com/flexway/flexway/server/faults"
)

// fixture reads a recorded wire file of a kind's package.
func fixture(t *testing.T, kind, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../" + kind + "/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wireUpstream answers every request with status, contentType and body.
func wireUpstream(t *testing.T, status int, contentType string, body []byte, header ...string) *upstream {
	return newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	})
}

// newWireBackend builds a translated backend on u.
func newWireBackend(t *testing.T, u *upstream, path string, wire backends.Wire, mod func(*Options)) *Backend {
	t.Helper()
	o := Options{Name: "w", URL: u.URL + path, Wire: wire, Auth: Auth{Type: AuthHeader, Header: "x-api-key", Secret: "k-1"}}
	if mod != nil {
		mod(&o)
	}
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func chatReq(model string) *flexwayv1.CreateChatCompletionRequest {
	return &flexwayv1.CreateChatCompletionRequest{Model: model, Messages: []*flexwayv1.ChatMessage{
		{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "hi"}}}}
}

// drain reads s to its end: the chunks' content and the end's error.
func drain(t *testing.T, s backends.ChunkStream) (content string, chunks int, err error) {
	t.Helper()
	defer s.Close()
	for {
		ch, err := s.Recv()
		if err == io.EOF {
			return content, chunks, nil
		}
		if err != nil {
			return content, chunks, err
		}
		chunks++
		for _, c := range ch.GetChoices() {
			content += c.GetDelta().GetText()
		}
	}
}

func TestAnthropicOverTheSharedPath(t *testing.T) {
	u := wireUpstream(t, 200, "application/json", fixture(t, "anthropic", "decode/text.json"))
	b := newWireBackend(t, u, "", anthropic.Wire{Options: anthropic.Options{MaxOutputTokens: 64}},
		func(o *Options) { o.Header = http.Header{"anthropic-version": {"2023-06-01"}} })
	resp, served, err := b.CreateChatCompletion(context.Background(), chatReq("claude-x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetChoices()[0].GetMessage().GetText(); got != "Hello! How can I help?" {
		t.Errorf("content %q", got)
	}
	if u := resp.GetUsage(); u.GetPromptTokens() != 2112 || u.GetCompletionTokens() != 6 {
		t.Errorf("usage %v: prompt_tokens must count cached input", u)
	}
	if served.ModelSent != "claude-x" {
		t.Errorf("served %+v", served)
	}
	seen := u.requests()[0]
	if seen.Path != "/v1/messages" || seen.Header.Get("Anthropic-Version") != "2023-06-01" || seen.Header.Get("X-Api-Key") != "k-1" {
		t.Errorf("request %s %v", seen.Path, seen.Header)
	}
	if seen.Body["max_tokens"] != float64(64) || seen.Body["model"] != "claude-x" {
		t.Errorf("body %v", seen.Body)
	}
}

func TestAnthropicStreamOverTheSharedPath(t *testing.T) {
	u := wireUpstream(t, 200, "text/event-stream", fixture(t, "anthropic", "stream/text.sse"))
	b := newWireBackend(t, u, "", anthropic.Wire{Options: anthropic.Options{MaxOutputTokens: 64}}, nil)
	s, _, err := b.StreamChatCompletion(context.Background(), chatReq("claude-x"))
	if err != nil {
		t.Fatal(err)
	}
	content, _, err := drain(t, s)
	if err != nil || content != "Hello!\n\"é\"" {
		t.Errorf("content %q, err %v", content, err)
	}
	if u.requests()[0].Body["stream"] != true {
		t.Errorf("a stream call must send stream: true, got %v", u.requests()[0].Body)
	}
}

func TestAnthropicCutStreamIsNeverComplete(t *testing.T) {
	u := wireUpstream(t, 200, "text/event-stream", fixture(t, "anthropic", "stream/cut.sse"))
	b := newWireBackend(t, u, "", anthropic.Wire{Options: anthropic.Options{MaxOutputTokens: 64}}, nil)
	s, _, err := b.StreamChatCompletion(context.Background(), chatReq("m"))
	if err != nil {
		t.Fatal(err)
	}
	content, _, err := drain(t, s)
	if content == "" || faults.As(err).Reason != faults.UpstreamError {
		t.Errorf("content %q, err %v: a cut after content must end with an upstream error", content, err)
	}
}

func TestWireErrorsKeepTheirMeaning(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      int
		body        string
		header      []string
		reason      faults.Reason
		httpStatus  int
		retry       int64
		unavailable bool
		auth        bool
	}{
		{name: "invalid request keeps 400", status: 400, body: `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too big"}}`,
			reason: faults.UpstreamStatus, httpStatus: 400},
		{name: "rate limit relayed with Retry-After", status: 429, body: `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`,
			header: []string{"Retry-After", "7"}, reason: faults.UpstreamStatus, httpStatus: 429, retry: 7},
		{name: "overloaded is fallen back from", status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			reason: faults.UpstreamError, unavailable: true},
		{name: "html 502", status: 502, body: `<html>bad gateway</html>`, reason: faults.UpstreamError, unavailable: true},
		{name: "credentials refused", status: 401, body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`,
			reason: faults.UpstreamError, auth: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := wireUpstream(t, tc.status, "application/json", []byte(tc.body), tc.header...)
			b := newWireBackend(t, u, "", anthropic.Wire{Options: anthropic.Options{MaxOutputTokens: 64}}, nil)
			_, _, err := b.CreateChatCompletion(context.Background(), chatReq("m"))
			fe := faults.As(err)
			if fe.Reason != tc.reason || fe.UpstreamHTTPStatus != tc.httpStatus || fe.RetryAfterSeconds != tc.retry {
				t.Fatalf("got %+v", fe)
			}
			if backends.Unavailable(err) != tc.unavailable || errors.Is(err, backends.ErrUpstreamAuth) != tc.auth {
				t.Errorf("unavailable %v, auth %v: %v", backends.Unavailable(err), errors.Is(err, backends.ErrUpstreamAuth), err)
			}
			if tc.httpStatus == 400 && !bytes.Contains(fe.UpstreamBody, []byte(`"type":"invalid_request_error"`)) {
				t.Errorf("a 4xx must reach the caller in OpenAI's envelope, got %s", fe.UpstreamBody)
			}
		})
	}
}

func TestGeminiPathsAndStream(t *testing.T) {
	u := wireUpstream(t, 200, "text/event-stream", fixture(t, "gemini", "stream/text.sse"))
	b := newWireBackend(t, u, "/v1beta", gemini.Wire{}, nil)
	s, _, err := b.StreamChatCompletion(context.Background(), chatReq("gemini-2.5-flash"))
	if err != nil {
		t.Fatal(err)
	}
	content, _, err := drain(t, s)
	if err != nil || content == "" {
		t.Fatalf("content %q, err %v", content, err)
	}
	if p := u.requests()[0].Path; p != "/v1beta/models/gemini-2.5-flash:streamGenerateContent" {
		t.Errorf("path %q", p)
	}
	if q := u.requests()[0].Query; q != "alt=sse" {
		t.Errorf("query %q", q)
	}
}

func TestGeminiModelIsPathEscaped(t *testing.T) {
	u := wireUpstream(t, 200, "application/json", fixture(t, "gemini", "decode/text.gemini.json"))
	b := newWireBackend(t, u, "/v1beta", gemini.Wire{}, nil)
	if _, _, err := b.CreateChatCompletion(context.Background(), chatReq("../../admin?x=1")); err != nil {
		t.Fatal(err)
	}
	if p := u.requests()[0].RawPath; p != "/v1beta/models/..%2F..%2Fadmin%3Fx=1:generateContent" {
		t.Errorf("a requested model must not leave the models path: %q", p)
	}
}

func TestGeminiEmbeddings(t *testing.T) {
	u := wireUpstream(t, 200, "application/json", fixture(t, "gemini", "embeddings.gemini-response.json"))
	b := newWireBackend(t, u, "/v1beta", gemini.Wire{}, nil)
	req := &flexwayv1.CreateEmbeddingRequest{Model: "gemini-embedding-001", Input: &flexwayv1.EmbeddingInput{
		Input: &flexwayv1.EmbeddingInput_Texts{Texts: &flexwayv1.Texts{Values: []string{"a", "b"}}}}}
	resp, _, err := b.CreateEmbedding(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetData()) != 2 || u.requests()[0].Path != "/v1beta/models/gemini-embedding-001:batchEmbedContents" {
		t.Errorf("data %d, path %s", len(resp.GetData()), u.requests()[0].Path)
	}
}

func TestA2AOverTheSharedPath(t *testing.T) {
	// Recorded as the answer to id "call-1"; a call without a request id
	// sends "1".
	u := wireUpstream(t, 200, "text/event-stream", bytes.ReplaceAll(fixture(t, "a2a", "stream_artifacts.sse"), []byte(`"id":"call-1"`), []byte(`"id":"1"`)))
	b := newWireBackend(t, u, "/a2a", a2a.Wire{Backend: "w"}, nil)
	s, _, err := b.StreamChatCompletion(context.Background(), chatReq("agentx"))
	if err != nil {
		t.Fatal(err)
	}
	content, _, err := drain(t, s)
	if err != nil || content == "" {
		t.Fatalf("content %q, err %v", content, err)
	}
	if seen := u.requests()[0]; seen.Path != "/a2a" || seen.Body["method"] != "message/stream" {
		t.Errorf("request %s %v", seen.Path, seen.Body["method"])
	}
}

func TestDroppedFieldsLoggedOncePerName(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	u := wireUpstream(t, 200, "application/json", fixture(t, "anthropic", "decode/text.json"))
	b := newWireBackend(t, u, "", anthropic.Wire{Options: anthropic.Options{MaxOutputTokens: 64}}, func(o *Options) { o.Log = log })
	for range 3 {
		req := chatReq("m")
		req.ExtraFields = map[string]string{"frequency_penalty": "0.123456"}
		if _, _, err := b.CreateChatCompletion(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	out := logged.String()
	if strings.Count(out, "field=frequency_penalty") != 1 || strings.Contains(out, "0.123456") {
		t.Errorf("want one notice naming the field and never its value, got:\n%s", out)
	}
}

func TestDroppedFieldNoticesAreBounded(t *testing.T) {
	var logged bytes.Buffer
	tr := &translated{log: slog.New(slog.NewTextHandler(&logged, nil))}
	for round := range 3 {
		names := make([]string, 100)
		for i := range names {
			names[i] = string(rune('a'+round)) + strconv.Itoa(i) + strings.Repeat("n", 100)
		}
		tr.noteDropped("w", names)
	}
	out := logged.String()
	if n := strings.Count(out, "field="); n != maxDroppedNames {
		t.Errorf("%d names logged, want %d", n, maxDroppedNames)
	}
	if n := strings.Count(out, "more field names than are logged"); n != 1 {
		t.Errorf("%d overflow notices, want 1", n)
	}
	if strings.Contains(out, strings.Repeat("n", maxDroppedNameBytes+1)) {
		t.Error("a logged name must be cut to maxDroppedNameBytes")
	}
}

// TestOwnCredentialNeverRelayed: an upstream 4xx quoting the gateway's
// own credential reaches the caller with it redacted, for OpenAI's own
// format and a translated one.
func TestOwnCredentialNeverRelayed(t *testing.T) {
	for _, tc := range []struct {
		name string
		wire backends.Wire
		body string
	}{
		{"openai", nil, `{"error":{"message":"Incorrect API key provided: k-secret-123456","type":"invalid_request_error"}}`},
		{"anthropic", anthropic.Wire{Options: anthropic.Options{MaxOutputTokens: 8}}, `{"type":"error","error":{"type":"invalid_request_error","message":"bad key k-secret-123456"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := wireUpstream(t, 400, "application/json", []byte(tc.body))
			b := newWireBackend(t, u, "", tc.wire, func(o *Options) { o.Auth = Auth{Type: AuthBearer, Secret: "k-secret-123456"} })
			_, _, err := b.CreateChatCompletion(context.Background(), chatReq("m"))
			fe := faults.As(err)
			if fe.UpstreamHTTPStatus != 400 || bytes.Contains(fe.UpstreamBody, []byte("k-secret-123456")) || strings.Contains(fe.Message, "k-secret-123456") ||
				!bytes.Contains(fe.UpstreamBody, []byte("[redacted]")) {
				t.Errorf("%+v body %s", fe, fe.UpstreamBody)
			}
		})
	}
}
