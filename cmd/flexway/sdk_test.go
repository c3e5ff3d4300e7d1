package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func sdkClient(g *testGW, key string) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(g.HTTP+"/v1"),
		option.WithAPIKey(key),
		option.WithMaxRetries(0),
		option.WithHeader("X-Caller-Secret", "must-not-travel"),
	)
}

func TestSDKChatCompletion(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	client := sdkClient(g, demoKey)

	resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "m-large",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
		Seed:     openai.Int(12345),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "Hello from upstream" {
		t.Fatalf("content = %q", got)
	}
	if resp.Usage.PromptTokens != 11 || resp.Usage.CompletionTokens != 4 || resp.SystemFingerprint != "fp_1" {
		t.Fatalf("usage/fingerprint lost: %+v %q", resp.Usage, resp.SystemFingerprint)
	}
	reqs := up.requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream saw %d requests", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1/chat/completions" || r.Body["model"] != "m-large" || r.Body["seed"] != float64(12345) {
		t.Fatalf("upstream request: %s %v", r.Path, r.Body)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer upstream-secret-token" {
		t.Fatalf("upstream auth = %q", got)
	}
	for k := range r.Header {
		switch k {
		case "Authorization", "Content-Type", "Content-Length", "Accept", "Accept-Encoding", "User-Agent", "Traceparent", "Tracestate":
		default:
			t.Errorf("caller or unexpected header reached upstream: %s: %v", k, r.Header[k])
		}
	}
}

func TestSDKUnlistedModelGetsDefault(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, strings.Replace(completion, `"model":"m-large"`, `"model":"m-small"`, 1)))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	client := sdkClient(g, demoKey)
	resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-unknown",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := up.requests()[0].Body["model"]; got != "m-small" || resp.Model != "m-small" {
		t.Fatalf("model sent %v, served %q; want m-small", got, resp.Model)
	}
}

// TestSDKStreamChunkByChunk asserts that each chunk reaches the client
// before the upstream sends the next: the upstream waits for the client's
// word after each content chunk.
func TestSDKStreamChunkByChunk(t *testing.T) {
	got := make(chan string, 8)
	late := make(chan string, 8)
	words := []string{"one ", "two ", "three"}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		send := func(s string) { fmt.Fprintf(w, "data: %s\n\n", s); f.Flush() }
		send(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m-large","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`)
		for _, word := range words {
			send(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m-large","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`, word))
			select {
			case w := <-got:
				if w != word {
					late <- "client got " + w + " while upstream sent " + word
				}
			case <-time.After(5 * time.Second):
				late <- word
			}
		}
		send(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m-large","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
		send(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m-large","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`)
		io.WriteString(w, "data: [DONE]\n\n")
	})
	g := startGateway(t, baseConfig(t, up.URL, ""))
	client := sdkClient(g, demoKey)
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "m-large",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("count")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var usage openai.CompletionUsage
	finish := ""
	for stream.Next() {
		c := stream.Current()
		if c.Usage.TotalTokens > 0 {
			usage = c.Usage
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				text.WriteString(ch.Delta.Content)
				got <- ch.Delta.Content
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	close(late)
	for l := range late {
		t.Errorf("chunk %q did not reach the client before the upstream went on", l)
	}
	if text.String() != "one two three" || finish != "stop" || usage.TotalTokens != 8 {
		t.Fatalf("text %q finish %q usage %+v", text.String(), finish, usage)
	}
	so, _ := up.requests()[0].Body["stream_options"].(map[string]any)
	if up.requests()[0].Body["stream"] != true || so["include_usage"] != true {
		t.Fatalf("upstream stream flags: %v", up.requests()[0].Body)
	}
}

func TestSDKEmbeddingsAndModels(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		jsonHandler(200, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.25,-0.5]},{"object":"embedding","index":1,"embedding":[1,2]}],"model":"m-small","usage":{"prompt_tokens":3,"total_tokens":3}}`)(w, r)
	})
	g := startGateway(t, baseConfig(t, up.URL, ""))
	client := sdkClient(g, demoKey)
	resp, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
		Model: "m-small",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Data) != 2 || resp.Data[0].Embedding[1] != -0.5 || resp.Data[1].Index != 1 || resp.Usage.PromptTokens != 3 {
		t.Fatalf("embeddings: %+v", resp)
	}
	if in, _ := up.requests()[0].Body["input"].([]any); len(in) != 2 || in[1] != "b" {
		t.Fatalf("upstream input: %v", up.requests()[0].Body)
	}
	page, err := client.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID+"/"+m.OwnedBy)
	}
	if strings.Join(ids, ",") != "m-large/main,m-small/main" {
		t.Fatalf("models: %v", ids)
	}
	m, err := client.Models.Get(context.Background(), "m-small")
	if err != nil || m.ID != "m-small" || m.OwnedBy != "main" {
		t.Fatalf("model m-small: %+v, %v", m, err)
	}
	_, err = client.Models.Get(context.Background(), "gpt-unknown")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("unknown model: %v", err)
	}
}

func TestSDKErrors(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(string(up0(r)), "rate-me") {
			w.Header().Set("Retry-After", "7")
			jsonHandler(429, `{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`)(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(503)
		io.WriteString(w, "<html>bad gateway</html>")
	})
	g := startGateway(t, baseConfig(t, up.URL, ""))
	params := func(msg string) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: "m-large", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(msg)}}
	}
	tests := []struct {
		name   string
		key    string
		msg    string
		status int
		code   string
	}{
		{"unknown key", "sk-wrong", "hi", 401, "invalid_api_key"},
		{"upstream 429 relayed as is", demoKey, "rate-me", 429, "rate_limit_exceeded"},
		{"upstream HTML 503 becomes 502", demoKey, "hi", 502, "upstream_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := sdkClient(g, tt.key)
			_, err := client.Chat.Completions.New(context.Background(), params(tt.msg))
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want *openai.Error", err)
			}
			if apiErr.StatusCode != tt.status || apiErr.Code != tt.code {
				t.Fatalf("status %d code %q, want %d %q (%s)", apiErr.StatusCode, apiErr.Code, tt.status, tt.code, apiErr.Message)
			}
			if strings.Contains(apiErr.Message, "html") {
				t.Fatalf("upstream garbage leaked into the message: %q", apiErr.Message)
			}
		})
	}
}

// up0 returns the request body the fake upstream recorded and re-armed.
func up0(r *http.Request) []byte {
	b, _ := io.ReadAll(r.Body)
	return b
}
