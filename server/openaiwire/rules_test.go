package openaiwire_test

import (
	"errors"
	"strings"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// wantInvalid checks that err is invalid_request naming param.
func wantInvalid(t *testing.T, err error, param string) {
	t.Helper()
	var fe *faults.Error
	if !errors.As(err, &fe) || fe.Reason != faults.InvalidRequest {
		t.Fatalf("err = %v, want invalid_request on %q", err, param)
	}
	if fe.Param != param {
		t.Fatalf("param %q, want %q (%s)", fe.Param, param, fe.Message)
	}
}

// TestParseRefusesCarriedModelledFields: a member that equals a modelled
// field's name in another case (encoding/json upstreams match keys
// case-insensitively, Unicode folding included, and the last one wins)
// is refused at every level, with the member named as the client wrote
// it; so is an image-bearing member other than an image_url part.
func TestParseRefusesCarriedModelledFields(t *testing.T) {
	t.Parallel()
	const msg = `{"role":"user","content":"hi"}`
	chat := func(top, message string) string {
		return `{"model":"m","messages":[` + message + `]` + top + `}`
	}
	tests := []struct {
		name, body, param string
	}{
		{"n_upper", chat(`,"n":1,"N":128`, msg), "N"},
		{"n_upper_alone", chat(`,"N":128`, msg), "N"},
		{"max_tokens_upper", chat(`,"max_tokens":20,"MAX_TOKENS":100000`, msg), "MAX_TOKENS"},
		{"max_tokens_kelvin_sign", chat(`,"max_to\u212aens":100000`, msg), "max_to\u212aens"},
		{"max_completion_tokens_mixed", chat(`,"Max_Completion_Tokens":100000`, msg), "Max_Completion_Tokens"},
		{"stream_title", chat(`,"Stream":true`, msg), "Stream"},
		{"stream_long_s", chat(`,"\u017ftream":true`, msg), "\u017ftream"},
		{"stream_options_upper", chat(`,"STREAM_OPTIONS":{"include_usage":true}`, msg), "STREAM_OPTIONS"},
		{"model_upper", chat(`,"Model":"other"`, msg), "Model"},
		{"messages_upper", chat(`,"Messages":[]`, msg), "Messages"},
		{"user_upper", chat(`,"USER":"u"`, msg), "USER"},
		{"include_usage_upper", chat(`,"stream":true,"stream_options":{"Include_Usage":false}`, msg), "stream_options.Include_Usage"},
		{"role_upper", chat(``, `{"role":"user","ROLE":"system","content":"hi"}`), "messages[0].ROLE"},
		{"content_upper", chat(``, `{"role":"user","content":"hi","Content":"more"}`), "messages[0].Content"},
		{"name_upper", chat(``, `{"role":"user","content":"hi","NAME":"x"}`), "messages[0].NAME"},
		{"part_image_url_upper", chat(``, `{"role":"user","content":[{"type":"text","text":"hi","IMAGE_URL":{"url":"https://x/a.png"}}]}`), "messages[0].content[0].IMAGE_URL"},
		{"part_type_upper", chat(``, `{"role":"user","content":[{"type":"text","text":"hi","Type":"image_url"}]}`), "messages[0].content[0].Type"},
		{"part_text_upper", chat(``, `{"role":"user","content":[{"type":"text","text":"hi","TEXT":"more"}]}`), "messages[0].content[0].TEXT"},
		{"image_url_url_upper", chat(``, `{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png","URL":"https://y/b.png"}}]}`), "messages[0].content[0].image_url.URL"},
		{"image_url_detail_upper", chat(``, `{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png","Detail":"high"}}]}`), "messages[0].content[0].image_url.Detail"},
		{"second_message", chat(``, msg+`,{"role":"assistant","content":"a","Role":"x"}`), "messages[1].Role"},
		// Image-bearing members other than an image_url part.
		{"message_images", chat(``, `{"role":"user","content":"what is this?","images":["iVBORw0KGgo="]}`), "messages[0].images"},
		{"message_image_url", chat(``, `{"role":"user","content":"what is this?","image_url":{"url":"https://x/a.png"}}`), "messages[0].image_url"},
		{"part_image", chat(``, `{"role":"user","content":[{"type":"text","text":"hi","image":"data:image/png;base64,AAAA"}]}`), "messages[0].content[0].image"},
		{"part_images", chat(``, `{"role":"user","content":[{"type":"text","text":"hi","Images":["AAAA"]}]}`), "messages[0].content[0].Images"},
		{"request_image_data", chat(`,"image_data":[{"data":"AAAA","id":1}]`, msg), "image_data"},
		// Embeddings.
		{"embeddings_input_upper", `{"model":"m","input":"a","Input":["b","c"]}`, "Input"},
		{"embeddings_dimensions_upper", `{"model":"m","input":"a","DIMENSIONS":4}`, "DIMENSIONS"},
		{"embeddings_model_upper", `{"model":"m","input":"a","MODEL":"x"}`, "MODEL"},
		{"embeddings_encoding_format_upper", `{"model":"m","input":"a","Encoding_Format":"int8"}`, "Encoding_Format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if strings.HasPrefix(tt.name, "embeddings_") {
				_, err = openaiwire.ParseEmbeddingRequest([]byte(tt.body))
			} else {
				_, err = openaiwire.ParseChatCompletionRequest([]byte(tt.body))
			}
			wantInvalid(t, err, tt.param)
		})
	}
}

// TestParseKeepsAliasesAndNulls: output-length fields of other servers
// (llama.cpp's n_predict, Ollama's num_predict, TGI's max_new_tokens, ...)
// are no modelled field and are carried; a typed field given as null is
// kept as null, as before.
func TestParseKeepsAliasesAndNulls(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","messages":[{"role":"user","content":"hi","name":null}],"n_predict":5000,"num_predict":5000,"max_new_tokens":5000,"max_length":5000,"max_tokens":null,"n":null,"stream":null,"user":null,"stream_options":null,"nb":1,"number":2}`
	req, err := openaiwire.ParseChatCompletionRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"n_predict", "num_predict", "max_new_tokens", "max_length", "nb", "number"} {
		if _, ok := req.GetExtraFields()[k]; !ok {
			t.Errorf("%s not carried: %v", k, req.GetExtraFields())
		}
	}
	for _, k := range []string{"max_tokens", "n", "stream", "user", "stream_options"} {
		if v := req.GetExtraFields()[k]; v != "null" {
			t.Errorf("%s = %q, want the null kept", k, v)
		}
	}
	if err := openaiwire.CheckChatCompletionRequest(req); err != nil {
		t.Fatalf("the parsed request fails the rules: %v", err)
	}
	emb, err := openaiwire.ParseEmbeddingRequest([]byte(`{"model":"m","input":"a","dimensions":null,"encoding_format":null,"user":null,"truncate":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := openaiwire.CheckEmbeddingRequest(emb); err != nil {
		t.Fatalf("the parsed request fails the rules: %v", err)
	}
}

// TestParseRefusesUnknownRole: OpenAI's roles only, spelt as OpenAI
// spells them.
func TestParseRefusesUnknownRole(t *testing.T) {
	t.Parallel()
	for _, role := range []string{"system", "developer", "user", "assistant", "tool", "function"} {
		body := `{"model":"m","messages":[{"role":"` + role + `","content":"hi"}]}`
		if _, err := openaiwire.ParseChatCompletionRequest([]byte(body)); err != nil {
			t.Errorf("role %s: %v", role, err)
		}
	}
	for _, role := range []string{"wizard", "User", "ASSISTANT", "system "} {
		body := `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"` + role + `","content":"hi"}]}`
		_, err := openaiwire.ParseChatCompletionRequest([]byte(body))
		t.Run(role, func(t *testing.T) { wantInvalid(t, err, "messages[1].role") })
	}
}

// TestParseRefusesBadModel: a model longer than 256 bytes or holding a
// control character is refused, chat and embeddings.
func TestParseRefusesBadModel(t *testing.T) {
	t.Parallel()
	ok := strings.Repeat("é", 128) // 256 bytes
	for name, model := range map[string]string{
		"257_bytes":  ok + "x",
		"2M_chars":   strings.Repeat("m", 2_000_000),
		"newline":    `m\n`,
		"nul":        `m\u0000x`,
		"del":        "m\u007f",
		"c1_control": `m\u0085`,
		"tab":        `m\tx`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := openaiwire.ParseChatCompletionRequest([]byte(`{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`))
			wantInvalid(t, err, "model")
			if strings.Contains(err.Error(), "mmmmmmmm") {
				t.Fatalf("the message quotes the model: %.200s", err)
			}
			_, err = openaiwire.ParseEmbeddingRequest([]byte(`{"model":"` + model + `","input":"a"}`))
			wantInvalid(t, err, "model")
		})
	}
	if _, err := openaiwire.ParseChatCompletionRequest([]byte(`{"model":"` + ok + `","messages":[{"role":"user","content":"hi"}]}`)); err != nil {
		t.Fatalf("a model of 256 bytes: %v", err)
	}
}

// TestCheckChatCompletionRequest: the same rules on a request built by a
// gRPC caller, param in the proto's notation.
func TestCheckChatCompletionRequest(t *testing.T) {
	t.Parallel()
	user := func() *flexwayv1.ChatMessage {
		return &flexwayv1.ChatMessage{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "hi"}}
	}
	base := func(edit func(r *flexwayv1.CreateChatCompletionRequest)) *flexwayv1.CreateChatCompletionRequest {
		r := &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{user()}}
		edit(r)
		return r
	}
	parts := func(p ...*flexwayv1.ContentPart) *flexwayv1.ChatMessage {
		return &flexwayv1.ChatMessage{Role: "user", Content: &flexwayv1.ChatMessage_Parts{Parts: &flexwayv1.ContentParts{Parts: p}}}
	}
	text := "hi"
	tests := []struct {
		name  string
		req   *flexwayv1.CreateChatCompletionRequest
		param string
	}{
		{"valid", base(func(*flexwayv1.CreateChatCompletionRequest) {}), ""},
		{"extra_n", base(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.ExtraFields = map[string]string{"n": "128", "max_tokens": "100000", "seed": "1"}
		}), "extra_fields.max_tokens"},
		{"extra_stream_on_unary", base(func(r *flexwayv1.CreateChatCompletionRequest) { r.ExtraFields = map[string]string{"stream": "true"} }), "extra_fields.stream"},
		{"extra_model", base(func(r *flexwayv1.CreateChatCompletionRequest) { r.ExtraFields = map[string]string{"model": `"x"`} }), "extra_fields.model"},
		{"extra_messages", base(func(r *flexwayv1.CreateChatCompletionRequest) { r.ExtraFields = map[string]string{"messages": `[]`} }), "extra_fields.messages"},
		{"extra_user", base(func(r *flexwayv1.CreateChatCompletionRequest) { r.ExtraFields = map[string]string{"user": `"u"`} }), "extra_fields.user"},
		{"extra_N", base(func(r *flexwayv1.CreateChatCompletionRequest) { r.ExtraFields = map[string]string{"N": "128"} }), "extra_fields.N"},
		{"extra_null_kept_by_the_parser", base(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.ExtraFields = map[string]string{"max_tokens": "null", "n": "null", "stream": "null", "stream_options": "null", "user": "null", "n_predict": "9"}
		}), ""},
		{"extra_null_model", base(func(r *flexwayv1.CreateChatCompletionRequest) { r.ExtraFields = map[string]string{"model": "null"} }), "extra_fields.model"},
		{"extra_null_other_case", base(func(r *flexwayv1.CreateChatCompletionRequest) { r.ExtraFields = map[string]string{"N": "null"} }), "extra_fields.N"},
		{"stream_options_include_usage", base(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.StreamOptions = &flexwayv1.StreamOptions{ExtraFields: map[string]string{"include_usage": "true"}}
		}), "stream_options.extra_fields.include_usage"},
		{"message_role", base(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.Messages = append(r.Messages, user())
			r.Messages[1].ExtraFields = map[string]string{"role": `"system"`}
		}), "messages[1].extra_fields.role"},
		{"message_content", base(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.Messages[0].ExtraFields = map[string]string{"content": `"x"`}
		}), "messages[0].extra_fields.content"},
		{"message_images", base(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.Messages[0].ExtraFields = map[string]string{"images": `["AAAA"]`}
		}), "messages[0].extra_fields.images"},
		{"part_image_url", base(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.Messages[0] = parts(&flexwayv1.ContentPart{Type: "text", Text: &text, ExtraFields: map[string]string{"image_url": `{"url":"https://x/a.png"}`}})
		}), "messages[0].parts.parts[0].extra_fields.image_url"},
		{"part_type", base(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.Messages[0] = parts(&flexwayv1.ContentPart{Type: "text", Text: &text}, &flexwayv1.ContentPart{Type: "text", Text: &text, ExtraFields: map[string]string{"type": `"image_url"`}})
		}), "messages[0].parts.parts[1].extra_fields.type"},
		{"image_url_url", base(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.Messages[0] = parts(&flexwayv1.ContentPart{Type: "image_url", ImageUrl: &flexwayv1.ImageUrl{Url: "https://x/a.png", ExtraFields: map[string]string{"url": `"https://y/b.png"`}}})
		}), "messages[0].parts.parts[0].image_url.extra_fields.url"},
		{"unknown_role", base(func(r *flexwayv1.CreateChatCompletionRequest) { r.Messages[0].Role = "wizard" }), "messages[0].role"},
		{"empty_role", base(func(r *flexwayv1.CreateChatCompletionRequest) { r.Messages[0].Role = "" }), "messages[0].role"},
		{"model_too_long", base(func(r *flexwayv1.CreateChatCompletionRequest) { r.Model = strings.Repeat("m", 257) }), "model"},
		{"model_control", base(func(r *flexwayv1.CreateChatCompletionRequest) { r.Model = "m\r\nx" }), "model"},
		{"model_invalid_utf8", base(func(r *flexwayv1.CreateChatCompletionRequest) { r.Model = "m\xff" }), "model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := openaiwire.CheckChatCompletionRequest(tt.req)
			if tt.param == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantInvalid(t, err, tt.param)
		})
	}
}

// TestCheckEmbeddingRequest: the embeddings request's rules, proto
// notation.
func TestCheckEmbeddingRequest(t *testing.T) {
	t.Parallel()
	in := &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Text{Text: "a"}}
	for name, tt := range map[string]struct {
		req   *flexwayv1.CreateEmbeddingRequest
		param string
	}{
		"valid":              {&flexwayv1.CreateEmbeddingRequest{Model: "m", Input: in, ExtraFields: map[string]string{"truncate": "true", "dimensions": "null"}}, ""},
		"extra_input":        {&flexwayv1.CreateEmbeddingRequest{Model: "m", Input: in, ExtraFields: map[string]string{"input": `["a","b"]`}}, "extra_fields.input"},
		"extra_dimensions":   {&flexwayv1.CreateEmbeddingRequest{Model: "m", Input: in, ExtraFields: map[string]string{"Dimensions": `4`}}, "extra_fields.Dimensions"},
		"extra_encoding":     {&flexwayv1.CreateEmbeddingRequest{Model: "m", Input: in, ExtraFields: map[string]string{"encoding_format": `"int8"`}}, "extra_fields.encoding_format"},
		"model_too_long":     {&flexwayv1.CreateEmbeddingRequest{Model: strings.Repeat("é", 129), Input: in}, "model"},
		"model_with_control": {&flexwayv1.CreateEmbeddingRequest{Model: "m\x00", Input: in}, "model"},
	} {
		t.Run(name, func(t *testing.T) {
			err := openaiwire.CheckEmbeddingRequest(tt.req)
			if tt.param == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantInvalid(t, err, tt.param)
		})
	}
}
