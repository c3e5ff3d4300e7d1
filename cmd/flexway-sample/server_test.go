package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
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

// parseSSE splits an SSE body into its data payloads, failing on anything
// that is not a "data: <payload>\n\n" event.
func parseSSE(tb testing.TB, body []byte) []string {
	tb.Helper()
	s := string(body)
	if !strings.HasSuffix(s, "\n\n") {
		tb.Fatalf("stream does not end with a blank line: %q", s)
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(s, "\n\n"), "\n\n") {
		payload, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(payload, "\n") {
			tb.Fatalf("malformed event %q", ev)
		}
		out = append(out, payload)
	}
	return out
}

func TestChatCompletionStream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		chunks      int
		n           int
		streamOpts  string
		wantUsage   bool
		wantContent int // content chunks per choice
	}{
		{name: "default_8_chunks_no_usage", chunks: 8, n: 1, wantContent: 8},
		{name: "include_usage_false", chunks: 3, n: 1, streamOpts: `,"stream_options":{"include_usage":false}`, wantContent: 3},
		{name: "include_usage_true", chunks: 3, n: 1, streamOpts: `,"stream_options":{"include_usage":true}`, wantUsage: true, wantContent: 3},
		{name: "one_chunk", chunks: 1, n: 1, wantContent: 1},
		{name: "more_chunks_than_words", chunks: 40, n: 1, wantContent: 40},
		{name: "two_choices_with_usage", chunks: 4, n: 2, streamOpts: `,"stream_options":{"include_usage":true}`, wantUsage: true, wantContent: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := fastOptions()
			opts.chunks = tt.chunks
			srv := newTestServer(t, opts)
			body := `{"model":"sample-large","stream":true,"n":` + itoa(tt.n) + tt.streamOpts +
				`,"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"hello world"}]}`
			resp, raw := do(t, srv, http.MethodPost, "/v1/chat/completions", body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200; body %s", resp.StatusCode, raw)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Errorf("Content-Type = %q, want text/event-stream", ct)
			}
			events := parseSSE(t, raw)
			wantEvents := tt.n*(1+tt.wantContent+1) + 1
			if tt.wantUsage {
				wantEvents++
			}
			if len(events) != wantEvents {
				t.Fatalf("%d events, want %d: %q", len(events), wantEvents, events)
			}
			if last := events[len(events)-1]; last != "[DONE]" {
				t.Fatalf("last event = %q, want [DONE]", last)
			}
			events = events[:len(events)-1]

			chunks := make([]gotChunk, len(events))
			for i, ev := range events {
				if err := json.Unmarshal([]byte(ev), &chunks[i]); err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				c := chunks[i]
				if c.ID != chunks[0].ID || !strings.HasPrefix(c.ID, "chatcmpl-sample-") {
					t.Errorf("event %d id = %q, want chatcmpl-sample-<n> shared by all chunks (first %q)", i, c.ID, chunks[0].ID)
				}
				if c.Object != "chat.completion.chunk" || c.Model != "sample-large" || c.Created <= 0 {
					t.Errorf("event %d: object %q model %q created %d", i, c.Object, c.Model, c.Created)
				}
			}

			// Role-only first step, one chunk per choice in index order.
			pos := 0
			for i := range tt.n {
				c := chunks[pos]
				pos++
				if len(c.Choices) != 1 || c.Choices[0].Index != i {
					t.Fatalf("role chunk %d: choices %+v", i, c.Choices)
				}
				if got := string(c.Choices[0].Delta); got != `{"role":"assistant","content":""}` {
					t.Errorf("role chunk %d delta = %s", i, got)
				}
				if c.Choices[0].FinishReason != nil || c.Usage != nil {
					t.Errorf("role chunk %d has finish_reason or usage", i)
				}
			}
			// Content steps.
			content := make([]string, tt.n)
			for step := range tt.wantContent {
				for i := range tt.n {
					c := chunks[pos]
					pos++
					if len(c.Choices) != 1 || c.Choices[0].Index != i {
						t.Fatalf("content step %d choice %d: choices %+v", step, i, c.Choices)
					}
					var d gotDelta
					if err := json.Unmarshal(c.Choices[0].Delta, &d); err != nil {
						t.Fatal(err)
					}
					if d.Role != nil || d.Content == nil || *d.Content == "" {
						t.Errorf("content step %d delta = %s, want non-empty content only", step, c.Choices[0].Delta)
					}
					if c.Choices[0].FinishReason != nil || c.Usage != nil {
						t.Errorf("content step %d has finish_reason or usage", step)
					}
					if d.Content != nil {
						content[i] += *d.Content
					}
				}
			}
			want := sampleAnswer("sample-large", "hello world")
			for i, got := range content {
				if got != want {
					t.Errorf("choice %d content = %q, want %q", i, got, want)
				}
			}
			// Finish step.
			for i := range tt.n {
				c := chunks[pos]
				pos++
				if len(c.Choices) != 1 || c.Choices[0].Index != i {
					t.Fatalf("finish chunk %d: choices %+v", i, c.Choices)
				}
				if got := string(c.Choices[0].Delta); got != `{}` {
					t.Errorf("finish chunk %d delta = %s, want {}", i, got)
				}
				if fr := c.Choices[0].FinishReason; fr == nil || *fr != "stop" {
					t.Errorf("finish chunk %d finish_reason = %v, want stop", i, fr)
				}
				if c.Usage != nil {
					t.Errorf("finish chunk %d has usage", i)
				}
			}
			// Usage chunk only when asked.
			if tt.wantUsage {
				c := chunks[pos]
				pos++
				if c.Choices == nil || len(c.Choices) != 0 {
					t.Errorf("usage chunk choices = %+v, want []", c.Choices)
				}
				completion := 17 * tt.n
				wantU := wantUsage{PromptTokens: 13, CompletionTokens: completion, TotalTokens: 13 + completion}
				if c.Usage == nil || *c.Usage != wantU {
					t.Errorf("usage chunk usage = %+v, want %+v", c.Usage, wantU)
				}
			}
			if pos != len(chunks) {
				t.Errorf("%d unexpected trailing chunks", len(chunks)-pos)
			}
		})
	}
}

// itoa formats n as JSON.
func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestChatCompletionStreamIsPacedAndFlushed(t *testing.T) {
	t.Parallel()
	const delay, chunks = 60 * time.Millisecond, 4
	opts := defaultOptions()
	opts.chunkDelay, opts.chunks = delay, chunks
	srv := newTestServer(t, opts)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var times []time.Time
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			times = append(times, time.Now())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(times) != chunks+3 {
		t.Fatalf("%d events, want %d", len(times), chunks+3)
	}
	// The role chunk is flushed before the first delay; everything after
	// it waits chunks*delay, so an unflushed stream would show no gap.
	if gap := times[len(times)-1].Sub(times[0]); gap < chunks*delay/2 {
		t.Errorf("first to last event took %v, want about %v: events are not flushed one by one", gap, chunks*delay)
	}
}

func TestChatCompletionStreamStopsWhenClientGoesAway(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	opts := defaultOptions()
	opts.chunkDelay, opts.chunks = time.Second, 8 // 8s if it ran to the end
	opts.logger = slog.New(slog.NewTextHandler(logs, nil))
	srv := newTestServer(t, opts)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel()
	// The handler logs when it returns.
	waitFor(t, 3*time.Second, "the stream handler to return", func() bool {
		return strings.Contains(logs.String(), "path=/v1/chat/completions")
	})
}

func TestEmbeddings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		body       string
		wantModel  string
		wantCount  int
		wantDims   int
		wantTokens int
	}{
		{name: "string", body: `{"model":"sample-small","input":"hello world"}`, wantModel: "sample-small", wantCount: 1, wantDims: 8, wantTokens: 2},
		{name: "array_of_strings", body: `{"model":"sample-large","input":["a b","c"]}`, wantModel: "sample-large", wantCount: 2, wantDims: 8, wantTokens: 3},
		{name: "token_ids", body: `{"model":"sample-small","input":[1,2,3]}`, wantModel: "sample-small", wantCount: 1, wantDims: 8, wantTokens: 3},
		{name: "token_arrays", body: `{"model":"sample-small","input":[[1,2],[3],[4,5,6]]}`, wantModel: "sample-small", wantCount: 3, wantDims: 8, wantTokens: 6},
		{name: "dimensions", body: `{"model":"sample-small","input":"hello","dimensions":16}`, wantModel: "sample-small", wantCount: 1, wantDims: 16, wantTokens: 1},
		{name: "unknown_model_falls_back_to_first", body: `{"model":"text-embedding-3-small","input":"x"}`, wantModel: "sample-small", wantCount: 1, wantDims: 8, wantTokens: 1},
	}
	srv := newTestServer(t, fastOptions())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := do(t, srv, http.MethodPost, "/v1/embeddings", tt.body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200; body %s", resp.StatusCode, body)
			}
			var got gotEmbeddings
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if got.Object != "list" || got.Model != tt.wantModel {
				t.Errorf("object %q model %q, want list %q", got.Object, got.Model, tt.wantModel)
			}
			if got.Usage.PromptTokens != tt.wantTokens || got.Usage.TotalTokens != tt.wantTokens {
				t.Errorf("usage = %+v, want %d prompt and total tokens", got.Usage, tt.wantTokens)
			}
			if len(got.Data) != tt.wantCount {
				t.Fatalf("%d vectors, want %d", len(got.Data), tt.wantCount)
			}
			var vecs [][]float32
			for i, d := range got.Data {
				var vec []float32
				if err := json.Unmarshal(d.Embedding, &vec); err != nil {
					t.Fatalf("data[%d].embedding: %v", i, err)
				}
				if d.Object != "embedding" || d.Index != i {
					t.Errorf("data[%d]: object %q index %d", i, d.Object, d.Index)
				}
				if len(vec) != tt.wantDims {
					t.Errorf("data[%d] has %d dimensions, want %d", i, len(vec), tt.wantDims)
				}
				var norm float64
				for _, f := range vec {
					norm += float64(f) * float64(f)
				}
				if math.Abs(norm-1) > 1e-5 {
					t.Errorf("data[%d] squared norm = %v, want 1", i, norm)
				}
				vecs = append(vecs, vec)
			}
			for i := 1; i < len(vecs); i++ {
				if equalFloats(vecs[0], vecs[i]) {
					t.Errorf("data[0] and data[%d] are equal for different inputs", i)
				}
			}
		})
	}
}

// docVector computes an input's vector from the recipe in the package doc.
func docVector(data string, dims int) []float32 {
	v := make([]float64, dims)
	var norm float64
	for j := range v {
		h := fnv.New64a()
		h.Write([]byte(data))
		h.Write([]byte{byte(j), byte(j >> 8), byte(j >> 16), byte(j >> 24)})
		v[j] = float64(h.Sum64()>>11)/(1<<53)*2 - 1
		norm += v[j] * v[j]
	}
	out := make([]float32, dims)
	for j := range v {
		out[j] = float32(v[j] / math.Sqrt(norm))
	}
	return out
}

// equalFloats reports whether a and b hold exactly the same values.
func equalFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEmbeddingVectorsAreDeterministic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input string
		dims  int
		data  string // what the doc says is hashed
	}{
		{name: "string", input: `"hello world"`, dims: 8, data: "hello world"},
		{name: "string_12_dims", input: `"hello world"`, dims: 12, data: "hello world"},
		{name: "token_ids", input: `[15339, 1917]`, dims: 8, data: "15339 1917"},
		{name: "empty_string", input: `""`, dims: 4, data: ""},
	}
	srv := newTestServer(t, fastOptions())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := docVector(tt.data, tt.dims)
			for range 2 { // same answer every time
				_, body := do(t, srv, http.MethodPost, "/v1/embeddings", `{"input":`+tt.input+`,"dimensions":`+itoa(tt.dims)+`}`, nil)
				var got gotEmbeddings
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatal(err)
				}
				var vec []float32
				if err := json.Unmarshal(got.Data[0].Embedding, &vec); err != nil {
					t.Fatal(err)
				}
				if !equalFloats(vec, want) {
					t.Errorf("vector = %v, want %v", vec, want)
				}
			}
		})
	}
}

func TestEmbeddingsBase64(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input string
		dims  int
	}{
		{name: "string_8_dims", input: `"hello world"`, dims: 8},
		{name: "strings_3_dims", input: `["a","b"]`, dims: 3},
		{name: "token_arrays_64_dims", input: `[[1,2],[3]]`, dims: 64},
	}
	srv := newTestServer(t, fastOptions())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fetch := func(format string) gotEmbeddings {
				resp, body := do(t, srv, http.MethodPost, "/v1/embeddings",
					`{"input":`+tt.input+`,"dimensions":`+itoa(tt.dims)+`,"encoding_format":"`+format+`"}`, nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: status %d: %s", format, resp.StatusCode, body)
				}
				var got gotEmbeddings
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatal(err)
				}
				return got
			}
			floats, encoded := fetch("float"), fetch("base64")
			if len(floats.Data) != len(encoded.Data) || len(floats.Data) == 0 {
				t.Fatalf("%d float vectors, %d base64 vectors", len(floats.Data), len(encoded.Data))
			}
			for i := range floats.Data {
				var want []float32
				if err := json.Unmarshal(floats.Data[i].Embedding, &want); err != nil {
					t.Fatal(err)
				}
				var s string
				if err := json.Unmarshal(encoded.Data[i].Embedding, &s); err != nil {
					t.Fatalf("base64 embedding is not a string: %s", encoded.Data[i].Embedding)
				}
				raw, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					t.Fatal(err)
				}
				if len(raw) != 4*tt.dims {
					t.Fatalf("decoded %d bytes, want %d", len(raw), 4*tt.dims)
				}
				got := make([]float32, tt.dims)
				for j := range got {
					got[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
				}
				if !equalFloats(got, want) {
					t.Errorf("data[%d]: base64 decodes to %v, float format gave %v", i, got, want)
				}
			}
		})
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantType   string
		wantParam  string // "" means null
		wantCode   string // "" means null
	}{
		{name: "chat_malformed_json", method: "POST", path: "/v1/chat/completions", body: `{"model":`, wantStatus: 400, wantType: "invalid_request_error", wantCode: "invalid_json"},
		{name: "chat_trailing_garbage", method: "POST", path: "/v1/chat/completions", body: `{"messages":[]} x`, wantStatus: 400, wantType: "invalid_request_error", wantCode: "invalid_json"},
		{name: "chat_missing_messages", method: "POST", path: "/v1/chat/completions", body: `{"model":"sample-small"}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "messages", wantCode: "missing_required_parameter"},
		{name: "chat_null_messages", method: "POST", path: "/v1/chat/completions", body: `{"messages":null}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "messages", wantCode: "missing_required_parameter"},
		{name: "chat_empty_messages", method: "POST", path: "/v1/chat/completions", body: `{"messages":[]}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "messages", wantCode: "empty_array"},
		{name: "chat_n_zero", method: "POST", path: "/v1/chat/completions", body: `{"n":0,"messages":[{"role":"user","content":"hi"}]}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "n", wantCode: "invalid_value"},
		{name: "chat_bad_content", method: "POST", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":42}]}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "messages[0].content", wantCode: "invalid_type"},
		{name: "chat_wrong_method", method: "GET", path: "/v1/chat/completions", wantStatus: 405, wantType: "invalid_request_error", wantCode: "method_not_allowed"},
		{name: "unknown_path", method: "POST", path: "/v1/completions", body: `{}`, wantStatus: 404, wantType: "invalid_request_error", wantCode: "unknown_url"},
		{name: "root_path", method: "GET", path: "/", wantStatus: 404, wantType: "invalid_request_error", wantCode: "unknown_url"},
		{name: "trailing_slash", method: "GET", path: "/v1/models/", wantStatus: 404, wantType: "invalid_request_error", wantCode: "unknown_url"},
		{name: "unknown_model", method: "GET", path: "/v1/models/gpt-4o", wantStatus: 404, wantType: "invalid_request_error", wantParam: "model", wantCode: "model_not_found"},
		{name: "embeddings_malformed_json", method: "POST", path: "/v1/embeddings", body: `[`, wantStatus: 400, wantType: "invalid_request_error", wantCode: "invalid_json"},
		{name: "embeddings_missing_input", method: "POST", path: "/v1/embeddings", body: `{"model":"sample-small"}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "input", wantCode: "missing_required_parameter"},
		{name: "embeddings_empty_array", method: "POST", path: "/v1/embeddings", body: `{"input":[]}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "input", wantCode: "invalid_value"},
		{name: "embeddings_mixed_array", method: "POST", path: "/v1/embeddings", body: `{"input":["a",1]}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "input", wantCode: "invalid_value"},
		{name: "embeddings_object_input", method: "POST", path: "/v1/embeddings", body: `{"input":{"a":1}}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "input", wantCode: "invalid_value"},
		{name: "embeddings_zero_dimensions", method: "POST", path: "/v1/embeddings", body: `{"input":"a","dimensions":0}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "dimensions", wantCode: "invalid_value"},
		{name: "embeddings_bad_encoding", method: "POST", path: "/v1/embeddings", body: `{"input":"a","encoding_format":"hex"}`, wantStatus: 400, wantType: "invalid_request_error", wantParam: "encoding_format", wantCode: "invalid_value"},
	}
	srv := newTestServer(t, fastOptions())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := do(t, srv, tt.method, tt.path, tt.body, nil)
			checkError(t, resp, body, tt.wantStatus, tt.wantType, tt.wantParam, tt.wantCode)
			if tt.wantStatus == http.StatusMethodNotAllowed && resp.Header.Get("Allow") != http.MethodPost {
				t.Errorf("Allow = %q, want POST", resp.Header.Get("Allow"))
			}
		})
	}
}

// checkError asserts an OpenAI error envelope with all four fields present.
func checkError(tb testing.TB, resp *http.Response, body []byte, status int, typ, param, code string) {
	tb.Helper()
	if resp.StatusCode != status {
		tb.Errorf("status = %d, want %d; body %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		tb.Errorf("Content-Type = %q, want application/json", ct)
	}
	var env struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Error == nil {
		tb.Fatalf("not an OpenAI error envelope: %s (%v)", body, err)
	}
	field := func(name, want string) {
		raw, ok := env.Error[name]
		if !ok {
			tb.Errorf("error.%s missing in %s", name, body)
			return
		}
		wantRaw := "null"
		if want != "" {
			b, _ := json.Marshal(want)
			wantRaw = string(b)
		}
		if string(raw) != wantRaw {
			tb.Errorf("error.%s = %s, want %s", name, raw, wantRaw)
		}
	}
	var msg string
	if err := json.Unmarshal(env.Error["message"], &msg); err != nil || msg == "" {
		tb.Errorf("error.message = %s, want a non-empty string", env.Error["message"])
	}
	field("type", typ)
	field("param", param)
	field("code", code)
}

func TestRequireBearer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		require    string
		auth       string
		wantStatus int
	}{
		{name: "not_required_no_header", require: "", auth: "", wantStatus: 200},
		{name: "required_no_header", require: "s3cret", auth: "", wantStatus: 401},
		{name: "required_wrong_token", require: "s3cret", auth: "Bearer nope", wantStatus: 401},
		{name: "required_token_prefix", require: "s3cret", auth: "Bearer s3cre", wantStatus: 401},
		{name: "required_basic_scheme", require: "s3cret", auth: "Basic czNjcmV0", wantStatus: 401},
		{name: "required_right_token", require: "s3cret", auth: "Bearer s3cret", wantStatus: 200},
		{name: "scheme_is_case_insensitive", require: "s3cret", auth: "bearer s3cret", wantStatus: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := fastOptions()
			opts.requireBearer = tt.require
			srv := newTestServer(t, opts)
			header := map[string]string{}
			if tt.auth != "" {
				header["Authorization"] = tt.auth
			}
			for _, path := range []string{"/v1/models", "/v1/chat/completions"} {
				method, body := http.MethodGet, ""
				if path == "/v1/chat/completions" {
					method, body = http.MethodPost, `{"messages":[{"role":"user","content":"hi"}]}`
				}
				resp, b := do(t, srv, method, path, body, header)
				if tt.wantStatus == http.StatusUnauthorized {
					checkError(t, resp, b, 401, "invalid_request_error", "", "invalid_api_key")
					if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
						t.Errorf("WWW-Authenticate = %q, want Bearer", resp.Header.Get("WWW-Authenticate"))
					}
				} else if resp.StatusCode != tt.wantStatus {
					t.Errorf("%s: status = %d, want %d; body %s", path, resp.StatusCode, tt.wantStatus, b)
				}
			}
		})
	}
}

func TestTestHooks(t *testing.T) {
	t.Parallel()
	const chat = `{"model":"%s","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name        string
		method      string
		path        string
		body        string
		header      map[string]string
		wantStatus  int
		wantType    string // for errors
		wantCode    string // for errors
		wantModel   string // for successful chat answers
		wantAtLeast time.Duration
	}{
		{name: "status_header_503", method: "POST", path: "/v1/chat/completions", body: strings.ReplaceAll(chat, "%s", "sample-small"),
			header: map[string]string{"X-Sample-Status": "503"}, wantStatus: 503, wantType: "server_error"},
		{name: "status_header_429", method: "GET", path: "/v1/models",
			header: map[string]string{"X-Sample-Status": "429"}, wantStatus: 429, wantType: "requests", wantCode: "rate_limit_exceeded"},
		{name: "status_header_not_a_number", method: "GET", path: "/v1/models",
			header: map[string]string{"X-Sample-Status": "soon"}, wantStatus: 400, wantType: "invalid_request_error", wantCode: "invalid_test_hook"},
		{name: "status_header_success_refused", method: "GET", path: "/v1/models",
			header: map[string]string{"X-Sample-Status": "200"}, wantStatus: 400, wantType: "invalid_request_error", wantCode: "invalid_test_hook"},
		{name: "delay_header", method: "POST", path: "/v1/chat/completions", body: strings.ReplaceAll(chat, "%s", "sample-small"),
			header: map[string]string{"X-Sample-Delay": "200ms"}, wantStatus: 200, wantModel: "sample-small", wantAtLeast: 200 * time.Millisecond},
		{name: "delay_header_invalid", method: "GET", path: "/v1/models",
			header: map[string]string{"X-Sample-Delay": "-1s"}, wantStatus: 400, wantType: "invalid_request_error", wantCode: "invalid_test_hook"},
		{name: "delay_then_status", method: "GET", path: "/v1/models",
			header: map[string]string{"X-Sample-Delay": "100ms", "X-Sample-Status": "502"}, wantStatus: 502, wantType: "server_error", wantAtLeast: 100 * time.Millisecond},
		{name: "model_fail_503_chat", method: "POST", path: "/v1/chat/completions", body: strings.ReplaceAll(chat, "%s", "sample-fail-503"),
			wantStatus: 503, wantType: "server_error", wantCode: "sample_unavailable"},
		{name: "model_fail_503_stream", method: "POST", path: "/v1/chat/completions", body: `{"model":"sample-fail-503","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			wantStatus: 503, wantType: "server_error", wantCode: "sample_unavailable"},
		{name: "model_fail_503_embeddings", method: "POST", path: "/v1/embeddings", body: `{"model":"sample-fail-503","input":"hi"}`,
			wantStatus: 503, wantType: "server_error", wantCode: "sample_unavailable"},
		{name: "model_slow_chat", method: "POST", path: "/v1/chat/completions", body: strings.ReplaceAll(chat, "%s", "sample-slow"),
			wantStatus: 200, wantModel: "sample-slow", wantAtLeast: 500 * time.Millisecond},
	}
	srv := newTestServer(t, fastOptions())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			resp, body := do(t, srv, tt.method, tt.path, tt.body, tt.header)
			if elapsed := time.Since(start); elapsed < tt.wantAtLeast {
				t.Errorf("answered after %v, want at least %v", elapsed, tt.wantAtLeast)
			}
			if tt.wantStatus >= 400 {
				checkError(t, resp, body, tt.wantStatus, tt.wantType, "", tt.wantCode)
				return
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tt.wantStatus, body)
			}
			var got gotCompletion
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if got.Model != tt.wantModel || len(got.Choices) != 1 || got.Choices[0].Message.Content != sampleAnswer(tt.wantModel, "hi") {
				t.Errorf("model %q choices %+v, want a normal answer from %q", got.Model, got.Choices, tt.wantModel)
			}
		})
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
