package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/grpcproxy"
)

// grpcConn dials the gateway's gRPC listener.
func grpcConn(t *testing.T, g *testGW) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(g.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// withKey returns a context for one call carrying key as a bearer token
// (none when key is empty), bounded to 10 s.
func withKey(t *testing.T, key string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	if key == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}

func userMessage(text string) *flexwayv1.ChatMessage {
	return &flexwayv1.ChatMessage{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: text}}
}

func TestGRPCChatUnary(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	client := flexwayv1.NewChatServiceClient(grpcConn(t, g))
	var header metadata.MD
	resp, err := client.CreateChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
		Model:    "m-large",
		Messages: []*flexwayv1.ChatMessage{userMessage("Hello")},
	}, grpc.Header(&header))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetChoices()[0].GetMessage().GetText(); got != "Hello from upstream" {
		t.Fatalf("content %q", got)
	}
	if resp.GetModel() != "m-large" || resp.GetUsage().GetTotalTokens() != 15 || resp.GetChoices()[0].GetFinishReason() != "stop" {
		t.Fatalf("response %v", resp)
	}
	if resp.GetExtraFields()["system_fingerprint"] != `"fp_1"` {
		t.Fatalf("extra fields %q", resp.GetExtraFields())
	}
	if len(header.Get("x-request-id")) != 1 {
		t.Fatalf("no request id in the header: %v", header)
	}
	reqs := up.requests()
	if len(reqs) != 1 || reqs[0].Body["model"] != "m-large" {
		t.Fatalf("upstream requests %v", reqs)
	}
	msgs := reqs[0].Body["messages"].([]any)
	if m := msgs[0].(map[string]any); m["role"] != "user" || m["content"] != "Hello" {
		t.Fatalf("upstream messages %v", msgs)
	}
}

func TestGRPCChatStream(t *testing.T) {
	words := []string{"alpha ", "beta ", "gamma ", "delta"}
	events := []string{chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, "")}
	for _, w := range words {
		events = append(events, chunk(fmt.Sprintf(`[{"index":0,"delta":{"content":%q},"finish_reason":null}]`, w), ""))
	}
	events = append(events,
		chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""),
		chunk(`[]`, `{"prompt_tokens":4,"completion_tokens":4,"total_tokens":8}`))
	up := newUpstream(t, sseUpstream(events...))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	client := flexwayv1.NewChatServiceClient(grpcConn(t, g))
	include := true
	stream, err := client.StreamChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
		Model:         "m-large",
		Messages:      []*flexwayv1.ChatMessage{userMessage("count")},
		StreamOptions: &flexwayv1.StreamOptions{IncludeUsage: &include},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var finish string
	var usage int64
	for {
		ch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		if u := ch.GetUsage(); u != nil {
			usage = u.GetTotalTokens()
		}
		for _, c := range ch.GetChoices() {
			if s := c.GetDelta().GetText(); s != "" {
				got = append(got, s)
			}
			if c.FinishReason != nil {
				finish = c.GetFinishReason()
			}
		}
	}
	if strings.Join(got, "|") != strings.Join(words, "|") || finish != "stop" || usage != 8 {
		t.Fatalf("chunks %q finish %q usage %d", got, finish, usage)
	}
	if b := up.requests()[0].Body; b["stream"] != true {
		t.Fatalf("upstream request %v", b)
	}
}

func TestGRPCEmbeddings(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.25,-0.5]},{"object":"embedding","index":1,"embedding":[1,2]}],"model":"m-small","usage":{"prompt_tokens":3,"total_tokens":3}}`))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	client := flexwayv1.NewEmbeddingsServiceClient(grpcConn(t, g))
	resp, err := client.CreateEmbedding(withKey(t, demoKey), &flexwayv1.CreateEmbeddingRequest{
		Model: "m-small",
		Input: &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Texts{Texts: &flexwayv1.Texts{Values: []string{"a", "b"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	d := resp.GetData()
	if len(d) != 2 || d[0].GetFloats()[1] != -0.5 || d[1].GetIndex() != 1 || d[1].GetFloats()[1] != 2 || resp.GetUsage().GetPromptTokens() != 3 {
		t.Fatalf("embeddings %v", resp)
	}
	in, _ := up.requests()[0].Body["input"].([]any)
	if len(in) != 2 || in[0] != "a" || in[1] != "b" {
		t.Fatalf("upstream input %v", up.requests()[0].Body)
	}
}

func TestGRPCErrors(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	client := flexwayv1.NewChatServiceClient(grpcConn(t, g))
	tests := []struct {
		name   string
		key    string
		req    *flexwayv1.CreateChatCompletionRequest
		code   codes.Code
		reason string
		param  string
	}{
		{"missing key", "", &flexwayv1.CreateChatCompletionRequest{Model: "m-large", Messages: []*flexwayv1.ChatMessage{userMessage("hi")}}, codes.Unauthenticated, "invalid_api_key", ""},
		{"unknown key", "sk-nope", &flexwayv1.CreateChatCompletionRequest{Model: "m-large", Messages: []*flexwayv1.ChatMessage{userMessage("hi")}}, codes.Unauthenticated, "invalid_api_key", ""},
		{"empty messages", demoKey, &flexwayv1.CreateChatCompletionRequest{Model: "m-large"}, codes.InvalidArgument, "invalid_request", "messages"},
		{"missing model", demoKey, &flexwayv1.CreateChatCompletionRequest{Messages: []*flexwayv1.ChatMessage{userMessage("hi")}}, codes.InvalidArgument, "invalid_request", "model"},
	}
	for _, tt := range tests {
		for _, streaming := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", tt.name, streaming), func(t *testing.T) {
				var err error
				if streaming {
					var s flexwayv1.ChatService_StreamChatCompletionClient
					s, err = client.StreamChatCompletion(withKey(t, tt.key), tt.req)
					if err == nil {
						_, err = s.Recv()
					}
				} else {
					_, err = client.CreateChatCompletion(withKey(t, tt.key), tt.req)
				}
				st, ok := status.FromError(err)
				if !ok || st.Code() != tt.code {
					t.Fatalf("err = %v, want code %v", err, tt.code)
				}
				var info *errdetails.ErrorInfo
				for _, d := range st.Details() {
					if d, ok := d.(*errdetails.ErrorInfo); ok {
						info = d
					}
				}
				if info == nil || info.GetReason() != tt.reason || info.GetDomain() != "flexway.dev" {
					t.Fatalf("ErrorInfo %v, want reason %q domain flexway.dev", info, tt.reason)
				}
				if p := info.GetMetadata()["param"]; p != tt.param {
					t.Fatalf("param %q, want %q", p, tt.param)
				}
			})
		}
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the upstream saw %d requests", n)
	}
}

// grpcurlPath finds grpcurl: on PATH, else in the repository's .bin/
// where `make test` installs it.
func grpcurlPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("grpcurl"); err == nil {
		return p
	}
	p, err := filepath.Abs(filepath.Join("..", "..", ".bin", "grpcurl"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("grpcurl is needed for the reflection test and is neither on PATH nor at %s: run `make .bin/grpcurl` at the repository root (the Makefile names the target by its absolute path: `make %s`), or `make test`, which installs it", p, p)
	}
	return p
}

func TestGRPCurlReflection(t *testing.T) {
	grpcurl := grpcurlPath(t)
	up := newUpstream(t, jsonHandler(200, completion))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, grpcurl, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	list := run("-plaintext", g.GRPC, "list")
	for _, svc := range []string{"flexway.v1.ChatService", "flexway.v1.EmbeddingsService", "flexway.v1.ModelsService"} {
		if !strings.Contains(list, svc+"\n") {
			t.Errorf("grpcurl list lacks %s:\n%s", svc, list)
		}
	}
	out := run("-plaintext", "-H", "authorization: Bearer "+demoKey,
		"-d", `{"model":"m-large","messages":[{"role":"user","text":"Hello"}]}`,
		g.GRPC, "flexway.v1.ChatService/CreateChatCompletion")
	if !strings.Contains(out, `"text": "Hello from upstream"`) {
		t.Fatalf("grpcurl call output:\n%s", out)
	}
	if n := len(up.requests()); n != 1 {
		t.Fatalf("upstream saw %d requests", n)
	}
}

// TestGRPCBadInputNeverReachesUpstream: over gRPC as over HTTP, an empty
// embeddings input, an unknown encoding format, a non-positive dimension
// and a chat message without a role are INVALID_ARGUMENT, never sent on.
func TestGRPCBadInputNeverReachesUpstream(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	conn := grpcConn(t, g)
	emb := flexwayv1.NewEmbeddingsServiceClient(conn)
	text := func(s string) *flexwayv1.EmbeddingInput {
		return &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Text{Text: s}}
	}
	for name, req := range map[string]*flexwayv1.CreateEmbeddingRequest{
		"empty text":      {Model: "m", Input: text("")},
		"empty in texts":  {Model: "m", Input: &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Texts{Texts: &flexwayv1.Texts{Values: []string{"a", ""}}}}},
		"encoding int8":   {Model: "m", Input: text("a"), EncodingFormat: proto.String("int8")},
		"dimensions zero": {Model: "m", Input: text("a"), Dimensions: proto.Int32(0)},
	} {
		if _, err := emb.CreateEmbedding(withKey(t, demoKey), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
	_, err := flexwayv1.NewChatServiceClient(conn).CreateChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
		Model: "m", Messages: []*flexwayv1.ChatMessage{{Content: &flexwayv1.ChatMessage_Text{Text: "x"}}},
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("chat message without a role: %v, want INVALID_ARGUMENT", err)
	}
	if n := len(up.requests()); n != 0 {
		t.Errorf("%d bad requests reached the upstream", n)
	}
}

// grpcParam returns the code of err and the param of its ErrorInfo (with
// reason invalid_request, domain flexway.dev; "" otherwise).
func grpcParam(err error) (codes.Code, string) {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if d, ok := d.(*errdetails.ErrorInfo); ok && d.GetReason() == "invalid_request" && d.GetDomain() == "flexway.dev" {
			return st.Code(), d.GetMetadata()["param"]
		}
	}
	return st.Code(), ""
}

// callChat makes one chat call, streamed or not, and returns its error
// (a stream's first Recv's).
func callChat(ctx context.Context, chat flexwayv1.ChatServiceClient, req *flexwayv1.CreateChatCompletionRequest, streaming bool) error {
	if !streaming {
		_, err := chat.CreateChatCompletion(ctx, req)
		return err
	}
	s, err := chat.StreamChatCompletion(ctx, req)
	if err == nil {
		_, err = s.Recv()
	}
	return err
}

// TestGRPCRequestShape: issue 12, items 1, 3, 8 and 18 over gRPC.
// extra_fields never carry a field the messages model (the budget counts
// the typed n and max_tokens, the upstream would read the carried ones; a
// carried stream makes a unary call stream), in any case and at any level;
// nor an image outside an image_url part; a model is at most 256 bytes
// without control characters; a role is OpenAI's. Each is
// INVALID_ARGUMENT naming the field, unary and streamed, and never reaches
// the upstream.
func TestGRPCRequestShape(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	conn := grpcConn(t, g)
	chat := flexwayv1.NewChatServiceClient(conn)
	req := func(edit func(r *flexwayv1.CreateChatCompletionRequest)) *flexwayv1.CreateChatCompletionRequest {
		r := &flexwayv1.CreateChatCompletionRequest{Model: "m-large", Messages: []*flexwayv1.ChatMessage{userMessage("Hello")}}
		edit(r)
		return r
	}
	hi := "hi"
	tests := []struct {
		name  string
		req   *flexwayv1.CreateChatCompletionRequest
		param string
	}{
		{"extra n and max_tokens", req(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.ExtraFields = map[string]string{"n": "128", "max_tokens": "100000"}
		}), "extra_fields.max_tokens"},
		{"extra stream", req(func(r *flexwayv1.CreateChatCompletionRequest) { r.ExtraFields = map[string]string{"stream": "true"} }), "extra_fields.stream"},
		{"extra N", req(func(r *flexwayv1.CreateChatCompletionRequest) { r.ExtraFields = map[string]string{"N": "128"} }), "extra_fields.N"},
		{"extra max_completion_tokens", req(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.ExtraFields = map[string]string{"max_completion_tokens": "100000"}
		}), "extra_fields.max_completion_tokens"},
		{"extra include_usage", req(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.StreamOptions = &flexwayv1.StreamOptions{ExtraFields: map[string]string{"include_usage": "false"}}
		}), "stream_options.extra_fields.include_usage"},
		{"message extra content", req(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.Messages[0].ExtraFields = map[string]string{"content": `"more"`}
		}), "messages[0].extra_fields.content"},
		{"message images", req(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.Messages[0].ExtraFields = map[string]string{"images": `["iVBORw0KGgo="]`}
		}), "messages[0].extra_fields.images"},
		{"part IMAGE_URL", req(func(r *flexwayv1.CreateChatCompletionRequest) {
			r.Messages[0].Content = &flexwayv1.ChatMessage_Parts{Parts: &flexwayv1.ContentParts{Parts: []*flexwayv1.ContentPart{
				{Type: "text", Text: &hi, ExtraFields: map[string]string{"IMAGE_URL": `{"url":"data:image/png;base64,iVBORw0KGgo="}`}},
			}}}
		}), "messages[0].parts.parts[0].extra_fields.IMAGE_URL"},
		{"unknown role", req(func(r *flexwayv1.CreateChatCompletionRequest) { r.Messages[0].Role = "wizard" }), "messages[0].role"},
		{"model too long", req(func(r *flexwayv1.CreateChatCompletionRequest) { r.Model = strings.Repeat("m", 257) }), "model"},
		{"model with a control character", req(func(r *flexwayv1.CreateChatCompletionRequest) { r.Model = "m-large\x1b[2J" }), "model"},
	}
	for _, tt := range tests {
		for _, streaming := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", tt.name, streaming), func(t *testing.T) {
				err := callChat(withKey(t, demoKey), chat, tt.req, streaming)
				if code, param := grpcParam(err); code != codes.InvalidArgument || param != tt.param {
					t.Fatalf("err = %v (param %q), want INVALID_ARGUMENT on %q", err, param, tt.param)
				}
			})
		}
	}
	emb := flexwayv1.NewEmbeddingsServiceClient(conn)
	text := &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Text{Text: "a"}}
	for name, tt := range map[string]struct {
		req   *flexwayv1.CreateEmbeddingRequest
		param string
	}{
		"embeddings extra input":    {&flexwayv1.CreateEmbeddingRequest{Model: "m-small", Input: text, ExtraFields: map[string]string{"input": `["b","c"]`}}, "extra_fields.input"},
		"embeddings model too long": {&flexwayv1.CreateEmbeddingRequest{Model: strings.Repeat("m", 300), Input: text}, "model"},
		"embeddings model with NUL": {&flexwayv1.CreateEmbeddingRequest{Model: "m\x00", Input: text}, "model"},
	} {
		_, err := emb.CreateEmbedding(withKey(t, demoKey), tt.req)
		if code, param := grpcParam(err); code != codes.InvalidArgument || param != tt.param {
			t.Errorf("%s: err = %v (param %q), want INVALID_ARGUMENT on %q", name, err, param, tt.param)
		}
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the upstream saw %d requests", n)
	}
	// What is not a modelled field is carried: the output-length fields of
	// other servers among them (the budget counts those elsewhere), and a
	// null under a typed field's name, as the HTTP parser keeps it.
	_, err := chat.CreateChatCompletion(withKey(t, demoKey), req(func(r *flexwayv1.CreateChatCompletionRequest) {
		r.ExtraFields = map[string]string{"n_predict": "64", "seed": "7", "max_tokens": "null"}
	}))
	if err != nil {
		t.Fatal(err)
	}
	reqs := up.requests()
	if len(reqs) != 1 || reqs[0].Body["n_predict"] != 64.0 || reqs[0].Body["seed"] != 7.0 {
		t.Fatalf("upstream requests %v", reqs)
	}
	if v, ok := reqs[0].Body["max_tokens"]; !ok || v != nil {
		t.Fatalf("upstream max_tokens %v (present %v), want null", v, ok)
	}
}

// TestGRPCAnswersHoldNoNull: issue 12, item 18. A member the upstream sent
// as JSON null (a message's refusal, a choice's logprobs, a chunk's usage)
// is absent from a gRPC caller's extra_fields, not the string "null";
// the HTTP front, on the same core, still writes it as the upstream did
// (TestResponseFieldsReachClient and TestStreamChunksReachClient compare
// the whole documents).
func TestGRPCAnswersHoldNoNull(t *testing.T) {
	events := []string{
		`{"id":"c9","object":"chat.completion.chunk","created":1,"model":"m-large","system_fingerprint":null,"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`{"id":"c9","object":"chat.completion.chunk","created":1,"model":"m-large","choices":[{"index":0,"delta":{"content":"Hi","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`{"id":"c9","object":"chat.completion.chunk","created":1,"model":"m-large","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`,
		`{"id":"c9","object":"chat.completion.chunk","created":1,"model":"m-large","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"prompt_tokens_details":null}}`,
	}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		if strings.Contains(string(raw), `"stream":true`) {
			sseUpstream(events...)(w, r)
			return
		}
		jsonHandler(200, richCompletion)(w, r)
	})
	g := startGateway(t, baseConfig(t, up.URL, ""))
	chat := flexwayv1.NewChatServiceClient(grpcConn(t, g))
	// noNull fails on any extra_fields value "null" in m, at any depth.
	var noNull func(t *testing.T, where string, m protoreflect.Message)
	noNull = func(t *testing.T, where string, m protoreflect.Message) {
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsMap() && fd.Name() == "extra_fields":
				v.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
					if v.String() == "null" {
						t.Errorf("%s.extra_fields[%q] = \"null\"", where, k.String())
					}
					return true
				})
			case fd.IsList() && fd.Message() != nil:
				for i := 0; i < v.List().Len(); i++ {
					noNull(t, fmt.Sprintf("%s.%s[%d]", where, fd.Name(), i), v.List().Get(i).Message())
				}
			case fd.Message() != nil && !fd.IsMap():
				noNull(t, where+"."+string(fd.Name()), v.Message())
			}
			return true
		})
	}
	n := int32(2)
	resp, err := chat.CreateChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
		Model: "m-large", N: &n, Messages: []*flexwayv1.ChatMessage{userMessage("hi")},
	})
	if err != nil {
		t.Fatal(err)
	}
	noNull(t, "completion", resp.ProtoReflect())
	c0 := resp.GetChoices()[0]
	if _, ok := c0.GetMessage().GetExtraFields()["refusal"]; ok {
		t.Errorf("refusal present: %q", c0.GetMessage().GetExtraFields())
	}
	if _, ok := resp.GetChoices()[1].GetExtraFields()["logprobs"]; ok {
		t.Errorf("logprobs present: %q", resp.GetChoices()[1].GetExtraFields())
	}
	// What is not null is kept, nulls inside it included.
	if lp := c0.GetExtraFields()["logprobs"]; !strings.Contains(lp, `"refusal": null`) {
		t.Errorf("choice 0 logprobs %q", lp)
	}
	if a := c0.GetMessage().GetExtraFields()["annotations"]; a != "[]" {
		t.Errorf("annotations %q", a)
	}

	include := true
	stream, err := chat.StreamChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
		Model: "m-large", Messages: []*flexwayv1.ChatMessage{userMessage("hi")}, StreamOptions: &flexwayv1.StreamOptions{IncludeUsage: &include},
	})
	if err != nil {
		t.Fatal(err)
	}
	chunks := 0
	for {
		ch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		noNull(t, fmt.Sprintf("chunk %d", chunks), ch.ProtoReflect())
		chunks++
	}
	if chunks != len(events) {
		t.Fatalf("%d chunks, want %d", chunks, len(events))
	}

	// The HTTP front, same gateway, same core: the nulls as sent.
	hresp := post(t, g, "/v1/chat/completions", `{"model":"m-large","n":2,"messages":[{"role":"user","content":"hi"}]}`)
	semanticEqual(t, []byte(richCompletion), []byte(readAll(hresp)))
	_, raw := streamBody(t, g, `{"model":"m-large","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	evs := sseEvents(raw)
	if len(evs) != len(events)+1 {
		t.Fatalf("events %q", evs)
	}
	for i, e := range events {
		semanticEqual(t, []byte(e), []byte(evs[i]))
	}
}

// TestGRPCUndecodableMessage: a request message that does not unmarshal
// (garbage bytes, invalid UTF-8 in a proto3 string) is the caller's
// mistake: INVALID_ARGUMENT with ErrorInfo{reason: invalid_request}, not
// INTERNAL, on unary and streaming methods, with and without proxied
// services (whose frames are never decoded, and still pass).
func TestGRPCUndecodableMessage(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	addr, _ := startOCR(t)
	for _, gw := range []struct {
		name string
		cfg  string
	}{
		{"plain", baseConfig(t, up.URL, "")},
		{"with_proxied_services", ocrConfig(t, addr, ocrDescriptorSet(t), false, "    default: {eur_per_month: 1}")},
	} {
		t.Run(gw.name, func(t *testing.T) {
			g := startGateway(t, gw.cfg)
			conn := grpcConn(t, g)
			raw := grpc.ForceCodecV2(grpcproxy.Codec())
			for _, body := range []struct {
				name    string
				payload []byte
			}{
				{"garbage", []byte{0xff, 0xff, 0xff, 0xff}},
				{"invalid_utf8_model", []byte{0x0a, 0x03, 'a', 0xff, 0xfe}}, // field 1 (model), a proto3 string
			} {
				check := func(method string, err error) {
					t.Helper()
					st := status.Convert(err)
					if st.Code() != codes.InvalidArgument || !strings.Contains(fmt.Sprint(st.Details()), `reason:"invalid_request"`) {
						t.Errorf("%s %s: %v %v, want INVALID_ARGUMENT invalid_request", body.name, method, st.Code(), st.Message())
					}
				}
				err := conn.Invoke(withKey(t, demoKey), flexwayv1.ChatService_CreateChatCompletion_FullMethodName,
					&grpcproxy.Frame{Payload: body.payload}, &grpcproxy.Frame{}, raw)
				check("unary", err)
				s, err := conn.NewStream(withKey(t, demoKey), &grpc.StreamDesc{ServerStreams: true}, flexwayv1.ChatService_StreamChatCompletion_FullMethodName, raw)
				if err == nil {
					if err = s.SendMsg(&grpcproxy.Frame{Payload: body.payload}); err == nil {
						_ = s.CloseSend()
						err = s.RecvMsg(&grpcproxy.Frame{})
					}
				}
				check("stream", err)
			}
			if n := len(up.requests()); n != 0 {
				t.Errorf("%d undecodable requests reached the upstream", n)
			}
		})
	}
}
