package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/guardrail"
	"github.com/flexway/flexway/server/openaiwire"
	"github.com/flexway/flexway/server/policy"
	"github.com/flexway/flexway/server/toolcalls"
)

// guardState is a call state whose policies are one policy named p with
// the given response rules (shadow: in governance.mode shadow).
func guardState(t testing.TB, shadow bool, prompt []config.GuardrailRule, response ...config.GuardrailRule) *call.State {
	t.Helper()
	p := config.Policy{Name: "p", Guardrails: &config.Guardrails{Prompt: prompt, Response: response}}
	if shadow {
		p.Governance = &config.Governance{Mode: "shadow"}
	}
	tb := policy.MustCompile([]config.Policy{p})
	return &call.State{RequestID: "r1", Tenant: "t", Policies: policy.Set{Policies: tb.Policies()}}
}

var (
	redactCards = config.GuardrailRule{Type: "pii", Action: "redact", Entities: []string{"credit_card"}}
	denySecrets = config.GuardrailRule{Type: "secrets", Action: "deny"}
)

// recorder is the client's side: every chunk sent, as OpenAI SSE data.
type recorder struct {
	grpc.ServerStream
	sent []*flexwayv1.ChatCompletionChunk
}

func (r *recorder) Context() context.Context { return context.Background() }
func (r *recorder) Send(ch *flexwayv1.ChatCompletionChunk) error {
	r.sent = append(r.sent, proto.Clone(ch).(*flexwayv1.ChatCompletionChunk))
	return nil
}

// wire is the SSE bytes of the chunks sent.
func (r *recorder) wire() string {
	var b []byte
	for _, ch := range r.sent {
		b = append(b, "data: "...)
		b = openaiwire.AppendChatCompletionChunk(b, ch)
		b = append(b, "\n\n"...)
	}
	return string(b)
}

// content is what a client concatenates of choice i's content, and of a
// field of its extra fields (decoded JSON strings).
func (r *recorder) content(i int32, field string) string {
	var b strings.Builder
	for _, ch := range r.sent {
		for _, c := range ch.GetChoices() {
			if c.GetIndex() != i {
				continue
			}
			if field == "" {
				b.WriteString(c.GetDelta().GetText())
			} else if s, ok := jsonText(c.GetDelta().GetExtraFields()[field]); ok {
				b.WriteString(s)
			}
		}
	}
	return b.String()
}

// toolArgs is what a client concatenates of every tool call's arguments
// the recorder got.
func (r *recorder) toolArgs() string {
	var b strings.Builder
	for _, ch := range r.sent {
		for _, c := range ch.GetChoices() {
			if raw, ok := c.GetDelta().GetExtraFields()["tool_calls"]; ok {
				as, _ := toolcalls.Parse(raw, nil)
				for _, a := range as {
					b.WriteString(a.Arguments)
				}
			}
		}
	}
	return b.String()
}

func textChunk(i int32, s string) *flexwayv1.ChatCompletionChunk {
	return &flexwayv1.ChatCompletionChunk{Id: "c1", Object: "chat.completion.chunk", Model: "m", Choices: []*flexwayv1.ChatCompletionChunkChoice{
		{Index: i, Delta: &flexwayv1.ChatMessage{Content: &flexwayv1.ChatMessage_Text{Text: s}}},
	}}
}

func roleChunk() *flexwayv1.ChatCompletionChunk {
	return &flexwayv1.ChatCompletionChunk{Id: "c1", Object: "chat.completion.chunk", Model: "m", Choices: []*flexwayv1.ChatCompletionChunkChoice{
		{Index: 0, Delta: &flexwayv1.ChatMessage{Role: "assistant", Content: &flexwayv1.ChatMessage_Text{Text: ""}}},
	}}
}

func finishChunk(i int32) *flexwayv1.ChatCompletionChunk {
	return &flexwayv1.ChatCompletionChunk{Id: "c1", Object: "chat.completion.chunk", Model: "m", Choices: []*flexwayv1.ChatCompletionChunkChoice{
		{Index: i, Delta: &flexwayv1.ChatMessage{}, FinishReason: proto.String("stop")},
	}}
}

// relayGuarded relays chunks under st's response rules for req.
func relayGuarded(t testing.TB, st *call.State, req *flexwayv1.CreateChatCompletionRequest, chunks ...*flexwayv1.ChatCompletionChunk) (*recorder, call.Outcome, error) {
	t.Helper()
	c := New(Options{})
	r := &recorder{}
	var o call.Outcome
	g := c.newAnswerGuard(context.Background(), st, req)
	_, err := c.relay(r, &sliceStream{chunks: chunks}, &o, false, false, 0, g)
	return r, o, err
}

// TestStreamCardSplitEverywhere splits a text with a card number at every
// position across two chunks, and into single bytes: the client's content
// is always Redacted(whole), and the finish chunk comes after it.
func TestStreamCardSplitEverywhere(t *testing.T) {
	st := guardState(t, false, nil, redactCards)
	whole := "card 4111 1111 1111 1111, thanks"
	want := "card [REDACTED:credit_card], thanks"
	for i := 0; i <= len(whole); i++ {
		r, o, err := relayGuarded(t, st, nil, roleChunk(), textChunk(0, whole[:i]), textChunk(0, whole[i:]), finishChunk(0))
		if err != nil {
			t.Fatalf("split %d: %v", i, err)
		}
		if got := r.content(0, ""); got != want {
			t.Fatalf("split %d: content %q, want %q", i, got, want)
		}
		if strings.Contains(r.wire(), "1111") {
			t.Fatalf("split %d: a digit group reached the client: %s", i, r.wire())
		}
		last := r.sent[len(r.sent)-1]
		if last.GetChoices()[0].GetFinishReason() != "stop" {
			t.Fatalf("split %d: last chunk %v, want the finish", i, last)
		}
		if o.OutputBytes != int64(len(whole)) {
			t.Fatalf("split %d: output bytes %d, want the upstream's %d", i, o.OutputBytes, len(whole))
		}
	}
	chunks := []*flexwayv1.ChatCompletionChunk{roleChunk()}
	for i := range len(whole) {
		chunks = append(chunks, textChunk(0, whole[i:i+1]))
	}
	r, _, err := relayGuarded(t, st, nil, append(chunks, finishChunk(0))...)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.content(0, ""); got != want {
		t.Fatalf("single bytes: content %q, want %q", got, want)
	}
	if got := st.Guardrails(); len(got) != 1 || got[0] != (call.GuardrailVerdict{Policy: "p", Rule: "pii", Phase: "response", Action: "redact"}) {
		t.Fatalf("verdicts %+v", got)
	}
}

// TestStreamHeldRemainderAtEOF: a stream that ends without a finish_reason
// still gets what was held, before its end.
func TestStreamHeldRemainderAtEOF(t *testing.T) {
	st := guardState(t, false, nil, redactCards)
	r, _, err := relayGuarded(t, st, nil, textChunk(0, "ok 4111 1111 "), textChunk(0, "1111 1111"))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.content(0, ""); got != "ok [REDACTED:credit_card]" {
		t.Fatalf("content %q", got)
	}
}

// TestStreamDenyMidStream: a secret denied mid-stream ends it with the
// guardrail's refusal, and no byte of the key was sent.
func TestStreamDenyMidStream(t *testing.T) {
	st := guardState(t, false, nil, denySecrets)
	key := "sk-ant-api03-" + strings.Repeat("a1B2", 12)
	r, _, err := relayGuarded(t, st, nil, roleChunk(), textChunk(0, "Hello there, friend. The key is "), textChunk(0, key[:10]), textChunk(0, key[10:]+" ok"), finishChunk(0))
	fe := faults.As(err)
	if fe.Reason != faults.GuardrailViolation {
		t.Fatalf("err %v, want guardrail_violation", err)
	}
	if !strings.Contains(fe.Message, `policy "p" refuses the answer: guardrail secrets`) || strings.Contains(fe.Message, "sk-") {
		t.Fatalf("message %q", fe.Message)
	}
	if strings.Contains(r.wire(), "sk-") || strings.Contains(r.wire(), "stop") {
		t.Fatalf("sent %s", r.wire())
	}
	if !strings.HasPrefix("Hello there, friend. The key is ", r.content(0, "")) || r.content(0, "") == "" {
		t.Fatalf("content %q", r.content(0, ""))
	}
}

// TestStreamDenyBeforeAnythingSent: a denial in the first content chunk
// leaves nothing sent (the front answers a plain 403).
func TestStreamDenyBeforeAnythingSent(t *testing.T) {
	st := guardState(t, false, nil, denySecrets)
	r, o, err := relayGuarded(t, st, nil, roleChunk(), textChunk(0, "AKIAIOSFODNN7EXAMPLE is it"), finishChunk(0))
	if faults.As(err).Reason != faults.GuardrailViolation || len(r.sent) != 0 {
		t.Fatalf("err %v, sent %d", err, len(r.sent))
	}
	if !o.Served || o.OutputBytes == 0 {
		t.Fatalf("outcome %+v: the upstream's output is charged", o)
	}
}

// TestStreamChoicesAndChannels: two choices, reasoning_content and a tool
// call's arguments are each their own channel.
func TestStreamChoicesAndChannels(t *testing.T) {
	st := guardState(t, false, nil, redactCards)
	mk := func(i int32, field, raw string) *flexwayv1.ChatCompletionChunk {
		return &flexwayv1.ChatCompletionChunk{Id: "c1", Choices: []*flexwayv1.ChatCompletionChunkChoice{{Index: i, Delta: &flexwayv1.ChatMessage{ExtraFields: map[string]string{field: raw}}}}}
	}
	r, _, err := relayGuarded(t, st, nil,
		textChunk(0, "a 4111 1111 "), textChunk(1, "b 5555 5555 "),
		mk(0, "reasoning_content", `"r 4111 1111 "`),
		mk(1, "tool_calls", `[{"index":0,"id":"call_1","type":"function","function":{"name":"pay","arguments":""}}]`),
		mk(1, "tool_calls", `[{"index":0,"function":{"arguments":"{\"card\":\"4111 1111 "}}]`),
		mk(1, "tool_calls", `[{"index":0,"function":{"arguments":"1111 1111\"}"}}]`),
		textChunk(0, "1111 1111"), textChunk(1, "5555 4444"),
		mk(0, "reasoning_content", `"1111 1111"`),
		// "reasoning", OpenRouter's and vLLM's name, is held back too
		// (attack pass: a card split across two chunks of it passed)
		mk(1, "reasoning", `"q 4111 1111 "`), mk(1, "reasoning", `"1111 1111"`),
		finishChunk(0), finishChunk(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		i           int32
		field, want string
	}{
		{0, "", "a [REDACTED:credit_card]"},
		{1, "", "b [REDACTED:credit_card]"},
		{0, "reasoning_content", "r [REDACTED:credit_card]"},
		{1, "reasoning", "q [REDACTED:credit_card]"},
	} {
		if got := r.content(c.i, c.field); got != c.want {
			t.Errorf("choice %d %q: %q, want %q", c.i, c.field, got, c.want)
		}
	}
	var args strings.Builder
	for _, ch := range r.sent {
		for _, c := range ch.GetChoices() {
			if raw, ok := c.GetDelta().GetExtraFields()["tool_calls"]; ok {
				as, err := toolcalls.Parse(raw, nil)
				if err != nil {
					t.Fatalf("tool_calls %s: %v", raw, err)
				}
				for _, a := range as {
					args.WriteString(a.Arguments)
				}
			}
		}
	}
	if got := args.String(); got != `{"card":"[REDACTED:credit_card]"}` {
		t.Errorf("tool arguments %q", got)
	}
	if !strings.Contains(r.wire(), `"id":"call_1","type":"function","function":{"name":"pay","arguments":""}`) {
		t.Errorf("the tool call's first delta changed: %s", r.wire())
	}
}

// TestStreamShadow: a shadow policy's rules report would_redact and
// change nothing.
func TestStreamShadow(t *testing.T) {
	st := guardState(t, true, nil, redactCards)
	r, _, err := relayGuarded(t, st, nil, textChunk(0, "4111 1111 "), textChunk(0, "1111 1111"), finishChunk(0))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.content(0, ""); got != "4111 1111 1111 1111" {
		t.Fatalf("content %q", got)
	}
	if got := st.Guardrails(); len(got) != 1 || got[0].Action != "would_redact" {
		t.Fatalf("verdicts %+v", got)
	}
}

// TestStreamNoResponseRulesByteIdentical: a policy with prompt rules only
// gives no guard, and the stream's bytes are those of a call without one.
func TestStreamNoResponseRulesByteIdentical(t *testing.T) {
	chunks := func() []*flexwayv1.ChatCompletionChunk {
		return []*flexwayv1.ChatCompletionChunk{roleChunk(), textChunk(0, "4111 1111 "), textChunk(0, "1111 1111"), finishChunk(0)}
	}
	st := guardState(t, false, []config.GuardrailRule{redactCards})
	if g := New(Options{}).newAnswerGuard(context.Background(), st, nil); g != nil {
		t.Fatal("a guard for a policy without response rules")
	}
	with, _, err := relayGuarded(t, st, nil, chunks()...)
	if err != nil {
		t.Fatal(err)
	}
	without, _, err := relayGuarded(t, &call.State{}, nil, chunks()...)
	if err != nil {
		t.Fatal(err)
	}
	if with.wire() != without.wire() || len(with.sent) != 4 {
		t.Fatalf("with an unrelated policy:\n%s\nwithout:\n%s", with.wire(), without.wire())
	}
}

var schemaReq = &flexwayv1.CreateChatCompletionRequest{ExtraFields: map[string]string{
	"response_format": `{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","required":["id"],"properties":{"id":{"type":"integer"}}}}}`,
	"tools":           `[{"type":"function","function":{"name":"pay","parameters":{"type":"object","required":["amount"]}}}]`,
}}

// TestStreamJSONSchema: with a json_schema rule the stream is buffered and
// judged whole: an invalid answer is refused before any byte is sent, a
// valid one is sent whole.
func TestStreamJSONSchema(t *testing.T) {
	st := guardState(t, false, nil, config.GuardrailRule{Type: "json_schema", Action: "deny"})
	r, _, err := relayGuarded(t, st, schemaReq, roleChunk(), textChunk(0, `{"id":`), textChunk(0, `"x"}`), finishChunk(0))
	if faults.As(err).Reason != faults.GuardrailViolation || len(r.sent) != 0 {
		t.Fatalf("invalid: err %v, sent %s", err, r.wire())
	}
	r, _, err = relayGuarded(t, st, schemaReq, roleChunk(), textChunk(0, `{"id":`), textChunk(0, `7}`), finishChunk(0))
	if err != nil || r.content(0, "") != `{"id":7}` || len(r.sent) != 4 {
		t.Fatalf("valid: err %v, sent %s", err, r.wire())
	}
	// Without a schema in the request the rule does nothing: no buffering.
	if g := New(Options{}).newAnswerGuard(context.Background(), st, &flexwayv1.CreateChatCompletionRequest{}); g == nil || g.buffer {
		t.Fatalf("guard %+v", g)
	}
}

// TestStreamBufferBound: a buffered answer past MaxAnswerBytes is refused.
func TestStreamBufferBound(t *testing.T) {
	st := guardState(t, false, nil, config.GuardrailRule{Type: "json_schema", Action: "deny"})
	c := New(Options{MaxAnswerBytes: 8})
	r := &recorder{}
	var o call.Outcome
	_, err := c.relay(r, &sliceStream{chunks: []*flexwayv1.ChatCompletionChunk{textChunk(0, `{"id":`), textChunk(0, `7    }`)}}, &o, false, false, 0, c.newAnswerGuard(context.Background(), st, schemaReq))
	if fe := faults.As(err); fe.Reason != faults.GuardrailViolation || !strings.Contains(fe.Message, "8 bytes") || len(r.sent) != 0 {
		t.Fatalf("err %v, sent %d", err, len(r.sent))
	}
}

// TestJSONAnswer: a JSON answer's content, reasoning, refusal and tool
// call arguments (\u escapes decoded) are redacted; a denial and a schema
// failure are refusals.
func TestJSONAnswer(t *testing.T) {
	st := guardState(t, false, nil, redactCards)
	resp := &flexwayv1.ChatCompletion{Choices: []*flexwayv1.ChatCompletionChoice{{Message: &flexwayv1.ChatMessage{
		Role:    "assistant",
		Content: &flexwayv1.ChatMessage_Text{Text: "pay 4111 1111 1111 1111"},
		ExtraFields: map[string]string{
			"reasoning_content": `"r 4111-1111-1111-1111"`,
			"refusal":           "null",
			"tool_calls":        `[{"id":"call_1","type":"function","function":{"name":"pay","arguments":"{\"card\":\"4111\u00201111 1111 1111\"}"}}]`,
		},
	}}}}
	g := New(Options{}).newAnswerGuard(context.Background(), st, schemaReq)
	if err := g.checkJSON(resp); err != nil {
		t.Fatal(err)
	}
	m := resp.GetChoices()[0].GetMessage()
	if m.GetText() != "pay [REDACTED:credit_card]" || m.ExtraFields["reasoning_content"] != `"r [REDACTED:credit_card]"` || m.ExtraFields["refusal"] != "null" {
		t.Fatalf("message %v", m)
	}
	if want := `[{"id":"call_1","type":"function","function":{"name":"pay","arguments":"{\"card\":\"[REDACTED:credit_card]\"}"}}]`; m.ExtraFields["tool_calls"] != want {
		t.Fatalf("tool_calls %s\nwant %s", m.ExtraFields["tool_calls"], want)
	}

	st = guardState(t, false, nil, denySecrets, config.GuardrailRule{Type: "json_schema", Action: "deny"})
	resp = &flexwayv1.ChatCompletion{Choices: []*flexwayv1.ChatCompletionChoice{{Message: &flexwayv1.ChatMessage{Content: &flexwayv1.ChatMessage_Text{Text: `{"id":"x"}`}}}}}
	err := New(Options{}).newAnswerGuard(context.Background(), st, schemaReq).checkJSON(resp)
	if fe := faults.As(err); fe.Reason != faults.GuardrailViolation || !strings.Contains(fe.Message, `policy "p" refuses the answer: guardrail json_schema`) {
		t.Fatalf("schema: %v", err)
	}
	resp = &flexwayv1.ChatCompletion{Choices: []*flexwayv1.ChatCompletionChoice{{Message: &flexwayv1.ChatMessage{Content: &flexwayv1.ChatMessage_Text{Text: `{"id":1}`},
		ExtraFields: map[string]string{"tool_calls": `[{"id":"c","type":"function","function":{"name":"pay","arguments":"{}"}}]`}}}}}
	err = New(Options{}).newAnswerGuard(context.Background(), st, schemaReq).checkJSON(resp)
	if faults.As(err).Reason != faults.GuardrailViolation {
		t.Fatalf("tool arguments against the tool's parameters: %v", err)
	}
	resp.Choices[0].Message.ExtraFields = nil
	resp.Choices[0].Message.Content = &flexwayv1.ChatMessage_Text{Text: `{"id":1} AKIAIOSFODNN7EXAMPLE`}
	err = New(Options{}).newAnswerGuard(context.Background(), st, schemaReq).checkJSON(resp)
	if fe := faults.As(err); !errors.Is(err, fe) || fe.Reason != faults.GuardrailViolation || !strings.Contains(fe.Message, "secrets") || strings.Contains(fe.Message, "AKIA") {
		t.Fatalf("secret: %v", err)
	}
	_ = guardrail.Response
}

// hookServer is a webhook answering answer, recording what it was sent.
func hookServer(t *testing.T, answer string) (*httptest.Server, *[]string) {
	t.Helper()
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, string(b))
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

// TestWebhookAnswer: a response webhook sees the answer's texts with
// their locations, after the text rules; its replace rewrites what the
// client gets (JSON, and a stream released whole), its deny refuses.
func TestWebhookAnswer(t *testing.T) {
	srv, seen := hookServer(t, `{"action":"replace","texts":[{"location":"choices[0].message.content","text":"[censored]"}]}`)
	hook := config.GuardrailRule{Type: "webhook", Action: "deny", URL: srv.URL, OnError: "deny"}
	st := guardState(t, false, nil, redactCards, hook)
	resp := &flexwayv1.ChatCompletion{Choices: []*flexwayv1.ChatCompletionChoice{{Message: &flexwayv1.ChatMessage{Content: &flexwayv1.ChatMessage_Text{Text: "card 4111 1111 1111 1111"}}}}}
	if err := New(Options{}).newAnswerGuard(context.Background(), st, &flexwayv1.CreateChatCompletionRequest{}).checkJSON(resp); err != nil {
		t.Fatal(err)
	}
	if got := resp.GetChoices()[0].GetMessage().GetText(); got != "[censored]" {
		t.Fatalf("content %q", got)
	}
	if len(*seen) != 1 || !strings.Contains((*seen)[0], `{"role":"assistant","location":"choices[0].message.content","text":"card [REDACTED:credit_card]"}`) || strings.Contains((*seen)[0], "4111") {
		t.Fatalf("webhook saw %q", *seen)
	}

	r, _, err := relayGuarded(t, st, nil, roleChunk(), textChunk(0, "card 4111 "), textChunk(0, "1111 1111 1111"), finishChunk(0))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.content(0, ""); got != "[censored]" || len(r.sent) < 2 {
		t.Fatalf("stream content %q (%d chunks)", got, len(r.sent))
	}

	deny, _ := hookServer(t, `{"action":"deny","reason":"no"}`)
	hook.URL = deny.URL
	st = guardState(t, false, nil, hook)
	r, _, err = relayGuarded(t, st, nil, roleChunk(), textChunk(0, "hello"), finishChunk(0))
	if fe := faults.As(err); fe.Reason != faults.GuardrailViolation || !strings.Contains(fe.Message, `policy "p" refuses the answer: guardrail webhook: no`) || len(r.sent) != 0 {
		t.Fatalf("deny: %v, sent %d", err, len(r.sent))
	}
}

// TestToolArgumentEscapes: tool call arguments are JSON themselves, and
// whoever uses them decodes them: a card written with \u escapes inside
// them is found and redacted, in a JSON answer and in a stream whose
// escape is split across deltas (it reached the client before).
func TestToolArgumentEscapes(t *testing.T) {
	st := guardState(t, false, nil, redactCards)
	resp := &flexwayv1.ChatCompletion{Choices: []*flexwayv1.ChatCompletionChoice{{Message: &flexwayv1.ChatMessage{
		Role: "assistant",
		ExtraFields: map[string]string{
			"tool_calls": `[{"id":"call_1","type":"function","function":{"name":"pay","arguments":"{\"card\":\"\\u0034111 1111 1111 1111\",\"note\":\"caf\\u00e9\"}"}}]`,
		},
	}}}}
	if err := New(Options{}).newAnswerGuard(context.Background(), st, schemaReq).checkJSON(resp); err != nil {
		t.Fatal(err)
	}
	got := resp.GetChoices()[0].GetMessage().ExtraFields["tool_calls"]
	if want := `[{"id":"call_1","type":"function","function":{"name":"pay","arguments":"{\"card\":\"[REDACTED:credit_card]\",\"note\":\"café\"}"}}]`; got != want {
		t.Fatalf("tool_calls %s\nwant %s", got, want)
	}

	mk := func(raw string) *flexwayv1.ChatCompletionChunk {
		return &flexwayv1.ChatCompletionChunk{Id: "c1", Choices: []*flexwayv1.ChatCompletionChunkChoice{{Index: 0, Delta: &flexwayv1.ChatMessage{ExtraFields: map[string]string{"tool_calls": raw}}}}}
	}
	args := `{"card":"\u0034111 1111 1111 1111"}`
	for i := 1; i < len(args); i++ {
		q1, _ := json.Marshal(args[:i])
		q2, _ := json.Marshal(args[i:])
		r, _, err := relayGuarded(t, st, nil,
			mk(`[{"index":0,"id":"call_1","type":"function","function":{"name":"pay","arguments":""}}]`),
			mk(`[{"index":0,"function":{"arguments":`+string(q1)+`}}]`),
			mk(`[{"index":0,"function":{"arguments":`+string(q2)+`}}]`),
			finishChunk(0))
		if err != nil {
			t.Fatal(err)
		}
		if got := r.toolArgs(); got != `{"card":"[REDACTED:credit_card]"}` {
			t.Fatalf("split at %d: the client's arguments are %s", i, got)
		}
	}
	// Arguments cut inside an escape keep it, as sent.
	r, _, err := relayGuarded(t, st, nil,
		mk(`[{"index":0,"id":"call_1","type":"function","function":{"name":"pay","arguments":""}}]`),
		mk(`[{"index":0,"function":{"arguments":"{\"a\":\"x\\u00"}}]`),
		finishChunk(0))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.toolArgs(); got != `{"a":"x\u00` {
		t.Fatalf("cut escape: the client's arguments are %s", got)
	}
}

// TestAnswerUnmodelledFields: every string of an answer reaches the rules,
// modelled or not (a legacy function_call, audio, annotations, another
// spelling of reasoning, an unknown field of the answer), and logprobs,
// which spell out the tokens (and their bytes) a redaction hides, are
// dropped when the answer has text rules; on a stream, the deltas'
// unmodelled fields are checked chunk by chunk and logprobs dropped too.
// The attack pass got a card to the client through each.
func TestAnswerUnmodelledFields(t *testing.T) {
	st := guardState(t, false, nil, redactCards)
	resp := &flexwayv1.ChatCompletion{ExtraFields: map[string]string{"zzz": `"top ` + "4111 1111 1111 1111" + `"`},
		Choices: []*flexwayv1.ChatCompletionChoice{{
			ExtraFields: map[string]string{"logprobs": `{"content":[{"token":"4111 1111 1111 1111","bytes":[52,49]}]}`},
			Message: &flexwayv1.ChatMessage{Role: "assistant", Content: &flexwayv1.ChatMessage_Text{Text: "ok"}, ExtraFields: map[string]string{
				"function_call": `{"name":"pay","arguments":"{\"card\":\"\\u0034111 1111 1111 1111\"}"}`,
				"audio":         `{"id":"a","transcript":"t 4111 1111 1111 1111"}`,
				"annotations":   `[{"type":"url_citation","url_citation":{"title":"x 4111 1111 1111 1111"}}]`,
				"reasoning":     ` "r 4111 1111 1111 1111"`,
			}},
		}}}
	if err := New(Options{}).newAnswerGuard(context.Background(), st, schemaReq).checkJSON(resp); err != nil {
		t.Fatal(err)
	}
	m := resp.GetChoices()[0].GetMessage()
	for what, got := range map[string]string{
		"function_call": m.ExtraFields["function_call"], "audio": m.ExtraFields["audio"],
		"annotations": m.ExtraFields["annotations"], "reasoning": m.ExtraFields["reasoning"], "top": resp.ExtraFields["zzz"],
	} {
		if strings.Contains(got, "4111") || strings.Contains(got, `u0034111`) || !strings.Contains(got, "[REDACTED:credit_card]") {
			t.Errorf("%s = %s", what, got)
		}
	}
	if got := resp.GetChoices()[0].ExtraFields["logprobs"]; got != "null" {
		t.Errorf("logprobs = %s, want null", got)
	}

	lp := func(ch *flexwayv1.ChatCompletionChunk, tok string) *flexwayv1.ChatCompletionChunk {
		ch.Choices[0].ExtraFields = map[string]string{"logprobs": `{"content":[{"token":` + quote(tok) + `}]}`}
		return ch
	}
	fc := &flexwayv1.ChatCompletionChunk{Id: "c1", Choices: []*flexwayv1.ChatCompletionChunkChoice{{Index: 0, Delta: &flexwayv1.ChatMessage{ExtraFields: map[string]string{
		"function_call": `{"arguments":"{\"card\":\"4111 1111 1111 1111\"}"}`,
	}}}}}
	r, _, err := relayGuarded(t, st, nil, roleChunk(), lp(textChunk(0, "card "), "card "), lp(textChunk(0, "4111"), "4111"), lp(textChunk(0, " 1111 1111 1111 ok"), " 1111 1111 1111 ok"), fc, finishChunk(0))
	if err != nil {
		t.Fatal(err)
	}
	if w := r.wire(); strings.Contains(w, "4111") || strings.Contains(w, `"logprobs":{`) {
		t.Errorf("the stream gives the card away: %s", w)
	}
}

// TestWebhookAnswerFailureLogged: a response webhook that fails is
// logged (its URL, never a text) and its on_error verdict applies; it was
// silent before (attack pass).
func TestWebhookAnswerFailureLogged(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }))
	defer srv.Close()
	st := guardState(t, false, nil, config.GuardrailRule{Type: "webhook", Action: "deny", URL: srv.URL + "/check?token=secret", OnError: "deny", Timeout: config.Duration(time.Second)})
	var logs bytes.Buffer
	c := New(Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	resp := &flexwayv1.ChatCompletion{Choices: []*flexwayv1.ChatCompletionChoice{{Message: &flexwayv1.ChatMessage{Content: &flexwayv1.ChatMessage_Text{Text: "the answer text"}}}}}
	err := c.newAnswerGuard(context.Background(), st, &flexwayv1.CreateChatCompletionRequest{}).checkJSON(resp)
	if faults.As(err).Reason != faults.GuardrailViolation {
		t.Fatalf("err %v, want the on_error deny", err)
	}
	l := logs.String()
	if !strings.Contains(l, "guardrail webhook failed") || !strings.Contains(l, `policy=p`) || strings.Contains(l, "answer text") || strings.Contains(l, "secret") {
		t.Fatalf("log: %s", l)
	}
}

// TestJSONSchemaEmptyAnswer: with a json_schema in the request, an
// answer whose content is null or empty and that calls no tool does not
// meet the schema and is refused, as JSON and as a stream (attack pass:
// `content: null` passed unchecked); one that calls a tool is judged by
// its arguments.
func TestJSONSchemaEmptyAnswer(t *testing.T) {
	st := guardState(t, false, nil, config.GuardrailRule{Type: "json_schema", Action: "deny"})
	for name, m := range map[string]*flexwayv1.ChatMessage{
		"null":                  {Role: "assistant", ExtraFields: map[string]string{"refusal": `"no"`}},
		"empty":                 {Role: "assistant", Content: &flexwayv1.ChatMessage_Text{Text: ""}},
		"null, tool_calls null": {Role: "assistant", ExtraFields: map[string]string{"tool_calls": "null"}},
		"null, tool_calls []":   {Role: "assistant", ExtraFields: map[string]string{"tool_calls": " [ ] "}},
	} {
		resp := &flexwayv1.ChatCompletion{Choices: []*flexwayv1.ChatCompletionChoice{{Message: m}}}
		err := New(Options{}).newAnswerGuard(context.Background(), st, schemaReq).checkJSON(resp)
		if fe := faults.As(err); fe == nil || fe.Reason != faults.GuardrailViolation {
			t.Errorf("%s content: %v", name, err)
		}
	}
	resp := &flexwayv1.ChatCompletion{Choices: []*flexwayv1.ChatCompletionChoice{{Message: &flexwayv1.ChatMessage{Role: "assistant",
		ExtraFields: map[string]string{"tool_calls": `[{"id":"c","type":"function","function":{"name":"pay","arguments":"{\"amount\":3}"}}]`}}}}}
	if err := New(Options{}).newAnswerGuard(context.Background(), st, schemaReq).checkJSON(resp); err != nil {
		t.Errorf("a valid tool call with null content: %v", err)
	}
	r, _, err := relayGuarded(t, st, schemaReq, roleChunk(), finishChunk(0))
	if fe := faults.As(err); fe == nil || fe.Reason != faults.GuardrailViolation || len(r.sent) != 0 {
		t.Fatalf("an empty stream: err %v, sent %s", err, r.wire())
	}
}

// TestOddToolCallsAnswer: an upstream answer whose tool_calls are not of
// OpenAI's shape (an object, arguments that are no string, a key spelt
// in another case, a second arguments key) has every string of them
// checked in a JSON answer, the card in them redacted (a misbehaving
// upstream's odd shape passed unread); a stream ends at such a delta,
// unsent, since its arguments cannot join the hold-back (attack pass:
// checked chunk by chunk, a key split across it and the next chunk
// passed whole); the ids and names of well-shaped ones are checked too.
func TestOddToolCallsAnswer(t *testing.T) {
	st := guardState(t, false, nil, redactCards)
	card := "4111 1111 1111 1111"
	for _, raw := range []string{
		`{"function":{"arguments":"` + card + `"}}`,
		`[{"function":{"name":"f","arguments":{"card":"` + card + `"}}}]`,
		`[{"function":{"name":"f","Arguments":"` + card + `"}}]`,
		`[{"function":{"name":"f","arguments":"{}","arguments":"` + card + `"}}]`,
		`[{"id":"` + card + `","type":"function","function":{"name":"f","arguments":"{}"}}]`,
	} {
		resp := &flexwayv1.ChatCompletion{Choices: []*flexwayv1.ChatCompletionChoice{{Message: &flexwayv1.ChatMessage{Role: "assistant", ExtraFields: map[string]string{"tool_calls": raw}}}}}
		if err := New(Options{}).newAnswerGuard(context.Background(), st, nil).checkJSON(resp); err != nil {
			t.Fatal(err)
		}
		if got := resp.Choices[0].Message.ExtraFields["tool_calls"]; strings.Contains(got, "4111") || !strings.Contains(got, "[REDACTED:credit_card]") {
			t.Errorf("JSON %s: sent %s", raw, got)
		}
		ch := &flexwayv1.ChatCompletionChunk{Id: "c1", Object: "chat.completion.chunk", Model: "m", Choices: []*flexwayv1.ChatCompletionChunkChoice{
			{Index: 0, Delta: &flexwayv1.ChatMessage{ExtraFields: map[string]string{"tool_calls": raw}}},
		}}
		r, _, err := relayGuarded(t, st, nil, roleChunk(), ch, finishChunk(0))
		_, perr := toolcalls.Parse(raw, nil)
		odd := perr != nil
		if odd && (faults.As(err) == nil || faults.As(err).Reason != faults.UpstreamError || strings.Contains(r.wire(), "4111")) {
			t.Errorf("stream %s: err %v, sent %s", raw, err, r.wire())
		}
		if !odd && (err != nil || strings.Contains(r.wire(), "4111") || !strings.Contains(r.wire(), "[REDACTED:credit_card]")) {
			t.Errorf("stream %s: err %v, sent %s", raw, err, r.wire())
		}
	}
	// the attack: half a key in a well-shaped entry, an odd second entry,
	// the rest in the next chunk
	mk := func(raw string) *flexwayv1.ChatCompletionChunk {
		return &flexwayv1.ChatCompletionChunk{Id: "c1", Choices: []*flexwayv1.ChatCompletionChunkChoice{{Index: 0, Delta: &flexwayv1.ChatMessage{ExtraFields: map[string]string{"tool_calls": raw}}}}}
	}
	r, _, err := relayGuarded(t, guardState(t, false, nil, denySecrets), nil,
		mk(`[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{"k":"sk-proj-abcdefghij"}},{"index":0,"function":{"arguments":1}}]`),
		mk(`[{"index":0,"function":{"arguments":"klmnopqrstuvwxyz0123"}"}}]`), finishChunk(0))
	if err == nil || strings.Contains(r.wire(), "abcdefghij") || strings.Contains(r.wire(), "klmnop") {
		t.Errorf("a key split around an odd entry: err %v, sent %s", err, r.wire())
	}
}

// TestStreamSameIndexTwice: a delta carrying two entries of one tool call
// (its name's, then the first arguments: a shape upstreams send) has every
// entry's arguments read; what the channel releases goes in the first and
// the others are emptied (attack pass: the first entry went out as the
// upstream sent it, a key before its denial, a card's first digits in
// clear).
func TestStreamSameIndexTwice(t *testing.T) {
	mk := func(raw string) *flexwayv1.ChatCompletionChunk {
		return &flexwayv1.ChatCompletionChunk{Id: "c1", Choices: []*flexwayv1.ChatCompletionChunkChoice{{Index: 0, Delta: &flexwayv1.ChatMessage{ExtraFields: map[string]string{"tool_calls": raw}}}}}
	}
	st := guardState(t, false, nil, redactCards)
	r, _, err := relayGuarded(t, st, nil,
		mk(`[{"index":0,"id":"t1","type":"function","function":{"name":"f","arguments":"4111 1111 1111 111"}},{"index":0,"function":{"arguments":"1"}}]`),
		mk(`[{"index":0,"function":{"arguments":" ok"}}]`),
		finishChunk(0))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.toolArgs(); got != "[REDACTED:credit_card] ok" || strings.Contains(r.wire(), "4111") {
		t.Errorf("arguments %q; wire %s", got, r.wire())
	}
	st = guardState(t, false, nil, denySecrets)
	r, _, err = relayGuarded(t, st, nil,
		mk(`[{"index":0,"id":"t1","type":"function","function":{"name":"f","arguments":"sk-proj-abcdefghijklmnopqrstuvwxyz0123"}},{"index":0,"function":{"arguments":""}}]`),
		finishChunk(0))
	if err == nil || strings.Contains(r.wire(), "sk-proj") {
		t.Errorf("err %v; wire %s", err, r.wire())
	}
}

// TestOtherSpellings: the unknown fields of a choice and of a chunk are
// checked, in JSON answers and in streams: a choice-level "Message", a
// legacy "text", a "Choices" or a "Delta" spelled otherwise are what a
// client decoding with encoding/json reads (attack pass: all relayed in
// clear).
func TestOtherSpellings(t *testing.T) {
	st := guardState(t, false, nil, redactCards, denySecrets)
	for _, body := range []string{
		`{"choices":[{"index":0,"Message":{"role":"assistant","content":"sk-proj-abcdefghijklmnopqrstuvwxyz0123"},"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"message":{"content":"ok"},"x":"sk-proj-abcdefghijklmnopqrstuvwxyz0123","finish_reason":"stop"}]}`,
	} {
		resp, err := openaiwire.ParseChatCompletion([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		g := New(Options{}).newAnswerGuard(context.Background(), st, nil)
		var fe *faults.Error
		if err := g.checkJSON(resp); !errors.As(err, &fe) || fe.Reason != faults.GuardrailViolation {
			t.Errorf("%s: %v", body, err)
		}
	}
	for _, chunk := range []string{
		`{"id":"c1","choices":[{"index":0,"delta":{},"text":"sk-proj-abcdefghijklmnopqrstuvwxyz0123"}]}`,
		`{"id":"c1","choices":[{"index":0,"Delta":{"Content":"sk-proj-abcdefghijklmnopqrstuvwxyz0123"}}]}`,
		`{"id":"c1","Choices":[{"index":0,"delta":{"content":"sk-proj-abcdefghijklmnopqrstuvwxyz0123"}}]}`,
	} {
		ch, err := openaiwire.ParseChatCompletionChunk([]byte(chunk))
		if err != nil {
			t.Fatal(err)
		}
		r, _, err := relayGuarded(t, st, nil, ch, finishChunk(0))
		if err == nil || strings.Contains(r.wire(), "sk-proj") {
			t.Errorf("%s: err %v, wire %s", chunk, err, r.wire())
		}
	}
	// a member spelled in another case ends the stream, unsent: checked
	// chunk by chunk, a card split across two chunks of it passed (fifth
	// attack pass D4)
	for _, chunk := range []string{
		`{"id":"c1","Choices":[{"index":0,"delta":{"content":"card 4111 1111 "}}]}`,
		`{"id":"c1","choices":[{"index":0,"DELTA":{"content":"card 4111 1111 "}}]}`,
		// and a JSON answer's message in a stream chunk (sixth pass E3)
		`{"id":"c1","choices":[{"index":0,"message":{"content":"card 4111 1111 "}}]}`,
	} {
		ch, _ := openaiwire.ParseChatCompletionChunk([]byte(chunk))
		r, _, err := relayGuarded(t, st, nil, ch, finishChunk(0))
		if f := faults.As(err); f == nil || f.Reason != faults.UpstreamError || strings.Contains(r.wire(), "4111") {
			t.Errorf("%s: err %v, wire %s", chunk, err, r.wire())
		}
	}
}

// TestStreamTextAfterFinish: text for a choice after its finish_reason
// ends the stream, unsent: its channels were flushed at the finish, and a
// card split across it went out in two halves (attack pass).
func TestStreamTextAfterFinish(t *testing.T) {
	st := guardState(t, false, nil, redactCards)
	fin := textChunk(0, "card 4111 1111 ")
	fin.Choices[0].FinishReason = proto.String("stop")
	r, _, err := relayGuarded(t, st, nil, fin, textChunk(0, "1111 1111 ok"))
	if f := faults.As(err); f == nil || f.Reason != faults.UpstreamError || strings.Contains(r.wire(), "1111 1111 ok") {
		t.Errorf("err %v, sent %s", err, r.wire())
	}
	// a usage chunk or an empty delta after the finish is no text
	r, _, err = relayGuarded(t, st, nil, fin, &flexwayv1.ChatCompletionChunk{Id: "c1", Choices: []*flexwayv1.ChatCompletionChunkChoice{{Index: 0, Delta: &flexwayv1.ChatMessage{}}}})
	if err != nil {
		t.Errorf("an empty delta after the finish: %v", err)
	}
}
