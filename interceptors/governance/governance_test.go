package governance_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/interceptors/governance"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/policy"
)

func table() *policy.Table {
	return policy.MustCompile([]config.Policy{
		{Name: "everyone", Governance: &config.Governance{Models: []string{"*"}}},
		{Name: "acme-governed", Match: config.PolicyMatch{Tenant: "acme"},
			Governance: &config.Governance{Models: []string{"fast", "small-1"}, Mode: config.GovernanceEnforce}},
		{Name: "globex-dry-run", Match: config.PolicyMatch{Tenant: "globex"},
			Governance: &config.Governance{Models: []string{"small-1"}, Mode: config.GovernanceShadow}},
		{Name: "grpc-only", Match: config.PolicyMatch{Listener: "grpc", Tenant: "initech"},
			Governance: &config.Governance{Models: []string{}}},
		{Name: "ocr-eu", Match: config.PolicyMatch{Operation: "acme.ocr.v1.OcrService"},
			Governance: &config.Governance{Backends: []string{"ocr-eu"}}},
	})
}

func cfg() governance.Config {
	return governance.Config{Policies: table(), ProxiedBackend: func(m string) (string, bool) {
		switch m {
		case "/acme.ocr.v1.OcrService/Recognize":
			return "ocr-us", true
		case "/acme.ocr.v1.EuOcrService/Recognize":
			return "ocr-eu", true
		}
		return "", false
	}}
}

func unary(t *testing.T, st *call.State, req any) (bool, error) {
	t.Helper()
	ran := false
	_, err := governance.UnaryServerInterceptor(cfg())(call.NewContext(context.Background(), st), req,
		&grpc.UnaryServerInfo{FullMethod: flexwayv1.ChatService_CreateChatCompletion_FullMethodName},
		func(context.Context, any) (any, error) { ran = true; return nil, nil })
	return ran, err
}

// who is a call's key fields.
type who struct{ Tenant, Listener, Operation string }

func TestModelRule(t *testing.T) {
	chat := func(model string) any { return &flexwayv1.CreateChatCompletionRequest{Model: model} }
	for _, tc := range []struct {
		name      string
		st        who
		req       any
		deny      string // the refusing policy, "" for none
		wouldDeny string
		policies  int
	}{
		{name: "listed", st: who{Tenant: "acme", Listener: "http", Operation: "ai.chatCompletions"}, req: chat("fast"), policies: 2},
		{name: "not listed", st: who{Tenant: "acme", Listener: "http", Operation: "ai.chatCompletions"}, req: chat("large-1"), deny: "acme-governed", policies: 2},
		{name: "embeddings too", st: who{Tenant: "acme", Listener: "grpc", Operation: "ai.embeddings"},
			req: &flexwayv1.CreateEmbeddingRequest{Model: "embed-1"}, deny: "acme-governed", policies: 2},
		{name: "shadow goes on", st: who{Tenant: "globex", Listener: "http", Operation: "ai.chatCompletions"}, req: chat("large-1"), wouldDeny: "globex-dry-run", policies: 2},
		{name: "shadow allows its list", st: who{Tenant: "globex", Listener: "http", Operation: "ai.chatCompletions"}, req: chat("small-1"), policies: 2},
		{name: "grpc-only policy, http call", st: who{Tenant: "initech", Listener: "http", Operation: "ai.chatCompletions"}, req: chat("fast"), policies: 1},
		{name: "grpc-only policy, grpc call", st: who{Tenant: "initech", Listener: "grpc", Operation: "ai.chatCompletions"}, req: chat("fast"), deny: "grpc-only", policies: 2},
		{name: "list models names no model", st: who{Tenant: "acme", Listener: "http", Operation: "ai.listModels"}, req: &flexwayv1.ListModelsRequest{}, policies: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &call.State{Tenant: tc.st.Tenant, Listener: tc.st.Listener, Operation: tc.st.Operation}
			ran, err := unary(t, st, tc.req)
			if len(st.Policies.Policies) != tc.policies {
				t.Errorf("%d policies resolved, want %d", len(st.Policies.Policies), tc.policies)
			}
			if tc.deny != "" {
				var fe *faults.Error
				if !errors.As(err, &fe) || fe.Reason != faults.ModelNotAllowed || fe.Param != "model" || ran {
					t.Fatalf("err %v, handler ran %v", err, ran)
				}
				model := tc.req.(interface{ GetModel() string }).GetModel()
				if want := `model "` + model + `" is not allowed for this caller by policy "` + tc.deny + `"`; fe.Message != want {
					t.Errorf("message %q, want %q", fe.Message, want)
				}
				// The refusal's audit line says which model was refused.
				if got := st.Outcome().ModelRequested; got != model {
					t.Errorf("outcome's model_requested %q, want %q", got, model)
				}
				return
			}
			if err != nil || !ran {
				t.Fatalf("err %v, handler ran %v", err, ran)
			}
			switch {
			case tc.wouldDeny == "" && st.WouldDeny != nil:
				t.Errorf("would_deny %+v, want none", st.WouldDeny)
			case tc.wouldDeny != "" && (st.WouldDeny == nil || st.WouldDeny.Policy != tc.wouldDeny || st.WouldDeny.Reason != policy.ReasonModelNotAllowed):
				t.Errorf("would_deny %+v, want %s", st.WouldDeny, tc.wouldDeny)
			}
		})
	}
}

// TestModelQuotedBounded: a caller's model is quoted and cut in the
// message, never written whole.
func TestModelQuotedBounded(t *testing.T) {
	long := "evil\"" + strings.Repeat("x", 500)
	_, err := unary(t, &call.State{Tenant: "acme", Listener: "http", Operation: "ai.chatCompletions"}, &flexwayv1.CreateChatCompletionRequest{Model: long})
	fe := faults.As(err)
	if fe.Reason != faults.ModelNotAllowed || len(fe.Message) > 140 || !strings.Contains(fe.Message, `"evil\"xxx`) {
		t.Fatalf("%v (%d bytes)", err, len(fe.Message))
	}
}

// fakeStream is a server stream whose RecvMsg fills a chat request.
type fakeStream struct {
	grpc.ServerStream
	ctx   context.Context
	model string
}

func (f *fakeStream) Context() context.Context { return f.ctx }
func (f *fakeStream) RecvMsg(m any) error {
	if r, ok := m.(*flexwayv1.CreateChatCompletionRequest); ok {
		r.Model = f.model
	}
	return nil
}

func TestStream(t *testing.T) {
	in := governance.StreamServerInterceptor(cfg())
	for _, tc := range []struct {
		name, method, tenant, model string
		reason                      faults.Reason
		started                     bool
	}{
		{name: "streamed chat refused at RecvMsg", method: flexwayv1.ChatService_StreamChatCompletion_FullMethodName, tenant: "acme", model: "large-1", reason: faults.ModelNotAllowed, started: true},
		{name: "streamed chat allowed", method: flexwayv1.ChatService_StreamChatCompletion_FullMethodName, tenant: "acme", model: "fast", started: true},
		{name: "proxied backend refused before the handler", method: "/acme.ocr.v1.OcrService/Recognize", tenant: "acme", reason: faults.BackendNotAllowed},
		{name: "proxied backend allowed", method: "/acme.ocr.v1.EuOcrService/Recognize", tenant: "acme", started: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &call.State{Tenant: tc.tenant, Listener: "grpc", Operation: tc.method}
			ss := &fakeStream{ctx: call.NewContext(context.Background(), st), model: tc.model}
			started := false
			err := in(nil, ss, &grpc.StreamServerInfo{FullMethod: tc.method}, func(_ any, s grpc.ServerStream) error {
				started = true
				if strings.Contains(tc.method, "Ocr") {
					return nil // a proxied call: its frames are not governance's
				}
				return s.RecvMsg(new(flexwayv1.CreateChatCompletionRequest))
			})
			if started != tc.started {
				t.Errorf("handler started %v, want %v", started, tc.started)
			}
			if tc.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if faults.As(err).Reason != tc.reason {
				t.Fatalf("err %v, want %q", err, tc.reason)
			}
			if tc.reason == faults.BackendNotAllowed && !strings.Contains(faults.As(err).Message, `policy "ocr-eu"`) {
				t.Errorf("message %q names no policy", faults.As(err).Message)
			}
		})
	}
}

func TestService(t *testing.T) {
	for in, want := range map[string]string{"/acme.ocr.v1.OcrService/Recognize": "acme.ocr.v1.OcrService", "/x": "/x"} {
		if got := governance.Service(in); got != want {
			t.Errorf("Service(%q) = %q, want %q", in, got, want)
		}
	}
}
