package interceptors_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/interceptors"
	"github.com/flexway/flexway/interceptors/governance"
	ipromptlog "github.com/flexway/flexway/interceptors/promptlog"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/metering"
	"github.com/flexway/flexway/server/policy"
	"github.com/flexway/flexway/server/promptlog"
)

// rewritingMeter stands for any interceptor before the prompt log that
// rewrites the request (a prompt guardrail's redaction): it replaces the
// last message's text.
type rewritingMeter struct{}

func (rewritingMeter) Reserve(_ context.Context, _ *call.State, req any) (metering.Reservation, error) {
	if r, ok := req.(*flexwayv1.CreateChatCompletionRequest); ok {
		msgs := r.GetMessages()
		msgs[len(msgs)-1].Content = &flexwayv1.ChatMessage_Text{Text: "mail [REDACTED:email]"}
	}
	return metering.Reservation{}, nil
}

func (rewritingMeter) ReserveProxied(context.Context, *call.State, string) (*metering.ProxiedCall, bool, error) {
	return nil, false, nil
}

// TestChainPromptLogInnermost: the prompt log records the request as the
// service receives it, after the interceptors before it rewrote it.
func TestChainPromptLogInnermost(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.jsonl")
	tab := policy.MustCompile([]config.Policy{{Name: "all", PromptLogging: &config.PromptLogging{Enabled: true, Path: path}}})
	w, err := promptlog.Open(path, promptlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := interceptors.New(interceptors.Config{
		Keys: ring{}, Governance: &governance.Config{Policies: tab}, Budget: rewritingMeter{},
		PromptLog: &ipromptlog.Config{Policies: tab, Writers: map[string]*promptlog.Writer{"all": w}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer sk-acme"))
	req := &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "mail bob@example.com"}}}}
	var served string
	_, err = c.UnaryInterceptor()(ctx, req, &grpc.UnaryServerInfo{FullMethod: flexwayv1.ChatService_CreateChatCompletion_FullMethodName},
		func(_ context.Context, r any) (any, error) {
			served = r.(*flexwayv1.CreateChatCompletionRequest).GetMessages()[0].GetText()
			return &flexwayv1.ChatCompletion{}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if served != "mail [REDACTED:email]" || !strings.Contains(string(data), `"messages":[{"role":"user","content":"mail [REDACTED:email]"}]`) ||
		strings.Contains(string(data), "bob@example.com") {
		t.Errorf("served %q; prompt log:\n%s", served, data)
	}
}
