package main

import (
	"strings"
	"testing"

	"google.golang.org/genai"
)

// TestGeminiSDKParsesTheSample checks the fake against Google's own Go SDK:
// GenerateContent, GenerateContentStream (alt=sse) and EmbedContent
// (batchEmbedContents) pointed at the sample parse its text, function
// call, usage and vectors.
func TestGeminiSDKParsesTheSample(t *testing.T) {
	t.Parallel()
	o := wireOptions(wireGemini)
	o.requireKey = "AIza-test"
	srv := newTestServer(t, o)
	client, err := genai.NewClient(t.Context(), &genai.ClientConfig{
		APIKey: "AIza-test", Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: srv.URL, APIVersion: "v1beta"},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &genai.GenerateContentConfig{
		SystemInstruction: genai.NewContentFromText("You are terse.", genai.RoleUser),
		Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{
			Name:       "get_weather",
			Parameters: &genai.Schema{Type: genai.TypeObject, Properties: map[string]*genai.Schema{"city": {Type: genai.TypeString}}, Required: []string{"city"}},
		}}}},
	}
	contents := genai.Text("Use get_weather for Paris")
	wantText := wireSampleAnswer("sample-gemini", "Gemini generateContent", "Use get_weather for Paris") + " Calling the function get_weather."

	resp, err := client.Models.GenerateContent(t.Context(), "sample-gemini", contents, cfg)
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.FunctionCalls()
	if resp.Text() != wantText || len(calls) != 1 || calls[0].Name != "get_weather" || calls[0].Args["city"] != "Use get_weather for Paris" {
		t.Fatalf("text %q calls %+v", resp.Text(), calls)
	}
	u := resp.UsageMetadata
	if u.PromptTokenCount != 11 || u.CachedContentTokenCount != 3 || u.CandidatesTokenCount != int32(countWords(wantText)+2) ||
		resp.Candidates[0].FinishReason != genai.FinishReasonStop || len(resp.Candidates[0].Content.Parts[1].ThoughtSignature) == 0 {
		t.Fatalf("usage %+v finish %q", u, resp.Candidates[0].FinishReason)
	}

	var text strings.Builder
	var last *genai.GenerateContentResponse
	for chunk, err := range client.Models.GenerateContentStream(t.Context(), "sample-gemini", contents, cfg) {
		if err != nil {
			t.Fatal(err)
		}
		text.WriteString(chunk.Text())
		last = chunk
	}
	if text.String() != wantText || last == nil || len(last.FunctionCalls()) != 1 || last.UsageMetadata.TotalTokenCount != 11+int32(countWords(wantText)+2) {
		t.Fatalf("stream text %q last %+v", text.String(), last)
	}

	dims := int32(4)
	emb, err := client.Models.EmbedContent(t.Context(), "sample-gemini-embedding",
		[]*genai.Content{genai.NewContentFromText("one", genai.RoleUser), genai.NewContentFromText("two", genai.RoleUser)},
		&genai.EmbedContentConfig{OutputDimensionality: &dims})
	if err != nil {
		t.Fatal(err)
	}
	if len(emb.Embeddings) != 2 || !equalFloats(emb.Embeddings[1].Values, docVector("two", 4)) {
		t.Fatalf("embeddings %+v", emb.Embeddings)
	}

	// An error answer parses as the SDK's genai.APIError.
	_, err = client.Models.GenerateContent(t.Context(), "sample-fail-503", contents, nil)
	apiErr, ok := err.(genai.APIError)
	if !ok || apiErr.Code != 503 || apiErr.Status != "UNAVAILABLE" {
		t.Fatalf("fail model: %T %v", err, err)
	}
}
