package promptlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	ipromptlog "github.com/flexway/flexway/interceptors/promptlog"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/openaiwire"
	"github.com/flexway/flexway/server/policy"
	"github.com/flexway/flexway/server/promptlog"
)

// fixture is a table where tenant acme's calls are logged to one file
// and globex's are governed, not logged.
type fixture struct {
	cfg  ipromptlog.Config
	w    *promptlog.Writer
	path string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.jsonl")
	tab := policy.MustCompile([]config.Policy{
		{Name: "acme-log", Match: config.PolicyMatch{Tenant: "acme"}, PromptLogging: &config.PromptLogging{Enabled: true, Path: path}},
		{Name: "globex", Match: config.PolicyMatch{Tenant: "globex"}, Governance: &config.Governance{Models: []string{"*"}}},
	})
	w, err := promptlog.Open(path, promptlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return &fixture{cfg: ipromptlog.Config{Policies: tab, Writers: map[string]*promptlog.Writer{"acme-log": w}}, w: w, path: path}
}

// state is a resolved call of tenant.
func (f *fixture) state(tenant string) *call.State {
	st := &call.State{RequestID: "r1", Tenant: tenant, Agent: "bot", Listener: "grpc", Operation: "ai.chatCompletions",
		Start: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	st.Policies = f.cfg.Policies.Resolve(policy.Key{Listener: st.Listener, Operation: st.Operation, Tenant: tenant, Agent: st.Agent})
	return st
}

// lines closes the writer and returns its lines.
func (f *fixture) lines(t *testing.T) []map[string]json.RawMessage {
	t.Helper()
	if err := f.w.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]json.RawMessage
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if l == "" {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func chatRequest(t *testing.T, body string) *flexwayv1.CreateChatCompletionRequest {
	t.Helper()
	r, err := openaiwire.ParseChatCompletionRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func completion(t *testing.T, body string) *flexwayv1.ChatCompletion {
	t.Helper()
	c, err := openaiwire.ParseChatCompletion([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestUnaryNotLoggedAllocatesNothing: a call whose policies do not log
// passes with no allocation and writes nothing.
func TestUnaryNotLoggedAllocatesNothing(t *testing.T) {
	f := newFixture(t)
	in := ipromptlog.UnaryServerInterceptor(f.cfg)
	ctx := call.NewContext(context.Background(), f.state("globex"))
	req := chatRequest(t, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	resp := &flexwayv1.ChatCompletion{}
	handler := func(context.Context, any) (any, error) { return resp, nil }
	info := &grpc.UnaryServerInfo{FullMethod: flexwayv1.ChatService_CreateChatCompletion_FullMethodName}
	if n := testing.AllocsPerRun(200, func() { _, _ = in(ctx, req, info, handler) }); n != 0 {
		t.Errorf("a call that is not logged allocates %v times", n)
	}
	if got := f.lines(t); len(got) != 0 {
		t.Errorf("lines written: %v", got)
	}
}

// TestUnaryAnswers: one text choice is logged as its text; two choices,
// one with a tool call, as the array of their messages in index order,
// the tool call's raw JSON as the client got it. A failed call that no
// upstream was tried for is not logged.
func TestUnaryAnswers(t *testing.T) {
	f := newFixture(t)
	in := ipromptlog.UnaryServerInterceptor(f.cfg)
	req := chatRequest(t, `{"model":"fast","messages":[{"role":"user","content":"hi [REDACTED:email]"}]}`)
	info := &grpc.UnaryServerInfo{}
	for _, body := range []string{
		`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello","refusal":null,"annotations":[]},"finish_reason":"stop"}]}`,
		`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":1,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}},{"index":0,"message":{"role":"assistant","content":"first"}}]}`,
	} {
		resp := completion(t, body)
		ctx := call.NewContext(context.Background(), f.state("acme"))
		if _, err := in(ctx, req, info, func(context.Context, any) (any, error) { return resp, nil }); err != nil {
			t.Fatal(err)
		}
	}
	ctx := call.NewContext(context.Background(), f.state("acme"))
	if _, err := in(ctx, req, info, func(context.Context, any) (any, error) { return nil, errors.New("refused") }); err == nil {
		t.Fatal("the handler's error was lost")
	}
	lines := f.lines(t)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2 (the refused call is not logged): %v", len(lines), lines)
	}
	if got := string(lines[0]["answer"]); got != `"hello"` {
		t.Errorf("one choice: answer = %s", got)
	}
	want := `[{"role":"assistant","content":"first"},{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}]`
	if got := string(lines[1]["answer"]); got != want {
		t.Errorf("two choices: answer =\n%s, want\n%s", got, want)
	}
	for k, v := range map[string]string{"time": `"2026-12-02T10:00:00Z"`, "request_id": `"r1"`, "tenant": `"acme"`, "agent": `"bot"`, "model": `"fast"`,
		"messages": `[{"role":"user","content":"hi [REDACTED:email]"}]`} {
		if got := string(lines[0][k]); got != v {
			t.Errorf("%s = %s, want %s", k, got, v)
		}
	}
}

// fakeStream receives one request and records what is sent; send fails
// from the failAt-th message on (0: never).
type fakeStream struct {
	grpc.ServerStream
	ctx    context.Context
	req    *flexwayv1.CreateChatCompletionRequest
	sent   int
	failAt int
}

func (s *fakeStream) Context() context.Context { return s.ctx }
func (s *fakeStream) RecvMsg(m any) error {
	proto.Merge(m.(*flexwayv1.CreateChatCompletionRequest), s.req)
	return nil
}
func (s *fakeStream) SendMsg(any) error {
	s.sent++
	if s.failAt > 0 && s.sent >= s.failAt {
		return errors.New("client gone")
	}
	return nil
}

// streamCall runs in over chunks (JSON bodies) as a service would.
func streamCall(t *testing.T, in grpc.StreamServerInterceptor, st *call.State, req *flexwayv1.CreateChatCompletionRequest, failAt int, chunks ...string) (grpc.ServerStream, error) {
	t.Helper()
	ss := &fakeStream{ctx: call.NewContext(context.Background(), st), req: req, failAt: failAt}
	var seen grpc.ServerStream
	info := &grpc.StreamServerInfo{FullMethod: flexwayv1.ChatService_StreamChatCompletion_FullMethodName, IsServerStream: true}
	err := in(nil, ss, info, func(_ any, s grpc.ServerStream) error {
		seen = s
		var r flexwayv1.CreateChatCompletionRequest
		if err := s.RecvMsg(&r); err != nil {
			return err
		}
		for _, c := range chunks {
			ch, err := openaiwire.ParseChatCompletionChunk([]byte(c))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SendMsg(ch); err != nil {
				return err
			}
		}
		return nil
	})
	if seen == ss {
		return nil, err
	}
	return seen, err
}

func chunkOf(choices string) string {
	return `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":` + choices + `}`
}

// TestStreamAnswers: a stream no logging policy may select is passed on
// unwrapped; a logged one's answer is its sent content concatenated, or,
// for two choices and a streamed tool call, the accumulated messages; a
// chunk whose send failed is not in the answer.
func TestStreamAnswers(t *testing.T) {
	f := newFixture(t)
	in := ipromptlog.StreamServerInterceptor(f.cfg)
	req := chatRequest(t, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if wrapped, _ := streamCall(t, in, f.state("globex"), req, 0, chunkOf(`[{"index":0,"delta":{"content":"x"}}]`)); wrapped != nil {
		t.Errorf("a stream of a caller no logging policy selects was wrapped: %T", wrapped)
	}
	if _, err := streamCall(t, in, f.state("acme"), req, 0,
		chunkOf(`[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]`),
		chunkOf(`[{"index":0,"delta":{"content":"lo wor"}}]`),
		chunkOf(`[{"index":0,"delta":{"content":"ld"},"finish_reason":"stop"}]`)); err != nil {
		t.Fatal(err)
	}
	if _, err := streamCall(t, in, f.state("acme"), req, 0,
		chunkOf(`[{"index":1,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"t1","type":"function","function":{"name":"get","arguments":"{\"ci"}}]}},{"index":0,"delta":{"content":"a"}}]`),
		chunkOf(`[{"index":1,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ty\":1}"}}]}},{"index":0,"delta":{"content":"b"}}]`)); err != nil {
		t.Fatal(err)
	}
	if _, err := streamCall(t, in, f.state("acme"), req, 2,
		chunkOf(`[{"index":0,"delta":{"content":"sent"}}]`),
		chunkOf(`[{"index":0,"delta":{"content":" lost"}}]`)); err == nil {
		t.Fatal("the send error was lost")
	}
	lines := f.lines(t)
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3: %v", len(lines), lines)
	}
	for i, want := range []string{
		`"Hello world"`,
		`[{"role":"assistant","content":"ab"},{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"get","arguments":"{\"city\":1}"}}]}]`,
		`"sent"`,
	} {
		if got := string(lines[i]["answer"]); got != want {
			t.Errorf("stream %d: answer =\n%s, want\n%s", i, got, want)
		}
	}
}

// TestStreamNotLoggedAllocatesNothing: a stream of a caller no logging
// policy selects costs no allocation.
func TestStreamNotLoggedAllocatesNothing(t *testing.T) {
	f := newFixture(t)
	in := ipromptlog.StreamServerInterceptor(f.cfg)
	ss := &fakeStream{ctx: call.NewContext(context.Background(), f.state("globex"))}
	info := &grpc.StreamServerInfo{FullMethod: flexwayv1.ChatService_StreamChatCompletion_FullMethodName, IsServerStream: true}
	handler := func(any, grpc.ServerStream) error { return nil }
	if n := testing.AllocsPerRun(200, func() { _ = in(nil, ss, info, handler) }); n != 0 {
		t.Errorf("a stream that is not logged allocates %v times", n)
	}
}
