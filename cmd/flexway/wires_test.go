package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// wireFixture reads a wire file recorded from a provider's real API, in
// the testdata of the kind's translation package.
func wireFixture(t testing.TB, kind, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "server", "backends", kind, "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wireUpstream is a fake provider replaying recorded bytes: stream for a
// call that asks to stream (Anthropic's "stream": true, Gemini's
// :streamGenerateContent, A2A's message/stream), unary otherwise. An A2A
// answer, recorded as the answer to id "call-1", answers the request's
// own JSON-RPC id, as an agent does.
func wireUpstream(t testing.TB, kind, unary, stream string) *fakeUpstream {
	return newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		unary, stream := unary, stream
		if id, ok := body["id"].(string); ok && kind == "a2a" {
			quoted, _ := json.Marshal(id)
			unary = strings.ReplaceAll(unary, `"id":"call-1"`, `"id":`+string(quoted))
			stream = strings.ReplaceAll(stream, `"id":"call-1"`, `"id":`+string(quoted))
		}
		streamed := body["stream"] == true || strings.HasSuffix(r.URL.Path, ":streamGenerateContent") || body["method"] == "message/stream"
		if streamed {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(stream))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(unary))
	})
}

// wireBackend is a backend of kind at url, serving model.
func wireBackend(name, kind, url, model string) testBackend {
	b := testBackend{Name: name, Kind: kind, URL: url, Models: []string{model}, DefaultModel: model,
		Capabilities: []string{"chat", "vision"}, Timeout: "2s", IdleTimeout: "2s",
		Auth: "{type: header, name: x-api-key, secret: env:FLEXWAY_TEST_UPSTREAM_TOKEN}"}
	if kind == "gemini" {
		b.Auth = "{type: header, name: x-goog-api-key, secret: env:FLEXWAY_TEST_UPSTREAM_TOKEN}"
	}
	if kind == "a2a" {
		b.Auth, b.Bearer, b.Capabilities = "", true, []string{"chat"}
	}
	return b
}

// wireConfig is the base configuration with ai.backend main of kind at
// url; audit in the returned path.
func wireConfig(t testing.TB, bs ...testBackend) (string, string) {
	c := baseTestConfig("")
	c.Backends = bs
	c.Backend = bs[0].Name
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	c.AuditPath = path
	return c.yaml(), path
}

var wireCases = []struct {
	kind, model, path, unary, stream string
	content, streamContent           string
	prompt, completion, cached       int64
}{
	{kind: "anthropic", model: "claude-sonnet-4-5", unary: "decode/text.json", stream: "stream/text.sse",
		content: "Hello! How can I help?", streamContent: "Hello!\n\"é\"", prompt: 2112, completion: 6, cached: 2000},
	{kind: "gemini", model: "gemini-2.5-flash", path: "/v1beta", unary: "decode/text.gemini.json", stream: "stream/text.sse",
		content: "Hello, world!", streamContent: "The quick brown fox.", prompt: 1200, completion: 34, cached: 1000},
	{kind: "a2a", model: "agentx", path: "/a2a", unary: "send_message.json", stream: "stream_artifacts.sse",
		content: "It is sunny in Paris,\n22 degrees.", streamContent: "<section 1...><section 2...>\nReferences."},
}

// TestSDKAgainstEachWire: the official OpenAI SDK, JSON and stream,
// against each translated kind, the fake provider replaying recorded
// bytes; usage as OpenAI's (cached tokens included in prompt_tokens) and
// the audit line naming the backend.
func TestSDKAgainstEachWire(t *testing.T) {
	for _, tc := range wireCases {
		t.Run(tc.kind, func(t *testing.T) {
			up := wireUpstream(t, tc.kind, wireFixture(t, tc.kind, tc.unary), wireFixture(t, tc.kind, tc.stream))
			cfg, audit := wireConfig(t, wireBackend("w", tc.kind, up.URL+tc.path, tc.model))
			g := startGateway(t, cfg)
			client := sdkClient(g, demoKey)
			params := openai.ChatCompletionNewParams{Model: tc.model, MaxTokens: openai.Int(100),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Hello")}}
			resp, err := client.Chat.Completions.New(context.Background(), params)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Choices[0].Message.Content; got != tc.content {
				t.Errorf("content %q, want %q", got, tc.content)
			}
			if tc.prompt > 0 && (resp.Usage.PromptTokens != tc.prompt || resp.Usage.CompletionTokens != tc.completion ||
				resp.Usage.PromptTokensDetails.CachedTokens != tc.cached) {
				t.Errorf("usage %+v", resp.Usage)
			}
			stream := client.Chat.Completions.NewStreaming(context.Background(), params)
			var text strings.Builder
			finish := ""
			for stream.Next() {
				for _, ch := range stream.Current().Choices {
					text.WriteString(ch.Delta.Content)
					if ch.FinishReason != "" {
						finish = ch.FinishReason
					}
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if text.String() != tc.streamContent || finish != "stop" {
				t.Errorf("stream %q finish %q, want %q stop", text.String(), finish, tc.streamContent)
			}
			seen := up.requests()[0]
			switch tc.kind {
			case "anthropic":
				if seen.Path != "/v1/messages" || seen.Header.Get("X-Api-Key") != "upstream-secret-token" ||
					seen.Header.Get("Anthropic-Version") != "2023-06-01" || seen.Body["system"] != "Be brief." {
					t.Errorf("anthropic request %s %v %v", seen.Path, seen.Header, seen.Body)
				}
			case "gemini":
				if seen.Path != "/v1beta/models/gemini-2.5-flash:generateContent" || seen.Header.Get("X-Goog-Api-Key") != "upstream-secret-token" {
					t.Errorf("gemini request %s %v", seen.Path, seen.Header)
				}
			case "a2a":
				if seen.Body["method"] != "message/send" || seen.Header.Get("Authorization") != "Bearer upstream-secret-token" {
					t.Errorf("a2a request %v", seen.Body)
				}
			}
			g.stop()
			g.wait(t, 10*time.Second)
			lines := auditLines(t, audit)
			if len(lines) != 2 {
				t.Fatalf("%d audit lines", len(lines))
			}
			for _, l := range lines {
				if l["backend"] != "w" || l["outcome"] != "ok" {
					t.Errorf("audit line %v", l)
				}
			}
			if tc.kind == "a2a" && lines[0]["usage_estimated"] != true {
				t.Errorf("an agent reports no tokens: the line must say usage_estimated, got %v", lines[0])
			}
		})
	}
}

// TestWireErrorsReachTheSDK: an Anthropic 400 keeps its status and
// message in OpenAI's envelope; a 429 keeps Retry-After.
func TestWireErrorsReachTheSDK(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(up0(r)), "slow") {
			w.Header().Set("Retry-After", "9")
			w.WriteHeader(429)
			_, _ = w.Write([]byte(`{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`))
			return
		}
		w.WriteHeader(400)
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":"messages.0.content: text content blocks must be non-empty"}}`))
	})
	cfg, _ := wireConfig(t, wireBackend("w", "anthropic", up.URL, "claude-sonnet-4-5"))
	g := startGateway(t, cfg)
	client := sdkClient(g, demoKey)
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "claude-sonnet-4-5", MaxTokens: openai.Int(10),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Type != "invalid_request_error" ||
		!strings.Contains(apiErr.Message, "text content blocks must be non-empty") {
		t.Fatalf("400: %v", err)
	}
	_, err = client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "claude-sonnet-4-5", MaxTokens: openai.Int(10),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("slow")}})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Response.Header.Get("Retry-After") != "9" {
		t.Fatalf("429: %v", err)
	}
}
