package gemini

import "encoding/json"

// The wire structs follow https://ai.google.dev/api/generate-content and
// https://ai.google.dev/api/caching#Content (Content, Part, Blob, FileData,
// FunctionCall, FunctionResponse, Tool, ToolConfig, GenerationConfig).

type gContent struct {
	Role  string  `json:"role,omitempty"`
	Parts []gPart `json:"parts"`
}

type gPart struct {
	Text             string             `json:"text,omitempty"`
	Thought          bool               `json:"thought,omitempty"`
	ThoughtSignature string             `json:"thoughtSignature,omitempty"`
	InlineData       *gBlob             `json:"inlineData,omitempty"`
	FileData         *gFileData         `json:"fileData,omitempty"`
	FunctionCall     *gFunctionCall     `json:"functionCall,omitempty"`
	FunctionResponse *gFunctionResponse `json:"functionResponse,omitempty"`
}

type gBlob struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

type gFileData struct {
	MimeType string `json:"mimeType,omitempty"`
	FileURI  string `json:"fileUri"`
}

type gFunctionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

type gFunctionResponse struct {
	Name     string          `json:"name"`
	Response json.RawMessage `json:"response"`
}

type gTool struct {
	FunctionDeclarations []gFunctionDeclaration `json:"functionDeclarations"`
}

type gFunctionDeclaration struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

type gToolConfig struct {
	FunctionCallingConfig gFunctionCallingConfig `json:"functionCallingConfig"`
}

type gFunctionCallingConfig struct {
	Mode                 string   `json:"mode"`
	AllowedFunctionNames []string `json:"allowedFunctionNames,omitempty"`
}

type gGenerationConfig struct {
	MaxOutputTokens  *int64          `json:"maxOutputTokens,omitempty"`
	CandidateCount   *int32          `json:"candidateCount,omitempty"`
	Temperature      json.RawMessage `json:"temperature,omitempty"`
	TopP             json.RawMessage `json:"topP,omitempty"`
	Seed             json.RawMessage `json:"seed,omitempty"`
	PresencePenalty  json.RawMessage `json:"presencePenalty,omitempty"`
	FrequencyPenalty json.RawMessage `json:"frequencyPenalty,omitempty"`
	StopSequences    []string        `json:"stopSequences,omitempty"`
	ResponseMimeType string          `json:"responseMimeType,omitempty"`
	ResponseSchema   json.RawMessage `json:"responseSchema,omitempty"`
}

type gRequest struct {
	Contents          []gContent         `json:"contents"`
	SystemInstruction *gContent          `json:"systemInstruction,omitempty"`
	Tools             []gTool            `json:"tools,omitempty"`
	ToolConfig        *gToolConfig       `json:"toolConfig,omitempty"`
	GenerationConfig  *gGenerationConfig `json:"generationConfig,omitempty"`
}

type gUsageMetadata struct {
	PromptTokenCount        int64 `json:"promptTokenCount"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
	TotalTokenCount         int64 `json:"totalTokenCount"`
	CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
	ToolUsePromptTokenCount int64 `json:"toolUsePromptTokenCount"`
}
