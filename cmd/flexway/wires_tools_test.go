package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// toolTurns is a fake provider for a two-turn tool call: the first call
// is answered with first, the second with second, and each request body
// is kept.
func toolTurns(t *testing.T, first, second string) (*fakeUpstream, *[]map[string]any) {
	var bodies []map[string]any
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		bodies = append(bodies, body)
		w.Header().Set("Content-Type", "application/json")
		if len(bodies) == 1 {
			_, _ = w.Write([]byte(first))
			return
		}
		_, _ = w.Write([]byte(second))
	})
	return up, &bodies
}

var weatherTool = openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
	Name:        "get_weather",
	Description: openai.String("Weather of a city"),
	Parameters: openai.FunctionParameters{
		"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": false,
		"properties": map[string]any{"location": map[string]any{"type": []any{"string", "null"}}},
	},
})

// secondTurn runs the tool turns of a client: it asks, gets tool calls,
// answers each with "sunny" and asks again; it returns the first answer.
func secondTurn(t *testing.T, client openai.Client, model string) *openai.ChatCompletion {
	t.Helper()
	params := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(100), Tools: []openai.ChatCompletionToolUnionParam{weatherTool},
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")}}
	first, err := client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	msg := first.Choices[0].Message
	if first.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) == 0 {
		t.Fatalf("first turn: %+v", first.Choices[0])
	}
	params.Messages = append(params.Messages, msg.ToParam())
	for _, tc := range msg.ToolCalls {
		params.Messages = append(params.Messages, openai.ToolMessage("sunny", tc.ID))
	}
	if _, err := client.Chat.Completions.New(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	return first
}

// TestAnthropicToolsRoundTrip: tool_use → OpenAI tool_calls, and the
// client's echo → one assistant turn of tool_use blocks and one user turn
// of tool_result blocks, ids kept.
func TestAnthropicToolsRoundTrip(t *testing.T) {
	up, bodies := toolTurns(t, wireFixture(t, "anthropic", "decode/tool_use.json"), wireFixture(t, "anthropic", "decode/text.json"))
	cfg, _ := wireConfig(t, wireBackend("w", "anthropic", up.URL, "claude-sonnet-4-5"))
	g := startGateway(t, cfg)
	first := secondTurn(t, sdkClient(g, demoKey), "claude-sonnet-4-5")
	tc := first.Choices[0].Message.ToolCalls[0]
	if tc.ID != "toolu_01A09q90qw90lq917835lq9" || tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"location":"San Francisco, CA","unit":"celsius"}` {
		t.Errorf("tool call %+v", tc)
	}
	tools := (*bodies)[0]["tools"].([]any)
	if schema := tools[0].(map[string]any)["input_schema"].(map[string]any); schema["type"] != "object" {
		t.Errorf("input_schema %v", schema)
	}
	msgs := (*bodies)[1]["messages"].([]any)
	if len(msgs) != 3 {
		t.Fatalf("second turn messages %v", msgs)
	}
	var assistantTypes []string
	for _, b := range msgs[1].(map[string]any)["content"].([]any) {
		assistantTypes = append(assistantTypes, b.(map[string]any)["type"].(string))
	}
	if strings.Join(assistantTypes, ",") != "text,tool_use" {
		t.Errorf("assistant turn blocks %v", assistantTypes)
	}
	result := msgs[2].(map[string]any)["content"].([]any)[0].(map[string]any)
	if msgs[2].(map[string]any)["role"] != "user" || result["type"] != "tool_result" || result["tool_use_id"] != tc.ID {
		t.Errorf("tool result turn %v", msgs[2])
	}
}

// TestGeminiToolsRoundTrip: functionCall parts → tool_calls whose ids
// Flexway generated, unique, carrying the thoughtSignature back to Gemini
// on the next turn; tool results → functionResponse by name; the
// parameter schema reduced to what Gemini accepts.
func TestGeminiToolsRoundTrip(t *testing.T) {
	up, bodies := toolTurns(t, wireFixture(t, "gemini", "decode/function_call.gemini.json"), wireFixture(t, "gemini", "decode/text.gemini.json"))
	cfg, _ := wireConfig(t, wireBackend("w", "gemini", up.URL+"/v1beta", "gemini-2.5-flash"))
	g := startGateway(t, cfg)
	first := secondTurn(t, sdkClient(g, demoKey), "gemini-2.5-flash")
	calls := first.Choices[0].Message.ToolCalls
	var args map[string]any
	_ = json.Unmarshal([]byte(calls[0].Function.Arguments), &args)
	if len(calls) != 2 || calls[0].ID == calls[1].ID || args["city"] != "Paris" || !strings.HasPrefix(calls[0].ID, "call_") {
		t.Fatalf("tool calls %+v", calls)
	}
	decl := (*bodies)[0]["tools"].([]any)[0].(map[string]any)["functionDeclarations"].([]any)[0].(map[string]any)
	params := decl["parameters"].(map[string]any)
	loc := params["properties"].(map[string]any)["location"].(map[string]any)
	if _, ok := params["$schema"]; ok || params["additionalProperties"] != nil || loc["type"] != "string" || loc["nullable"] != true {
		t.Errorf("parameters not reduced: %v", params)
	}
	contents := (*bodies)[1]["contents"].([]any)
	if len(contents) != 3 {
		t.Fatalf("second turn contents %v", contents)
	}
	model := contents[1].(map[string]any)
	parts := model["parts"].([]any)
	var sig any
	for _, p := range parts {
		if fc, ok := p.(map[string]any)["functionCall"]; ok && fc.(map[string]any)["args"].(map[string]any)["city"] == "Paris" {
			sig = p.(map[string]any)["thoughtSignature"]
		}
	}
	if model["role"] != "model" || sig != "c2lnLW9uZQ==" {
		t.Errorf("model turn %v: the thoughtSignature must come back", model)
	}
	responses := contents[2].(map[string]any)["parts"].([]any)
	fr := responses[0].(map[string]any)["functionResponse"].(map[string]any)
	if len(responses) != 2 || fr["name"] != "get_weather" || fr["response"].(map[string]any)["content"] != "sunny" {
		t.Errorf("function responses %v", responses)
	}
}

// TestWireImages: a data: URI (image/jpg read as image/jpeg) and an https
// URL reach Anthropic as its two source types.
func TestWireImages(t *testing.T) {
	up, bodies := toolTurns(t, wireFixture(t, "anthropic", "decode/text.json"), "")
	c := baseTestConfig("")
	c.Backends, c.Backend = []testBackend{wireBackend("w", "anthropic", up.URL, "claude-sonnet-4-5")}, "w"
	c.Vision = &testVision{AllowedOrigins: []string{"https://images.example.com"}}
	g := startGateway(t, c.yaml())
	client := sdkClient(g, demoKey)
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "claude-sonnet-4-5", MaxTokens: openai.Int(10),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
			openai.TextContentPart("What is this?"),
			openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/jpg;base64,/9j/4AAQ"}),
			openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "https://images.example.com/cat.png"}),
		})}})
	if err != nil {
		t.Fatal(err)
	}
	blocks := (*bodies)[0]["messages"].([]any)[0].(map[string]any)["content"].([]any)
	b64 := blocks[1].(map[string]any)["source"].(map[string]any)
	url := blocks[2].(map[string]any)["source"].(map[string]any)
	if b64["type"] != "base64" || b64["media_type"] != "image/jpeg" || b64["data"] != "/9j/4AAQ" ||
		url["type"] != "url" || url["url"] != "https://images.example.com/cat.png" || url["media_type"] != nil {
		t.Errorf("image blocks %v", blocks)
	}
}

// TestGeminiEmbeddingsThroughTheSDK: /v1/embeddings to a gemini backend
// with the embeddings capability uses batchEmbedContents.
func TestGeminiEmbeddingsThroughTheSDK(t *testing.T) {
	up, bodies := toolTurns(t, wireFixture(t, "gemini", "embeddings.gemini-response.json"), "")
	b := wireBackend("w", "gemini", up.URL+"/v1beta", "gemini-embedding-001")
	b.Capabilities = []string{"embeddings"}
	cfg, _ := wireConfig(t, b)
	g := startGateway(t, cfg)
	client := sdkClient(g, demoKey)
	resp, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "gemini-embedding-001",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"hello", "world"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Data) != 2 || len(resp.Data[0].Embedding) == 0 || up.requests()[0].Path != "/v1beta/models/gemini-embedding-001:batchEmbedContents" {
		t.Errorf("embeddings %d, path %s", len(resp.Data), up.requests()[0].Path)
	}
	if reqs := (*bodies)[0]["requests"].([]any); len(reqs) != 2 {
		t.Errorf("batch %v", reqs)
	}
}
