package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// visionConfig has a vision backend main (with embeddings) and a
// text-only backend text for tenant "plain".
func visionConfig(t testing.TB, mainURL, textURL string) testConfig {
	t.Helper()
	t.Setenv("FLEXWAY_TEST_PLAIN_KEY", "sk-test-plain")
	return testConfig{
		Keys:    []testKey{acmeBot, {Name: "plain", Env: "FLEXWAY_TEST_PLAIN_KEY", Tenant: "plain"}},
		Backend: "main",
		Vision:  &testVision{AllowedOrigins: []string{"https://images.example.com"}},
		Tenants: []testTenant{{Name: "plain", Backend: "text"}},
		Backends: []testBackend{
			{Name: "main", URL: mainURL + "/v1", Models: []string{"m"}, DefaultModel: "m", Price: &[2]float64{1, 2},
				Capabilities: []string{"chat", "vision", "embeddings"}},
			{Name: "text", URL: textURL + "/v1", Models: []string{"m"}, DefaultModel: "m", Capabilities: []string{"chat"}},
		},
	}
}

// imageRequest is a chat request with one image part.
func imageRequest(url string) string {
	return `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"` + url + `"}}]}]}`
}

// dataURI is a PNG data: URI whose decoded size is n bytes.
func dataURI(n int) string {
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x89}, n))
}

// TestVisionImages: a 7 MiB image reaches the vision backend byte for
// byte; 8 MiB passes, one byte more is 413; remote URLs only from the
// allowed https origin, never fetched; bad data: URIs are 400 — none of
// the refused calls reaches an upstream.
func TestVisionImages(t *testing.T) {
	main := newUpstream(t, usageUpstream(10, 5))
	g := startGateway(t, visionConfig(t, main.URL, main.URL).yaml())

	seven := dataURI(7 << 20)
	resp := post(t, g, "/v1/chat/completions", imageRequest(seven))
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("7 MiB image: %d", resp.StatusCode)
	}
	raw := main.requests()[0].Raw
	if !bytes.Contains(raw, []byte(`"url":"`+seven+`"`)) {
		t.Fatal("the 7 MiB image did not reach the upstream byte for byte")
	}

	cases := []struct {
		name, url string
		status    int
		code      string
	}{
		{"8 MiB exactly", dataURI(8 << 20), 200, ""},
		{"8 MiB + 1 byte", dataURI(8<<20 + 1), 413, "request_too_large"},
		{"allowed origin", "https://images.example.com/cat.png", 200, ""},
		{"http origin", "http://images.example.com/cat.png", 400, "invalid_request"},
		{"suffix trick", "https://images.example.com.evil.test/cat.png", 400, "invalid_request"},
		{"userinfo", "https://user@images.example.com/cat.png", 400, "invalid_request"},
		{"other port", "https://images.example.com:8443/cat.png", 400, "invalid_request"},
		{"upper case host", "https://IMAGES.example.com/cat.png", 400, "invalid_request"},
		{"trailing dot", "https://images.example.com./cat.png", 400, "invalid_request"},
		{"IDN look-alike", "https://images.exаmple.com/cat.png", 400, "invalid_request"},
		{"broken base64", "data:image/png;base64,AAA*", 400, "invalid_request"},
		{"not an image", "data:text/html;base64," + base64.StdEncoding.EncodeToString([]byte("<b>x</b>")), 400, "invalid_request"},
	}
	for _, tc := range cases {
		before := len(main.requests())
		resp := post(t, g, "/v1/chat/completions", imageRequest(tc.url))
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %.300s; want %d", tc.name, resp.StatusCode, body, tc.status)
			continue
		}
		reached := len(main.requests()) - before
		if tc.status != 200 {
			var e struct{ Error struct{ Code, Param string } }
			_ = json.Unmarshal(body, &e)
			if e.Error.Code != tc.code || e.Error.Param != "messages[0].content[1].image_url.url" || reached != 0 {
				t.Errorf("%s: code %q param %q, %d calls upstream; want %s on messages[0].content[1].image_url.url, none upstream", tc.name, e.Error.Code, e.Error.Param, reached, tc.code)
			}
		} else if reached != 1 {
			t.Errorf("%s: %d calls upstream, want 1", tc.name, reached)
		}
	}
}

// TestVisionNeedsAVisionBackend: an image from a tenant whose backend lacks
// vision is 400 capability_unavailable, unless ai.capabilities.vision
// names a backend that has it, which then serves the call.
func TestVisionNeedsAVisionBackend(t *testing.T) {
	main := newUpstream(t, usageUpstream(10, 5))
	text := newUpstream(t, usageUpstream(10, 5))
	req := imageRequest("https://images.example.com/cat.png")
	plain := map[string]string{"Authorization": "Bearer sk-test-plain"}

	g := startGateway(t, visionConfig(t, main.URL, text.URL).yaml())
	resp := send(t, g, "POST", "/v1/chat/completions", strings.NewReader(req), plain)
	body := readJSON(t, resp)
	if resp.StatusCode != 400 || !strings.Contains(fmt.Sprint(body), "capability_unavailable") || len(text.requests()) != 0 {
		t.Fatalf("no override: %d %v; want 400 capability_unavailable", resp.StatusCode, body)
	}

	override := visionConfig(t, main.URL, text.URL)
	override.AI = "  capabilities:\n    vision: main"
	g = startGateway(t, override.yaml())
	resp = send(t, g, "POST", "/v1/chat/completions", strings.NewReader(req), plain)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || len(main.requests()) != 1 || len(text.requests()) != 0 {
		t.Fatalf("with the override: %d, main %d calls, text %d; want main to serve", resp.StatusCode, len(main.requests()), len(text.requests()))
	}
	// A text call of the same tenant stays on its own backend.
	resp = send(t, g, "POST", "/v1/chat/completions", strings.NewReader(chatBody), plain)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || len(text.requests()) != 1 {
		t.Fatalf("text call: %d, text %d calls", resp.StatusCode, len(text.requests()))
	}
}

// TestSDKEmbeddingsInputForms: each OpenAI input form goes through the SDK
// and reaches the upstream as sent; the budget commits prompt tokens at
// the input price.
func TestSDKEmbeddingsInputForms(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5]}],"model":"m","usage":{"prompt_tokens":4,"total_tokens":4}}`))
	cfg := visionConfig(t, up.URL, up.URL)
	cfg.Budget = "    default: {tokens_per_day: 1000, eur_per_month: 1}"
	g := startGateway(t, cfg.yaml())
	t.Setenv("FLEXWAY_TEST_ADMIN_KEY", testAdminKey)
	client := sdkClient(g, demoKey)
	forms := []struct {
		name  string
		input openai.EmbeddingNewParamsInputUnion
		want  any
	}{
		{"string", openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello")}, "hello"},
		{"strings", openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}}, []any{"a", "b"}},
		{"tokens", openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{1, 2, 3}}, []any{1.0, 2.0, 3.0}},
		{"token arrays", openai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: [][]int64{{1}, {2, 3}}}, []any{[]any{1.0}, []any{2.0, 3.0}}},
	}
	for i, f := range forms {
		resp, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "m", Input: f.input})
		if err != nil || len(resp.Data) != 1 || resp.Usage.PromptTokens != 4 {
			t.Fatalf("%s: %+v, %v", f.name, resp, err)
		}
		if got := up.requests()[i].Body["input"]; !reflect.DeepEqual(got, f.want) {
			t.Errorf("%s: upstream input %#v, want %#v", f.name, got, f.want)
		}
	}
	// Bad inputs never reach the upstream.
	for _, bad := range []string{`{"model":"m","input":""}`, `{"model":"m","input":[]}`, `{"model":"m","input":[1,-2]}`} {
		resp := post(t, g, "/v1/embeddings", bad)
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 400 {
			t.Errorf("%s: %d, want 400", bad, resp.StatusCode)
		}
	}
	if n := len(up.requests()); n != len(forms) {
		t.Errorf("%d calls upstream, want %d", n, len(forms))
	}
}
