package validate_test

import (
	"context"
	"errors"
	"testing"

	"buf.build/go/protovalidate"
	"google.golang.org/grpc"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/interceptors/validate"
	"github.com/flexway/flexway/server/faults"
)

func TestUnaryServerInterceptor(t *testing.T) {
	v, err := protovalidate.New()
	if err != nil {
		t.Fatal(err)
	}
	in := validate.UnaryServerInterceptor(v)
	user := &flexwayv1.ChatMessage{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "hi"}}
	n := int32(0)
	tests := []struct {
		name  string
		req   any
		param string
	}{
		{name: "valid", req: &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{user}}},
		{name: "no model", req: &flexwayv1.CreateChatCompletionRequest{Messages: []*flexwayv1.ChatMessage{user}}, param: "model"},
		{name: "no messages", req: &flexwayv1.CreateChatCompletionRequest{Model: "m"}, param: "messages"},
		{name: "n out of range", req: &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{user}, N: &n}, param: "n"},
		{name: "embeddings without input", req: &flexwayv1.CreateEmbeddingRequest{Model: "m"}, param: "input"},
		{name: "not a proto message passes", req: []byte("raw frame")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			_, err := in(context.Background(), tt.req, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
				called = true
				return nil, nil
			})
			if tt.param == "" {
				if err != nil || !called {
					t.Fatalf("err %v, handler called %v", err, called)
				}
				return
			}
			var fe *faults.Error
			if !errors.As(err, &fe) || fe.Reason != faults.InvalidRequest || fe.Param != tt.param {
				t.Fatalf("err = %v (%+v), want invalid_request on %s", err, fe, tt.param)
			}
			if called {
				t.Fatal("the handler ran for an invalid request")
			}
		})
	}
}
