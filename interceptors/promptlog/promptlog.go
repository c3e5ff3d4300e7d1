package promptlog

import (
	"context"
	"slices"

	"google.golang.org/grpc"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/openaiwire"
	"github.com/flexway/flexway/server/policy"
	"github.com/flexway/flexway/server/promptlog"
)

// Config is what the interceptors need.
type Config struct {
	// Policies is the compiled ai.policies (the governance interceptor
	// resolves each call's into call.State.Policies). Required.
	Policies *policy.Table
	// Writers holds the writer of each policy that turns prompt logging
	// on, by policy name ([policy.Logging].Policy). A call whose deciding
	// policy has none is not logged.
	Writers map[string]*promptlog.Writer
}

// writer returns the writer of the call of st, nil when it is not
// logged.
func (c *Config) writer(st *call.State) *promptlog.Writer {
	if st == nil {
		return nil
	}
	l := st.Policies.Logging()
	if l == nil || !l.Enabled || (st.Sensitive && !l.IncludeSensitive) {
		return nil
	}
	return c.Writers[l.Policy]
}

// UnaryServerInterceptor logs the unary chat and embeddings calls whose
// policies turn prompt logging on. It panics when c.Policies is nil.
func UnaryServerInterceptor(c Config) grpc.UnaryServerInterceptor {
	mustTable(c)
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		st := call.FromContext(ctx)
		w := c.writer(st)
		if w == nil {
			return handler(ctx, req)
		}
		e := newEntry(st, req)
		if e == nil {
			return handler(ctx, req)
		}
		resp, err := handler(ctx, req)
		if err == nil {
			unaryAnswer(e, resp)
		}
		if err == nil || st.Outcome().Backend != "" {
			_ = w.Write(e) // after Close (shutdown): nothing left to log to
		}
		return resp, err
	}
}

// StreamServerInterceptor logs the streamed chat calls whose policies
// turn prompt logging on. A stream is wrapped only when
// [policy.Table.MayLog] says its caller's policies may log; its policies
// are resolved when its request is received, and only then is it known
// whether it is logged. It panics when c.Policies is nil.
func StreamServerInterceptor(c Config) grpc.StreamServerInterceptor {
	mustTable(c)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		st := call.FromContext(ss.Context())
		if st == nil || info.FullMethod != flexwayv1.ChatService_StreamChatCompletion_FullMethodName ||
			!c.Policies.MayLog(policy.Key{Listener: st.Listener, Operation: st.Operation, Tenant: st.Tenant, Agent: st.Agent}) {
			return handler(srv, ss)
		}
		s := &stream{ServerStream: ss, c: &c, st: st}
		err := handler(srv, s)
		if s.e != nil && (err == nil || s.sent || st.Outcome().Backend != "") {
			s.acc.answer(s.e)
			_ = s.w.Write(s.e)
		}
		return err
	}
}

func mustTable(c Config) {
	if c.Policies == nil {
		panic("promptlog: Config.Policies is nil")
	}
}

// newEntry is the entry of the call of st whose request is req, its
// messages encoded now; nil for a request that carries no prompt.
func newEntry(st *call.State, req any) *promptlog.Entry {
	e := &promptlog.Entry{Time: st.Start, RequestID: st.RequestID, Tenant: st.Tenant, Agent: st.Agent}
	switch r := req.(type) {
	case *flexwayv1.CreateChatCompletionRequest:
		e.Model = r.GetModel()
		e.Messages = openaiwire.AppendMessages(nil, r.GetMessages())
	case *flexwayv1.CreateEmbeddingRequest:
		e.Model = r.GetModel()
		e.Messages = openaiwire.AppendEmbeddingInputs(nil, r.GetInput())
		// The vectors are never logged.
		e.AnswerJSON = []byte("null")
	default:
		return nil
	}
	return e
}

// unaryAnswer sets e's answer from a unary call's response.
func unaryAnswer(e *promptlog.Entry, resp any) {
	c, ok := resp.(*flexwayv1.ChatCompletion)
	if !ok {
		return
	}
	choices := c.GetChoices()
	if len(choices) == 1 {
		if text, plain := plainText(choices[0].GetMessage()); plain {
			e.Answer = text
			return
		}
	}
	byIndex := slices.Clone(choices)
	slices.SortStableFunc(byIndex, func(x, y *flexwayv1.ChatCompletionChoice) int { return int(x.GetIndex()) - int(y.GetIndex()) })
	out := []byte{'['}
	for i, ch := range byIndex {
		if i > 0 {
			out = append(out, ',')
		}
		out = openaiwire.AppendMessage(out, ch.GetMessage())
	}
	e.AnswerJSON = append(out, ']')
}

// plainText returns m's text and true when m is text only: a string or
// null content, and no tool call, function call or refusal (other
// members, such as annotations, are not the answer's text and do not
// count).
func plainText(m *flexwayv1.ChatMessage) (string, bool) {
	switch m.GetContent().(type) {
	case *flexwayv1.ChatMessage_Text, *flexwayv1.ChatMessage_Null, nil:
	default:
		return "", false
	}
	for _, k := range answerMembers {
		if !emptyRaw(m.GetExtraFields()[k]) {
			return "", false
		}
	}
	return m.GetText(), true
}

// answerMembers are the members of an answer's message, besides content,
// that are part of the answer.
var answerMembers = [...]string{"tool_calls", "function_call", "refusal"}

// emptyRaw reports whether a raw JSON member's value says nothing:
// absent, null, "" or [].
func emptyRaw(v string) bool {
	return v == "" || v == "null" || v == `""` || v == "[]"
}
