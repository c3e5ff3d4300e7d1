package main

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

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

// TestChatCompletionStreamPieces: the pieces mode streams exactly the
// given pieces as content deltas, and a JSON answer is them joined; any
// other message is echoed as before.
func TestChatCompletionStreamPieces(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, fastOptions())
	msg := `{\"pieces\": [\"card 4111 1111 \", \"1111 1111 ok\"]}`
	resp, raw := do(t, srv, http.MethodPost, "/v1/chat/completions", `{"model":"sample-large","stream":true,"messages":[{"role":"user","content":"`+msg+`"}]}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var got []string
	for _, ev := range parseSSE(t, raw) {
		var c gotChunk
		if ev == "[DONE]" || json.Unmarshal([]byte(ev), &c) != nil {
			continue
		}
		for _, ch := range c.Choices {
			var d struct{ Content *string }
			if json.Unmarshal(ch.Delta, &d) == nil && d.Content != nil && *d.Content != "" {
				got = append(got, *d.Content)
			}
		}
	}
	if want := []string{"card 4111 1111 ", "1111 1111 ok"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("content deltas %q, want %q", got, want)
	}
	_, raw = do(t, srv, http.MethodPost, "/v1/chat/completions", `{"model":"sample-large","messages":[{"role":"user","content":"`+msg+`"}]}`, nil)
	if !strings.Contains(string(raw), `"content":"card 4111 1111 1111 1111 ok"`) {
		t.Fatalf("JSON answer %s", raw)
	}
	_, raw = do(t, srv, http.MethodPost, "/v1/chat/completions", `{"model":"sample-large","messages":[{"role":"user","content":"{\"pieces\": [\"a\"], \"x\": 1}"}]}`, nil)
	if !strings.Contains(string(raw), "You said: ") {
		t.Fatalf("a message with more than pieces is echoed: %s", raw)
	}
}
