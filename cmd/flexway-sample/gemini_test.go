package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// geminiAnswer is a decoded GenerateContentResponse, as the tests read it.
type geminiAnswer struct {
	Candidates []struct {
		Content struct {
			Role  string `json:"role"`
			Parts []struct {
				Text         string `json:"text"`
				FunctionCall *struct {
					Name string         `json:"name"`
					Args map[string]any `json:"args"`
				} `json:"functionCall"`
				ThoughtSignature string `json:"thoughtSignature"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
		Index        *int   `json:"index"`
	} `json:"candidates"`
	UsageMetadata struct {
		PromptTokenCount        int `json:"promptTokenCount"`
		CandidatesTokenCount    int `json:"candidatesTokenCount"`
		TotalTokenCount         int `json:"totalTokenCount"`
		CachedContentTokenCount int `json:"cachedContentTokenCount"`
	} `json:"usageMetadata"`
	ModelVersion string `json:"modelVersion"`
	ResponseID   string `json:"responseId"`
}

// geminiToolRequest declares get_weather and asks for it by name.
const geminiToolRequest = `{"systemInstruction":{"parts":[{"text":"You are terse."}]},
	"contents":[{"role":"user","parts":[{"text":"Use get_weather for Paris"}]}],
	"tools":[{"functionDeclarations":[{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]}]}`

func TestGeminiGenerateContent(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, wireOptions(wireGemini))
	resp, body := do(t, srv, http.MethodPost, "/v1beta/models/sample-gemini:generateContent",
		`{"systemInstruction":{"parts":[{"text":"You are terse."}]},"contents":[{"role":"user","parts":[{"text":"Hello there"}]}]}`, nil)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	want := wireSampleAnswer("sample-gemini", "Gemini generateContent", "Hello there")
	n := countWords(want)
	// Byte for byte: indented by two spaces, in the API's field order.
	wantBody := `{
  "candidates": [
    {
      "content": {
        "parts": [
          {
            "text": "` + want + `"
          }
        ],
        "role": "model"
      },
      "finishReason": "STOP",
      "index": 0
    }
  ],
  "usageMetadata": {
    "promptTokenCount": 9,
    "candidatesTokenCount": ` + itoa(n) + `,
    "totalTokenCount": ` + itoa(n+9) + `,
    "cachedContentTokenCount": 3,
    "promptTokensDetails": [
      {
        "modality": "TEXT",
        "tokenCount": 9
      }
    ]
  },
  "modelVersion": "sample-gemini",
  "responseId": "sample-1"
}
`
	if string(body) != wantBody {
		t.Fatalf("body\n%s\nwant\n%s", body, wantBody)
	}
}

func TestGeminiFunctionCall(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, wireOptions(wireGemini))
	_, body := do(t, srv, http.MethodPost, "/v1beta/models/sample-gemini:generateContent", geminiToolRequest, nil)
	var a geminiAnswer
	if err := json.Unmarshal(body, &a); err != nil || len(a.Candidates) != 1 || len(a.Candidates[0].Content.Parts) != 2 {
		t.Fatalf("%v %s", err, body)
	}
	fc := a.Candidates[0].Content.Parts[1]
	if fc.FunctionCall == nil || fc.FunctionCall.Name != "get_weather" || fc.FunctionCall.Args["city"] != "Use get_weather for Paris" ||
		fc.ThoughtSignature == "" || a.Candidates[0].FinishReason != "STOP" {
		t.Fatalf("answer %s", body)
	}
	// mode NONE: no call; the second turn with a functionResponse: text.
	_, body = do(t, srv, http.MethodPost, "/v1beta/models/sample-gemini:generateContent",
		strings.Replace(geminiToolRequest, `"tools"`, `"toolConfig":{"functionCallingConfig":{"mode":"NONE"}},"tools"`, 1), nil)
	if strings.Contains(string(body), "functionCall") {
		t.Fatalf("mode NONE answered %s", body)
	}
	_, body = do(t, srv, http.MethodPost, "/v1beta/models/sample-gemini:generateContent", strings.Replace(geminiToolRequest,
		`"contents":[{"role":"user","parts":[{"text":"Use get_weather for Paris"}]}]`,
		`"contents":[{"role":"user","parts":[{"text":"Use get_weather for Paris"}]},{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}}]},
		{"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"content":"18C"}}}]}]`, 1), nil)
	if strings.Contains(string(body), "functionCall") || !strings.Contains(string(body), `You said: {\"content\":\"18C\"}`) {
		t.Fatalf("second turn answered %s", body)
	}
}

func TestGeminiStreamSSE(t *testing.T) {
	t.Parallel()
	o := wireOptions(wireGemini)
	o.chunks = 3
	srv := newTestServer(t, o)
	resp, body := do(t, srv, http.MethodPost, "/v1beta/models/sample-gemini:streamGenerateContent?alt=sse", geminiToolRequest, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := string(body)
	if !strings.HasSuffix(s, "\r\n\r\n") || strings.Contains(strings.ReplaceAll(s, "\r\n", ""), "\n") {
		t.Fatalf("framing is not data: ...\\r\\n\\r\\n: %q", s)
	}
	frames := strings.Split(strings.TrimSuffix(s, "\r\n\r\n"), "\r\n\r\n")
	if len(frames) != 4 {
		t.Fatalf("%d frames, want 3 text and 1 call", len(frames))
	}
	var text string
	for i, f := range frames {
		payload, ok := strings.CutPrefix(f, "data: ")
		var a geminiAnswer
		if !ok || json.Unmarshal([]byte(payload), &a) != nil || len(a.Candidates) != 1 || !strings.HasPrefix(payload, `{"candidates": [{"content": {"parts": [{`) {
			t.Fatalf("frame %d: %q", i, f)
		}
		c := a.Candidates[0]
		wantFinish := ""
		if i == 3 {
			wantFinish = "STOP"
		}
		u := a.UsageMetadata
		if c.FinishReason != wantFinish || u.PromptTokenCount != 11 || u.CachedContentTokenCount != 3 || u.TotalTokenCount != 11+u.CandidatesTokenCount {
			t.Fatalf("frame %d: finish %q usage %+v", i, c.FinishReason, u)
		}
		if i < 3 {
			text += c.Content.Parts[0].Text
			if u.CandidatesTokenCount != countWords(text) {
				t.Fatalf("frame %d: candidatesTokenCount %d is not cumulative (%d)", i, u.CandidatesTokenCount, countWords(text))
			}
		} else if c.Content.Parts[0].FunctionCall == nil || c.Content.Parts[0].FunctionCall.Name != "get_weather" {
			t.Fatalf("last frame %q", payload)
		}
	}
	if want := wireSampleAnswer("sample-gemini", "Gemini generateContent", "Use get_weather for Paris") + " Calling the function get_weather."; text != want {
		t.Fatalf("text %q, want %q", text, want)
	}

	// maxOutputTokens cuts the answer: MAX_TOKENS on the last chunk.
	_, body = do(t, srv, http.MethodPost, "/v1beta/models/sample-gemini:streamGenerateContent?alt=sse",
		`{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":2}}`, nil)
	if !strings.HasSuffix(string(body), `"finishReason": "MAX_TOKENS","index": 0}],"usageMetadata": {"promptTokenCount": 5,"candidatesTokenCount": 2,"totalTokenCount": 7,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 5}]},"modelVersion": "sample-gemini","responseId": "sample-2"}`+"\r\n\r\n") {
		t.Fatalf("max tokens stream %q", body)
	}
}

func TestGeminiEmbeddings(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, wireOptions(wireGemini))
	_, body := do(t, srv, http.MethodPost, "/v1beta/models/sample-gemini-embedding:batchEmbedContents", `{"requests":[
		{"model":"models/sample-gemini-embedding","content":{"parts":[{"text":"What is the meaning of life?"}]},"outputDimensionality":3},
		{"model":"models/sample-gemini-embedding","content":{"parts":[{"text":"How does photosynthesis work?"}]}}]}`, nil)
	var got struct {
		Embeddings []struct {
			Values []float32 `json:"values"`
		} `json:"embeddings"`
	}
	if err := json.Unmarshal(body, &got); err != nil || len(got.Embeddings) != 2 {
		t.Fatalf("%v %s", err, body)
	}
	// The vectors are /v1/embeddings' for the same text.
	if !equalFloats(got.Embeddings[0].Values, docVector("What is the meaning of life?", 3)) ||
		!equalFloats(got.Embeddings[1].Values, docVector("How does photosynthesis work?", defaultDimensions)) {
		t.Fatalf("vectors %v", got.Embeddings)
	}
	_, body = do(t, srv, http.MethodPost, "/v1beta/models/sample-gemini-embedding:embedContent", `{"content":{"parts":[{"text":"hi"}]},"outputDimensionality":2}`, nil)
	var one struct {
		Embedding struct {
			Values []float32 `json:"values"`
		} `json:"embedding"`
	}
	if err := json.Unmarshal(body, &one); err != nil || !equalFloats(one.Embedding.Values, docVector("hi", 2)) {
		t.Fatalf("embedContent %v %s", err, body)
	}
}

func TestGeminiErrors(t *testing.T) {
	t.Parallel()
	o := wireOptions(wireGemini)
	o.requireKey = "AIza-test"
	srv := newTestServer(t, o)
	key := map[string]string{"x-goog-api-key": "AIza-test"}
	for _, tc := range []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		gstatus                  string
	}{
		{"no key", "POST", "/v1beta/models/m:generateContent", `{}`, nil, 403, "PERMISSION_DENIED"},
		{"wrong key", "POST", "/v1beta/models/m:generateContent", `{}`, map[string]string{"x-goog-api-key": "nope"}, 400, "INVALID_ARGUMENT"},
		{"no contents", "POST", "/v1beta/models/m:generateContent", `{}`, key, 400, "INVALID_ARGUMENT"},
		{"bad json", "POST", "/v1beta/models/m:generateContent", `{`, key, 400, "INVALID_ARGUMENT"},
		{"bad role", "POST", "/v1beta/models/m:generateContent", `{"contents":[{"role":"system","parts":[{"text":"x"}]}]}`, key, 400, "INVALID_ARGUMENT"},
		{"unknown method", "POST", "/v1beta/models/m:countTokens", `{}`, key, 404, "NOT_FOUND"},
		{"unknown path", "POST", "/v1beta/files", `{}`, key, 404, "NOT_FOUND"},
		{"embed model mismatch", "POST", "/v1beta/models/m:batchEmbedContents", `{"requests":[{"model":"models/other","content":{"parts":[{"text":"x"}]}}]}`, key, 400, "INVALID_ARGUMENT"},
		{"fail model", "POST", "/v1beta/models/sample-fail-503:generateContent", `{}`, key, 503, "UNAVAILABLE"},
		{"429 hook", "POST", "/v1beta/models/m:generateContent", `{}`, map[string]string{"x-goog-api-key": "AIza-test", headerStatus: "429"}, 429, "RESOURCE_EXHAUSTED"},
	} {
		resp, body := do(t, srv, tc.method, tc.path, tc.body, tc.header)
		var e struct {
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Status  string `json:"status"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != tc.status || e.Error.Code != tc.status || e.Error.Status != tc.gstatus || e.Error.Message == "" {
			t.Errorf("%s: %d %s, want %d %s", tc.name, resp.StatusCode, body, tc.status, tc.gstatus)
		}
	}
	// ?key= is accepted as well as the header.
	if resp, body := do(t, srv, "POST", "/v1beta/models/m:generateContent?key=AIza-test", `{"contents":[{"parts":[{"text":"x"}]}]}`, nil); resp.StatusCode != 200 {
		t.Fatalf("?key=: %d %s", resp.StatusCode, body)
	}
}
