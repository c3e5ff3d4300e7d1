package upstream

import (
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexway/flexway/server/faults"
)

func TestModelMapping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		models    []string
		def       string
		requested string
		want      string
	}{
		{name: "listed_is_sent", models: []string{"large-1", "small-1"}, def: "small-1", requested: "large-1", want: "large-1"},
		{name: "unlisted_becomes_default", models: []string{"large-1", "small-1"}, def: "small-1", requested: "gpt-9", want: "small-1"},
		{name: "empty_becomes_default", models: []string{"large-1"}, def: "large-1", requested: "", want: "large-1"},
		{name: "no_models_sends_requested", requested: "anything-7b", want: "anything-7b"},
		{name: "no_models_empty_gets_default", def: "local-7b", requested: "", want: "local-7b"},
	}
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/embeddings":
			serveEmbedding(w, r)
		case "/v1/chat/completions":
			if r.Header.Get("Accept") == "text/event-stream" {
				serveStream("x")(w, r)
				return
			}
			serveCompletion(w, r)
		default:
			http.NotFound(w, r)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, u, Options{Models: tt.models, DefaultModel: tt.def})
			check := func(what string, served string, path string) {
				t.Helper()
				got := u.last(t)
				if served != tt.want || got.Body["model"] != tt.want || got.Path != path {
					t.Errorf("%s: served %q, upstream saw model %v at %s; want %q at %s", what, served, got.Body["model"], got.Path, tt.want, path)
				}
			}
			_, served, err := b.CreateChatCompletion(context.Background(), chatRequest(tt.requested))
			if err != nil {
				t.Fatal(err)
			}
			if served.Backend != "main" {
				t.Errorf("served.Backend = %q, want main", served.Backend)
			}
			check("chat", served.ModelSent, "/v1/chat/completions")

			s, served, err := b.StreamChatCompletion(context.Background(), chatRequest(tt.requested))
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			check("stream", served.ModelSent, "/v1/chat/completions")

			_, served, err = b.CreateEmbedding(context.Background(), embeddingRequest(tt.requested))
			if err != nil {
				t.Fatal(err)
			}
			check("embeddings", served.ModelSent, "/v1/embeddings")
		})
	}
}

func TestCreateChatCompletion(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, serveCompletion)
	b := newBackend(t, u, Options{})
	resp, _, err := b.CreateChatCompletion(context.Background(), chatRequest("small-1"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetId() != "chatcmpl-1" || resp.GetChoices()[0].GetMessage().GetText() != "Hi there" || resp.GetUsage().GetTotalTokens() != 5 {
		t.Errorf("completion = %v", resp)
	}
	got := u.last(t)
	if got.Body["stream"] != nil {
		t.Errorf("upstream saw stream = %v, want no stream member", got.Body["stream"])
	}
	if msgs, _ := got.Body["messages"].([]any); len(msgs) != 1 {
		t.Errorf("upstream saw messages %v", got.Body["messages"])
	}
}

func TestCreateEmbedding(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, serveEmbedding)
	b := newBackend(t, u, Options{Models: []string{"embed-small"}, DefaultModel: "embed-small"})
	resp, served, err := b.CreateEmbedding(context.Background(), embeddingRequest("embed-small"))
	if err != nil {
		t.Fatal(err)
	}
	if served.ModelSent != "embed-small" || resp.GetModel() != "embed-small" || len(resp.GetData()) != 1 ||
		!slices.Equal(resp.GetData()[0].GetFloats(), []float64{0.25, -0.5}) {
		t.Errorf("embeddings = %v, served %+v", resp, served)
	}
	if got := u.last(t); got.Path != "/v1/embeddings" || got.Body["input"] != "hello" {
		t.Errorf("upstream saw %s %v", got.Path, got.Body)
	}
}

// TestHeadersExact pins the exact header set the upstream sees: the
// backend's own, nothing of a caller's.
func TestHeadersExact(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"Accept", "Accept-Encoding", "Content-Length", "Content-Type", "User-Agent"}
	tests := []struct {
		name      string
		auth      Auth
		authName  string
		authValue string
	}{
		{name: "none", auth: Auth{Type: AuthNone}},
		{name: "empty_type_is_none", auth: Auth{}},
		{name: "bearer", auth: Auth{Type: AuthBearer, Secret: "sk-secret-1"}, authName: "Authorization", authValue: "Bearer sk-secret-1"},
		{name: "header", auth: Auth{Type: AuthHeader, Header: "api-key", Secret: "cheap-key"}, authName: "Api-Key", authValue: "cheap-key"},
		{name: "token_file", auth: Auth{Type: AuthTokenFile, TokenFile: tokenFile}, authName: "Authorization", authValue: "Bearer file-token"},
	}
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") == "text/event-stream" {
			serveStream("x")(w, r)
			return
		}
		serveCompletion(w, r)
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, u, Options{Auth: tt.auth})
			want := slices.Clone(base)
			if tt.authName != "" {
				want = append(want, tt.authName)
				slices.Sort(want)
			}
			for _, stream := range []bool{false, true} {
				// A caller's context carries nothing that could leak.
				ctx := context.WithValue(context.Background(), struct{ k string }{"cookie"}, "Cookie: session=1")
				accept := "application/json"
				if stream {
					accept = "text/event-stream"
					s, _, err := b.StreamChatCompletion(ctx, chatRequest("m"))
					if err != nil {
						t.Fatal(err)
					}
					s.Close()
				} else if _, _, err := b.CreateChatCompletion(ctx, chatRequest("m")); err != nil {
					t.Fatal(err)
				}
				h := u.last(t).Header
				if got := headerNames(h); !slices.Equal(got, want) {
					t.Errorf("stream=%v: upstream saw headers %v, want %v", stream, got, want)
				}
				if h.Get("Accept") != accept || h.Get("Content-Type") != "application/json" ||
					!strings.HasPrefix(h.Get("User-Agent"), "flexway/") || len(h.Values(tt.authName)) > 1 {
					t.Errorf("stream=%v: headers %v", stream, h)
				}
				if tt.authName != "" && h.Get(tt.authName) != tt.authValue {
					t.Errorf("stream=%v: %s = %q, want %q", stream, tt.authName, h.Get(tt.authName), tt.authValue)
				}
			}
		})
	}
}

func TestTokenFileReadAtEveryCall(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, serveCompletion)
	path := filepath.Join(t.TempDir(), "onprem-token")
	b := newBackend(t, u, Options{Auth: Auth{Type: AuthTokenFile, TokenFile: path}})
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("token-one\n")
	if _, _, err := b.CreateChatCompletion(context.Background(), chatRequest("m")); err != nil {
		t.Fatal(err)
	}
	write("  token-two \r\n")
	if _, _, err := b.CreateChatCompletion(context.Background(), chatRequest("m")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range u.requests() {
		got = append(got, r.Header.Get("Authorization"))
	}
	if want := []string{"Bearer token-one", "Bearer token-two"}; !slices.Equal(got, want) {
		t.Errorf("upstream saw %q, want %q", got, want)
	}

	// An unreadable, then an empty, token file: no request is sent, and
	// the message says nothing of the file.
	for _, content := range []*string{nil, new("  \n")} {
		if content == nil {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		} else {
			write(*content)
		}
		_, served, err := b.CreateChatCompletion(context.Background(), chatRequest("m"))
		fe := wantFault(t, err, faults.UpstreamError)
		notContains(t, "message", fe.Message, path, "token-")
		if served.Backend != "main" {
			t.Errorf("served = %+v on error, want the backend named", served)
		}
		if _, _, err := b.StreamChatCompletion(context.Background(), chatRequest("m")); err == nil {
			t.Error("stream with no token: err = nil")
		}
	}
	if n := len(u.requests()); n != 2 {
		t.Errorf("upstream saw %d requests, want 2", n)
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	b, err := New(Options{Name: "main", URL: "http://" + addr + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = b.CreateChatCompletion(context.Background(), chatRequest("m"))
	fe := wantFault(t, err, faults.UpstreamError)
	notContains(t, "message", fe.Message, addr)
}

func TestTimeoutToHeaders(t *testing.T) {
	t.Parallel()
	done := make(chan struct{}, 4)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { block(r, done) })
	b := newBackend(t, u, Options{Timeout: 300 * time.Millisecond})
	for _, stream := range []bool{false, true} {
		start := time.Now()
		var err error
		if stream {
			_, _, err = b.StreamChatCompletion(context.Background(), chatRequest("m"))
		} else {
			_, _, err = b.CreateChatCompletion(context.Background(), chatRequest("m"))
		}
		wantFault(t, err, faults.UpstreamTimeout)
		if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
			t.Errorf("stream=%v: timed out after %v, want about 300ms", stream, d)
		}
		waitDone(t, done, "its request end")
	}
}

func TestIdleTimeoutNonStreamed(t *testing.T) {
	t.Parallel()
	done := make(chan struct{}, 1)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, completionJSON[:30])
		w.(http.Flusher).Flush()
		block(r, done)
	})
	b := newBackend(t, u, Options{IdleTimeout: 300 * time.Millisecond})
	_, _, err := b.CreateChatCompletion(context.Background(), chatRequest("m"))
	fe := wantFault(t, err, faults.UpstreamTimeout)
	if !strings.Contains(fe.Message, "sent nothing for 300ms") {
		t.Errorf("message %q", fe.Message)
	}
	waitDone(t, done, "its request end")
}

func TestContextCanceledBeforeHeaders(t *testing.T) {
	t.Parallel()
	done := make(chan struct{}, 1)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { block(r, done) })
	b := newBackend(t, u, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, _, err := b.CreateChatCompletion(ctx, chatRequest("m"))
	wantFault(t, err, faults.Canceled)
	waitDone(t, done, "its request end")

	// Already canceled: nothing is sent.
	n := len(u.requests())
	_, _, err = b.CreateChatCompletion(ctx, chatRequest("m"))
	wantFault(t, err, faults.Canceled)
	if len(u.requests()) != n {
		t.Error("a request was sent with a canceled context")
	}

	// The caller's deadline is a timeout.
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	_, _, err = b.CreateChatCompletion(dctx, chatRequest("m"))
	wantFault(t, err, faults.UpstreamTimeout)
	waitDone(t, done, "its request end")
}

func TestGzipAnswers(t *testing.T) {
	t.Parallel()
	gz := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/embeddings" {
			w.Header().Set("Content-Type", "application/json")
		} else if r.Header.Get("Accept") == "text/event-stream" {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		defer zw.Close()
		switch {
		case r.URL.Path == "/v1/embeddings":
			io.WriteString(zw, embeddingJSON)
		case r.Header.Get("Accept") == "text/event-stream":
			for _, c := range []string{"Hé", "llo"} {
				io.WriteString(zw, "data: "+chunkJSON(c)+"\n\n")
				zw.Flush()
				w.(http.Flusher).Flush()
			}
			io.WriteString(zw, "data: [DONE]\n\n")
		default:
			if r.URL.Query().Get("status") == "400" {
				w.WriteHeader(400)
				io.WriteString(zw, `{"error":{"message":"bad"}}`)
				return
			}
			io.WriteString(zw, completionJSON)
		}
	}
	tests := []struct {
		name      string
		transport http.RoundTripper
	}{
		// The pooled transport asks for gzip and decodes it itself.
		{name: "transport_decodes"},
		// A transport that does not ask: the upstream sends gzip anyway,
		// the backend decodes it.
		{name: "backend_decodes", transport: &http.Transport{DisableCompression: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := newUpstream(t, gz)
			b := newBackend(t, u, Options{Transport: tt.transport})
			resp, _, err := b.CreateChatCompletion(context.Background(), chatRequest("m"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetChoices()[0].GetMessage().GetText() != "Hi there" {
				t.Errorf("completion %v", resp)
			}
			emb, _, err := b.CreateEmbedding(context.Background(), embeddingRequest("m"))
			if err != nil || len(emb.GetData()) != 1 {
				t.Fatalf("embeddings %v, %v", emb, err)
			}
			s, _, err := b.StreamChatCompletion(context.Background(), chatRequest("m"))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var text string
			for {
				c, err := s.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				text += deltaText(c)
			}
			if text != "Héllo" {
				t.Errorf("stream text %q", text)
			}

			b400 := newBackend(t, u, Options{URL: u.URL + "/v1?status=400", Transport: tt.transport})
			_, _, err = b400.CreateChatCompletion(context.Background(), chatRequest("m"))
			if fe := wantFault(t, err, faults.UpstreamStatus); string(fe.UpstreamBody) != `{"error":{"message":"bad"}}` {
				t.Errorf("4xx body %q, want it decoded", fe.UpstreamBody)
			}
		})
	}
}

// TestConnectionReuse: sequential calls of every kind, a 4xx among them,
// share one connection.
func TestConnectionReuse(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case r.URL.Path == "/v1/embeddings":
			serveEmbedding(w, r)
		case r.Header.Get("Accept") == "text/event-stream":
			serveStream("a", "b")(w, r)
		case strings.Contains(string(body), `"limited"`):
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			io.WriteString(w, `{"error":{"message":"slow down"}}`)
		default:
			serveCompletion(w, r)
		}
	})
	b := newBackend(t, u, Options{})
	for i := range 10 {
		var err error
		switch i % 4 {
		case 0:
			_, _, err = b.CreateChatCompletion(context.Background(), chatRequest("m"))
		case 1:
			s, _, serr := b.StreamChatCompletion(context.Background(), chatRequest("m"))
			if serr != nil {
				t.Fatal(serr)
			}
			for err == nil {
				_, err = s.Recv()
			}
			if err == io.EOF {
				err = nil
			}
			s.Close()
		case 2:
			_, _, err = b.CreateEmbedding(context.Background(), embeddingRequest("m"))
		case 3:
			_, _, err = b.CreateChatCompletion(context.Background(), chatRequest("limited"))
			wantFault(t, err, faults.UpstreamStatus)
			err = nil
		}
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if n := u.newConns.Load(); n != 1 {
		t.Errorf("%d new connections for 10 sequential calls, want 1", n)
	}
}
