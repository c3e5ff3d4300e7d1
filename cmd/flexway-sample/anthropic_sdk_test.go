package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// TestAnthropicSDKParsesTheSample checks the fake against Anthropic's own Go
// SDK: Messages.New and Messages.NewStreaming pointed at the sample parse
// its text, usage and tool_use.
func TestAnthropicSDKParsesTheSample(t *testing.T) {
	t.Parallel()
	o := wireOptions(wireAnthropic)
	o.requireKey = "x"
	srv := newTestServer(t, o)
	client := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("x"), option.WithMaxRetries(0))
	params := anthropic.MessageNewParams{
		Model:     "sample-claude",
		MaxTokens: 200,
		System:    []anthropic.TextBlockParam{{Text: "You are terse."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Use get_weather for Paris"))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
			Name:        "get_weather",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}},
		}}},
	}
	wantText := wireSampleAnswer("sample-claude", "Anthropic Messages", "Use get_weather for Paris") + " Calling the tool get_weather."

	check := func(how string, m *anthropic.Message) {
		t.Helper()
		if len(m.Content) != 2 || m.Content[0].Type != "text" || m.Content[0].Text != wantText {
			t.Fatalf("%s: content %+v", how, m.Content)
		}
		tu := m.Content[1].AsToolUse()
		var input map[string]string
		if err := json.Unmarshal(tu.Input, &input); err != nil || tu.Name != "get_weather" || !strings.HasPrefix(tu.ID, "toolu_sample_") || input["city"] != "Use get_weather for Paris" {
			t.Fatalf("%s: tool_use %+v (%v)", how, tu, err)
		}
		if m.StopReason != anthropic.StopReasonToolUse || m.Usage.InputTokens != 8 || m.Usage.CacheReadInputTokens != 3 ||
			m.Usage.CacheCreationInputTokens != 0 || m.Usage.OutputTokens != int64(countWords(wantText)+2) {
			t.Fatalf("%s: stop %q usage %+v", how, m.StopReason, m.Usage)
		}
	}

	m, err := client.Messages.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	check("New", m)

	stream := client.Messages.NewStreaming(t.Context(), params)
	var acc anthropic.Message
	events := 0
	for stream.Next() {
		events++
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if events < 8 {
		t.Fatalf("%d events", events)
	}
	check("NewStreaming", &acc)

	// An error answer parses as the SDK's *anthropic.Error.
	bad := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("wrong"), option.WithMaxRetries(0))
	_, err = bad.Messages.New(t.Context(), params)
	apiErr, ok := err.(*anthropic.Error)
	if !ok || apiErr.StatusCode != 401 || !strings.Contains(apiErr.Error(), "authentication_error") {
		t.Fatalf("wrong key: %v", err)
	}
}
