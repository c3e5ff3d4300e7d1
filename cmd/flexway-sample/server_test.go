package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// newTestServer starts the sample handler with opts on a local port and
// closes it when the test ends.
func newTestServer(tb testing.TB, opts options) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(newHandler(opts))
	tb.Cleanup(srv.Close)
	return srv
}

// fastOptions are the default options without streaming delay.
func fastOptions() options {
	o := defaultOptions()
	o.chunkDelay = 0
	return o
}

// do sends a request with an optional body and headers and returns the
// response, whose body it has read and closed.
func do(tb testing.TB, srv *httptest.Server, method, path, body string, header map[string]string) (*http.Response, []byte) {
	tb.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(tb.Context(), method, srv.URL+path, r)
	if err != nil {
		tb.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp, b
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for logs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements [io.Writer].
func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Wire shapes decoded independently of the server's own types.
type (
	wantUsage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
	gotCompletion struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage wantUsage `json:"usage"`
	}
	gotChunk struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index        int             `json:"index"`
			Delta        json.RawMessage `json:"delta"`
			FinishReason *string         `json:"finish_reason"`
		} `json:"choices"`
		Usage *wantUsage `json:"usage"`
	}
	gotDelta struct {
		Role    *string `json:"role"`
		Content *string `json:"content"`
	}
	gotEmbeddings struct {
		Object string `json:"object"`
		Model  string `json:"model"`
		Data   []struct {
			Object    string          `json:"object"`
			Index     int             `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}
)

// sampleAnswer is the documented answer text, written out in full.
func sampleAnswer(model, said string) string {
	return "This is flexway-sample (model " + model + "), a local sample model, not a real LLM. You said: " + said
}

func TestChatCompletion(t *testing.T) {
	t.Parallel()
	const helloMessages = `[{"role":"system","content":"You are helpful."},{"role":"user","content":"hello world"}]`
	longUser := strings.Repeat("é ", 60) // 120 characters, 240 bytes
	tests := []struct {
		name        string
		body        string
		wantModel   string
		wantContent string
		wantChoices int
		wantUsage   wantUsage
	}{
		{
			name:        "first_model_one_choice",
			body:        `{"model":"sample-small","messages":` + helloMessages + `}`,
			wantModel:   "sample-small",
			wantContent: sampleAnswer("sample-small", "hello world"),
			wantChoices: 1,
			// prompt: 3 + 4 + 2 + 4; completion: 17 words.
			wantUsage: wantUsage{PromptTokens: 13, CompletionTokens: 17, TotalTokens: 30},
		},
		{
			name:        "second_model_is_echoed",
			body:        `{"model":"sample-large","messages":` + helloMessages + `}`,
			wantModel:   "sample-large",
			wantContent: sampleAnswer("sample-large", "hello world"),
			wantChoices: 1,
			wantUsage:   wantUsage{PromptTokens: 13, CompletionTokens: 17, TotalTokens: 30},
		},
		{
			name:        "unknown_model_falls_back_to_first",
			body:        `{"model":"gpt-4o","messages":` + helloMessages + `}`,
			wantModel:   "sample-small",
			wantContent: sampleAnswer("sample-small", "hello world"),
			wantChoices: 1,
			wantUsage:   wantUsage{PromptTokens: 13, CompletionTokens: 17, TotalTokens: 30},
		},
		{
			name:        "n_choices",
			body:        `{"model":"sample-small","n":3,"messages":` + helloMessages + `}`,
			wantModel:   "sample-small",
			wantContent: sampleAnswer("sample-small", "hello world"),
			wantChoices: 3,
			wantUsage:   wantUsage{PromptTokens: 13, CompletionTokens: 51, TotalTokens: 64},
		},
		{
			name:        "last_user_message_truncated_to_80_characters",
			body:        `{"model":"sample-small","messages":[{"role":"user","content":"first"},{"role":"assistant","content":"ok"},{"role":"user","content":"` + longUser + `"}]}`,
			wantModel:   "sample-small",
			wantContent: sampleAnswer("sample-small", strings.Repeat("é ", 40)),
			wantChoices: 1,
			// prompt: 1+4 + 1+4 + 60+4; completion: 15 + 40 words.
			wantUsage: wantUsage{PromptTokens: 74, CompletionTokens: 55, TotalTokens: 129},
		},
		{
			name:        "content_parts_image_said",
			body:        `{"model":"sample-small","messages":[{"role":"user","content":[{"type":"text","text":"hello"},{"type":"image_url","image_url":{"url":"data:,"}},{"type":"text","text":"there"}]}]}`,
			wantModel:   "sample-small",
			wantContent: sampleAnswer("sample-small", "hello [an image] there"),
			wantChoices: 1,
			wantUsage:   wantUsage{PromptTokens: 8, CompletionTokens: 19, TotalTokens: 27},
		},
		{
			name:        "no_user_message",
			body:        `{"model":"sample-small","messages":[{"role":"system","content":null}]}`,
			wantModel:   "sample-small",
			wantContent: "This is flexway-sample (model sample-small), a local sample model, not a real LLM. You said nothing.",
			wantChoices: 1,
			wantUsage:   wantUsage{PromptTokens: 4, CompletionTokens: 16, TotalTokens: 20},
		},
	}
	srv := newTestServer(t, fastOptions())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := do(t, srv, http.MethodPost, "/v1/chat/completions", tt.body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200; body %s", resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			var got gotCompletion
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got.ID, "chatcmpl-sample-") || len(got.ID) == len("chatcmpl-sample-") {
				t.Errorf("id = %q, want chatcmpl-sample-<n>", got.ID)
			}
			if got.Object != "chat.completion" {
				t.Errorf("object = %q, want chat.completion", got.Object)
			}
			if got.Created <= 0 {
				t.Errorf("created = %d, want a Unix time", got.Created)
			}
			if got.Model != tt.wantModel {
				t.Errorf("model = %q, want %q", got.Model, tt.wantModel)
			}
			if len(got.Choices) != tt.wantChoices {
				t.Fatalf("%d choices, want %d", len(got.Choices), tt.wantChoices)
			}
			for i, c := range got.Choices {
				if c.Index != i {
					t.Errorf("choices[%d].index = %d", i, c.Index)
				}
				if c.Message.Role != "assistant" {
					t.Errorf("choices[%d].message.role = %q, want assistant", i, c.Message.Role)
				}
				if c.Message.Content != tt.wantContent {
					t.Errorf("choices[%d].message.content = %q, want %q", i, c.Message.Content, tt.wantContent)
				}
				if c.FinishReason != "stop" {
					t.Errorf("choices[%d].finish_reason = %q, want stop", i, c.FinishReason)
				}
			}
			if got.Usage != tt.wantUsage {
				t.Errorf("usage = %+v, want %+v", got.Usage, tt.wantUsage)
			}
		})
	}
}

func TestChatCompletionIDsAreDistinct(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, fastOptions())
	seen := map[string]bool{}
	for range 3 {
		_, body := do(t, srv, http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, nil)
		var got gotCompletion
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if seen[got.ID] {
			t.Fatalf("id %q repeated", got.ID)
		}
		seen[got.ID] = true
	}
}

func TestListModels(t *testing.T) {
	t.Parallel()
	opts := fastOptions()
	opts.name, opts.models = "acme", []string{"m1", "m2", "m3"}
	srv := newTestServer(t, opts)

	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	resp, body := do(t, srv, http.MethodGet, "/v1/models", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d; body %s", resp.StatusCode, body)
	}
	var list struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	if list.Object != "list" || len(list.Data) != 3 {
		t.Fatalf("object %q with %d models, want list with 3", list.Object, len(list.Data))
	}
	for i, id := range opts.models {
		want := model{ID: id, Object: "model", Created: modelCreated, OwnedBy: "acme"}
		if list.Data[i] != want {
			t.Errorf("data[%d] = %+v, want %+v", i, list.Data[i], want)
		}
	}

	resp, body = do(t, srv, http.MethodGet, "/v1/models/m2", "", nil)
	var one model
	if err := json.Unmarshal(body, &one); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/models/m2: %d %s", resp.StatusCode, body)
	}
	if want := (model{ID: "m2", Object: "model", Created: modelCreated, OwnedBy: "acme"}); one != want {
		t.Errorf("GET /v1/models/m2 = %+v, want %+v", one, want)
	}
}

func TestRequestLog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		want   []string
	}{
		{name: "chat", method: "POST", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"secret-words-xyz"}]}`,
			want: []string{"method=POST", "path=/v1/chat/completions", "status=200", "duration="}},
		{name: "stream", method: "POST", path: "/v1/chat/completions", body: `{"stream":true,"messages":[{"role":"user","content":"secret-words-xyz"}]}`,
			want: []string{"method=POST", "path=/v1/chat/completions", "status=200", "duration="}},
		{name: "bad_request", method: "POST", path: "/v1/embeddings", body: `{"input":"secret-words-xyz","dimensions":-1}`,
			want: []string{"method=POST", "path=/v1/embeddings", "status=400", "duration="}},
		{name: "not_found", method: "GET", path: "/nope", want: []string{"method=GET", "path=/nope", "status=404", "duration="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logs := &syncBuffer{}
			opts := fastOptions()
			opts.logger = slog.New(slog.NewTextHandler(logs, nil))
			srv := newTestServer(t, opts)
			do(t, srv, tt.method, tt.path, tt.body, nil)
			waitFor(t, 2*time.Second, "the request log line", func() bool { return logs.String() != "" })
			out := logs.String()
			if lines := strings.Count(out, "\n"); lines != 1 {
				t.Errorf("%d log lines, want 1: %q", lines, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("log %q lacks %q", out, w)
				}
			}
			if strings.Contains(out, "secret-words-xyz") {
				t.Errorf("log %q contains message content", out)
			}
		})
	}
}

func TestSplitChunks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    string
		k    int
		want []string
	}{
		{name: "one_chunk", s: "a bb ccc", k: 1, want: []string{"a bb ccc"}},
		{name: "one_word_each", s: "a bb ccc", k: 3, want: []string{"a", " bb", " ccc"}},
		{name: "uneven", s: "a bb ccc", k: 2, want: []string{"a", " bb ccc"}},
		{name: "outer_spaces", s: "  hi there  ", k: 2, want: []string{"  hi", " there  "}},
		{name: "characters_when_few_words", s: "ab c", k: 4, want: []string{"a", "b", " ", "c"}},
		{name: "runes_not_bytes", s: "héllo", k: 5, want: []string{"h", "é", "l", "l", "o"}},
		{name: "capped_at_characters", s: "ab", k: 9, want: []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := splitChunks(tt.s, tt.k)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
				t.Errorf("splitChunks(%q, %d) = %q, want %q", tt.s, tt.k, got, tt.want)
			}
		})
	}
}

// TestChatCompletionHonoursMaxTokens: the answer stops after max_tokens
// (or max_completion_tokens, which wins) words per choice, usage counts
// what was answered and finish_reason says "length", unary and streamed;
// a limit above the answer changes nothing; a limit below 1 is refused.
func TestChatCompletionHonoursMaxTokens(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, fastOptions())
	const msgs = `"messages":[{"role":"user","content":"hello world"}]`
	full := sampleAnswer("sample-small", "hello world") // 17 words
	tests := []struct {
		name, limits, content, finish string
		completion                    int
	}{
		{"max_tokens_cuts", `"max_tokens":5`, strings.Join(strings.Fields(full)[:5], " "), "length", 5},
		{"max_completion_tokens_wins", `"max_tokens":50,"max_completion_tokens":3`, strings.Join(strings.Fields(full)[:3], " "), "length", 3},
		{"limit_above_the_answer", `"max_tokens":50`, full, "stop", 17},
	}
	for _, tt := range tests {
		for _, n := range []int{1, 2} {
			body := `{"model":"sample-small","n":` + itoa(n) + `,` + tt.limits + `,` + msgs + `}`
			resp, raw := do(t, srv, http.MethodPost, "/v1/chat/completions", body, nil)
			var got struct {
				Choices []struct {
					Message      struct{ Content string } `json:"message"`
					FinishReason string                   `json:"finish_reason"`
				} `json:"choices"`
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(raw, &got); err != nil || resp.StatusCode != 200 || len(got.Choices) != n {
				t.Fatalf("%s n=%d: %d %s", tt.name, n, resp.StatusCode, raw)
			}
			for _, c := range got.Choices {
				if c.Message.Content != tt.content || c.FinishReason != tt.finish {
					t.Errorf("%s n=%d: choice %q %q, want %q %q", tt.name, n, c.Message.Content, c.FinishReason, tt.content, tt.finish)
				}
			}
			if got.Usage.CompletionTokens != tt.completion*n {
				t.Errorf("%s n=%d: completion_tokens %d, want %d", tt.name, n, got.Usage.CompletionTokens, tt.completion*n)
			}
			// Streamed: the same words, and the finish chunk's reason.
			_, raw = do(t, srv, http.MethodPost, "/v1/chat/completions", `{"model":"sample-small","stream":true,`+tt.limits+`,`+msgs+`}`, nil)
			var text strings.Builder
			finish := ""
			for _, line := range strings.Split(string(raw), "\n") {
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok || data == "[DONE]" {
					continue
				}
				var c struct {
					Choices []struct {
						Delta        struct{ Content string } `json:"delta"`
						FinishReason *string                  `json:"finish_reason"`
					} `json:"choices"`
				}
				if err := json.Unmarshal([]byte(data), &c); err != nil {
					t.Fatalf("%s: event %q: %v", tt.name, data, err)
				}
				for _, ch := range c.Choices {
					text.WriteString(ch.Delta.Content)
					if ch.FinishReason != nil {
						finish = *ch.FinishReason
					}
				}
			}
			if text.String() != tt.content || finish != tt.finish {
				t.Errorf("%s streamed: %q %q, want %q %q", tt.name, text.String(), finish, tt.content, tt.finish)
			}
		}
	}
	for _, body := range []string{`{"model":"sample-small","max_tokens":0,` + msgs + `}`, `{"model":"sample-small","max_completion_tokens":-1,` + msgs + `}`} {
		if resp, raw := do(t, srv, http.MethodPost, "/v1/chat/completions", body, nil); resp.StatusCode != 400 || !strings.Contains(string(raw), "invalid_value") {
			t.Errorf("%s: %d %s, want 400 invalid_value", body, resp.StatusCode, raw)
		}
	}
}
