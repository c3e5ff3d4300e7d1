package main

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// This file is the Gemini wire (--wire gemini): {base}/models/{model}:
// generateContent, :streamGenerateContent (?alt=sse), :batchEmbedContents
// and :embedContent, as documented at
// https://ai.google.dev/api/generate-content and
// https://ai.google.dev/api/embeddings. Shapes follow the recorded answers
// in server/backends/gemini/testdata: JSON answers are indented by two
// spaces, SSE events are "data: JSON\r\n\r\n" with a space after each
// colon, as Google's servers write them.

// geminiRequest is the part of a generateContent request the sample reads;
// other fields are accepted and ignored.
type geminiRequest struct {
	Contents          []geminiContent `json:"contents"`
	SystemInstruction *geminiContent  `json:"systemInstruction"`
	Tools             []struct {
		FunctionDeclarations []struct {
			Name                 string          `json:"name"`
			Parameters           json.RawMessage `json:"parameters"`
			ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
	ToolConfig *struct {
		FunctionCallingConfig struct {
			Mode                 string   `json:"mode"`
			AllowedFunctionNames []string `json:"allowedFunctionNames"`
		} `json:"functionCallingConfig"`
	} `json:"toolConfig"`
	GenerationConfig *struct {
		MaxOutputTokens *int     `json:"maxOutputTokens"`
		StopSequences   []string `json:"stopSequences"`
		CandidateCount  *int     `json:"candidateCount"`
	} `json:"generationConfig"`
}

// geminiContent is one turn: a role (user or model) and its parts.
type geminiContent struct {
	Parts []geminiPart `json:"parts"`
	Role  string       `json:"role,omitempty"`
}

// geminiPart is one part of a turn, in and out. Exactly one of its fields
// other than ThoughtSignature is set.
type geminiPart struct {
	Text             string          `json:"text,omitempty"`
	InlineData       json.RawMessage `json:"inlineData,omitempty"`
	FileData         json.RawMessage `json:"fileData,omitempty"`
	FunctionCall     *geminiCall     `json:"functionCall,omitempty"`
	FunctionResponse json.RawMessage `json:"functionResponse,omitempty"`
	ThoughtSignature string          `json:"thoughtSignature,omitempty"`
}

// geminiCall is a functionCall part: the function's name and its arguments.
type geminiCall struct {
	Name string         `json:"name"`
	Args map[string]any `json:"args"`
}

// geminiResponse is a GenerateContentResponse, its fields in the API's
// order.
type geminiResponse struct {
	Candidates    []geminiCandidate `json:"candidates"`
	UsageMetadata geminiUsage       `json:"usageMetadata"`
	ModelVersion  string            `json:"modelVersion"`
	ResponseID    string            `json:"responseId"`
}

// geminiCandidate is one candidate; FinishReason is set on the last chunk.
type geminiCandidate struct {
	Content      geminiContent `json:"content"`
	FinishReason string        `json:"finishReason,omitempty"`
	Index        int           `json:"index"`
}

// geminiUsage is usageMetadata, in tokens (the sample's words).
// promptTokenCount includes cachedContentTokenCount.
type geminiUsage struct {
	PromptTokenCount        int                   `json:"promptTokenCount"`
	CandidatesTokenCount    int                   `json:"candidatesTokenCount"`
	TotalTokenCount         int                   `json:"totalTokenCount"`
	CachedContentTokenCount int                   `json:"cachedContentTokenCount,omitempty"`
	PromptTokensDetails     []geminiModalityCount `json:"promptTokensDetails"`
}

// geminiModalityCount is one entry of promptTokensDetails.
type geminiModalityCount struct {
	Modality   string `json:"modality"`
	TokenCount int    `json:"tokenCount"`
}

// geminiStatus maps a status to Google's canonical error status name, per
// https://ai.google.dev/gemini-api/docs/troubleshooting.
func geminiStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return "NOT_FOUND"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

// writeGeminiError writes status with Google's error body,
// {"error":{"code":STATUS,"message":...,"status":NAME}}.
func writeGeminiError(w http.ResponseWriter, status int, message string) {
	type detail struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
	}
	writeIndented(w, status, struct {
		Error detail `json:"error"`
	}{detail{status, message, geminiStatus(status)}})
}

// writeIndented writes v as JSON indented by two spaces, as Google does.
func writeIndented(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, `{"error": {"code": 500, "message": "flexway-sample: cannot encode response", "status": "INTERNAL"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// serveGemini checks the API key (when --require-key is set), applies the
// header hooks and routes {base}/models/{model}:{method}.
func (h *handler) serveGemini(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, message, _ string) { writeGeminiError(w, status, message) }
	if k := h.opts.requireKey; k != "" {
		got := r.Header.Get("x-goog-api-key")
		if got == "" {
			got = r.URL.Query().Get("key")
		}
		if got == "" {
			fail(http.StatusForbidden, "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.", "")
			return
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(k)) != 1 {
			fail(http.StatusBadRequest, "API key not valid. Please pass a valid API key.", "")
			return
		}
	}
	if !headerHooks(r, fail) {
		return
	}
	i := strings.LastIndex(r.URL.Path, "/models/")
	model, method, ok := "", "", false
	if i >= 0 {
		model, method, ok = strings.Cut(r.URL.Path[i+len("/models/"):], ":")
	}
	if !ok || model == "" {
		fail(http.StatusNotFound, fmt.Sprintf("Not found: %s %s. This sample serves POST {base}/models/{model}:generateContent, :streamGenerateContent, :batchEmbedContents and :embedContent.", r.Method, r.URL.Path), "")
		return
	}
	if r.Method != http.MethodPost {
		fail(http.StatusMethodNotAllowed, fmt.Sprintf("Method %s is not allowed on %s; use POST.", r.Method, r.URL.Path), "")
		return
	}
	if !wireModelHooks(r, model, fail) {
		return
	}
	switch method {
	case "generateContent":
		h.geminiGenerate(w, r, model, false, fail)
	case "streamGenerateContent":
		h.geminiGenerate(w, r, model, true, fail)
	case "batchEmbedContents", "embedContent":
		h.geminiEmbed(w, r, model, method == "batchEmbedContents", fail)
	default:
		fail(http.StatusNotFound, fmt.Sprintf("Method not found: %s.", method), "")
	}
}

// geminiGenerate serves generateContent and streamGenerateContent.
func (h *handler) geminiGenerate(w http.ResponseWriter, r *http.Request, model string, stream bool, fail failFunc) {
	var req geminiRequest
	if !geminiRead(w, r, &req, fail) {
		return
	}
	if len(req.Contents) == 0 {
		fail(http.StatusBadRequest, "* GenerateContentRequest.contents: contents is not specified\n", "")
		return
	}
	var maxTokens *int
	var stops []string
	if g := req.GenerationConfig; g != nil {
		if g.MaxOutputTokens != nil && *g.MaxOutputTokens < 1 {
			fail(http.StatusBadRequest, "* GenerateContentRequest.generation_config.max_output_tokens: max_output_tokens must be positive.\n", "")
			return
		}
		if g.CandidateCount != nil && *g.CandidateCount != 1 {
			fail(http.StatusBadRequest, "* GenerateContentRequest.generation_config.candidate_count: the sample serves one candidate.\n", "")
			return
		}
		maxTokens, stops = g.MaxOutputTokens, g.StopSequences
	}
	prompt, cached := 0, 0
	if si := req.SystemInstruction; si != nil {
		// The sample plays an implicit cache: the system instruction is
		// counted as cached content.
		cached = countWords(geminiText(si.Parts))
		prompt += cached
	}
	lastUser, lastHasResponse := "", false
	for i, c := range req.Contents {
		if c.Role != "" && c.Role != "user" && c.Role != "model" {
			fail(http.StatusBadRequest, fmt.Sprintf("Please use a valid role: user, model. (contents[%d].role)", i), "")
			return
		}
		text := geminiText(c.Parts)
		prompt += countWords(text) + tokensPerMessage
		if c.Role != "model" {
			lastUser, lastHasResponse = text, false
			for _, p := range c.Parts {
				lastHasResponse = lastHasResponse || len(p.FunctionResponse) > 0
			}
		}
	}

	model = h.resolveModel(model)
	text, stop := answerText(wireAnswer(model, wireGemini, lastUser), maxTokens, stops)
	var call *geminiCall
	if stop.reason != "max_tokens" && !lastHasResponse {
		var tools []sampleTool
		for _, t := range req.Tools {
			for _, f := range t.FunctionDeclarations {
				schema := f.Parameters
				if len(schema) == 0 {
					schema = f.ParametersJSONSchema
				}
				tools = append(tools, sampleTool{name: f.Name, schema: schema})
			}
		}
		forced, anyTool := "", false
		if tc := req.ToolConfig; tc != nil {
			fc := tc.FunctionCallingConfig
			anyTool = fc.Mode == "ANY"
			if len(fc.AllowedFunctionNames) > 0 {
				forced = fc.AllowedFunctionNames[0]
			}
			if fc.Mode == "NONE" {
				tools = nil
			}
		}
		if t, ok := pickTool(tools, forced, anyTool, lastUser); ok {
			call = &geminiCall{Name: t.name, Args: sampleArgs(t.schema, lastUser)}
			text += " Calling the function " + t.name + "."
		}
	}
	finish := "STOP"
	if stop.reason == "max_tokens" {
		finish = "MAX_TOKENS"
	}
	completion := countWords(text)
	if call != nil {
		completion += 1 + len(call.Args)
	}
	head := geminiResponse{ModelVersion: model, ResponseID: fmt.Sprintf("sample-%d", h.seq.Add(1))}
	usage := func(candidates int) geminiUsage {
		return geminiUsage{
			PromptTokenCount: prompt, CandidatesTokenCount: candidates, TotalTokenCount: prompt + candidates,
			CachedContentTokenCount: cached, PromptTokensDetails: []geminiModalityCount{{"TEXT", prompt}},
		}
	}
	chunk := func(parts []geminiPart, finish string, candidates int) geminiResponse {
		c := head
		c.Candidates = []geminiCandidate{{Content: geminiContent{Role: "model", Parts: parts}, FinishReason: finish}}
		c.UsageMetadata = usage(candidates)
		return c
	}
	var callPart []geminiPart
	if call != nil {
		// A thoughtSignature rides on the call, as Gemini 2.5 sends one, so
		// that its round trip through the gateway can be seen.
		callPart = []geminiPart{{FunctionCall: call, ThoughtSignature: "c2FtcGxlLXNpZ25hdHVyZQ=="}}
	}
	if !stream {
		writeIndented(w, http.StatusOK, chunk(append([]geminiPart{{Text: text}}, callPart...), finish, completion))
		return
	}
	pieces := splitChunks(text, h.opts.chunks)
	chunks := make([]geminiResponse, 0, len(pieces)+1)
	sofar := ""
	for i, p := range pieces {
		sofar += p
		fin := ""
		if i == len(pieces)-1 && call == nil {
			fin = finish
		}
		chunks = append(chunks, chunk([]geminiPart{{Text: p}}, fin, countWords(sofar)))
	}
	if call != nil {
		chunks = append(chunks, chunk(callPart, finish, completion))
	}
	if r.URL.Query().Get("alt") != "sse" {
		// Without alt=sse Google streams one JSON array of the chunks.
		writeIndented(w, http.StatusOK, chunks)
		return
	}
	s := startSSE(w, r)
	for _, c := range chunks {
		b, err := json.Marshal(c)
		if err != nil || !s.pause(h) || !s.send(fmt.Appendf(nil, "data: %s\r\n\r\n", spaceAfterColons(b))) {
			return
		}
	}
}

// geminiRead reads r's JSON body into v, answering Google's 400 (or 413)
// through fail when it cannot, and reports whether it could.
func geminiRead(w http.ResponseWriter, r *http.Request, v any, fail failFunc) bool {
	msg, status := readJSON(w, r, v)
	if msg != "" {
		fail(status, "Invalid JSON payload received. "+msg, "")
	}
	return msg == ""
}

// geminiText returns the text of parts joined by spaces: text parts, the
// response of a functionResponse part and "[an image]" for inline or file
// data.
func geminiText(parts []geminiPart) string {
	var texts []string
	for _, p := range parts {
		switch {
		case p.Text != "":
			texts = append(texts, p.Text)
		case len(p.InlineData) > 0 || len(p.FileData) > 0:
			texts = append(texts, "[an image]")
		case len(p.FunctionResponse) > 0:
			var fr struct {
				Response json.RawMessage `json:"response"`
			}
			if json.Unmarshal(p.FunctionResponse, &fr) == nil && len(fr.Response) > 0 {
				texts = append(texts, string(fr.Response))
			}
		}
	}
	return strings.Join(texts, " ")
}

// spaceAfterColons rewrites compact JSON the way Google's SSE events are
// written: a space after every colon between a key and its value.
func spaceAfterColons(b []byte) []byte {
	out := make([]byte, 0, len(b)+len(b)/8)
	inString, escaped := false, false
	for _, c := range b {
		out = append(out, c)
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && c == ':':
			out = append(out, ' ')
		}
	}
	return out
}

// geminiEmbedRequest is one EmbedContentRequest, alone (embedContent) or
// in batchEmbedContents' requests.
type geminiEmbedRequest struct {
	Model                string         `json:"model"`
	Content              *geminiContent `json:"content"`
	OutputDimensionality *int           `json:"outputDimensionality"`
}

// geminiEmbedding is one embedding: its values.
type geminiEmbedding struct {
	Values []float32 `json:"values"`
}

// geminiEmbed serves batchEmbedContents ({"requests":[...]} →
// {"embeddings":[{"values":[...]}]}) and embedContent ({"content":...} →
// {"embedding":{"values":[...]}}), with the vectors of /v1/embeddings.
func (h *handler) geminiEmbed(w http.ResponseWriter, r *http.Request, model string, batch bool, fail failFunc) {
	var reqs []geminiEmbedRequest
	if batch {
		var body struct {
			Requests []geminiEmbedRequest `json:"requests"`
		}
		if !geminiRead(w, r, &body, fail) {
			return
		}
		if len(body.Requests) == 0 {
			fail(http.StatusBadRequest, "* BatchEmbedContentsRequest.requests: requests is not specified\n", "")
			return
		}
		if len(body.Requests) > maxInputs {
			fail(http.StatusBadRequest, fmt.Sprintf("* BatchEmbedContentsRequest.requests: at most %d requests are allowed in a batch.\n", maxInputs), "")
			return
		}
		reqs = body.Requests
	} else {
		var one geminiEmbedRequest
		if !geminiRead(w, r, &one, fail) {
			return
		}
		reqs = []geminiEmbedRequest{one}
	}
	out := make([]geminiEmbedding, 0, len(reqs))
	for i, q := range reqs {
		if batch && q.Model != "models/"+model {
			fail(http.StatusBadRequest, fmt.Sprintf("* BatchEmbedContentsRequest.requests[%d].model: model must be models/%s, the model of the URL.\n", i, model), "")
			return
		}
		if q.Content == nil || len(q.Content.Parts) == 0 {
			fail(http.StatusBadRequest, fmt.Sprintf("* BatchEmbedContentsRequest.requests[%d].content: content is not specified\n", i), "")
			return
		}
		dims := defaultDimensions
		if d := q.OutputDimensionality; d != nil {
			if *d < 1 || *d > maxDimensions {
				fail(http.StatusBadRequest, fmt.Sprintf("* requests[%d].output_dimensionality: must be from 1 to %d.\n", i, maxDimensions), "")
				return
			}
			dims = *d
		}
		out = append(out, geminiEmbedding{Values: embed([]byte(geminiText(q.Content.Parts)), dims)})
	}
	if batch {
		writeIndented(w, http.StatusOK, struct {
			Embeddings []geminiEmbedding `json:"embeddings"`
		}{out})
		return
	}
	writeIndented(w, http.StatusOK, struct {
		Embedding geminiEmbedding `json:"embedding"`
	}{out[0]})
}
