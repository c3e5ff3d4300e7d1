package validate_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"buf.build/go/protovalidate"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

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
	text := &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Text{Text: "a"}}
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
		// The rules every way in shares (openaiwire's), beside protovalidate.
		{name: "extra_fields carry n", req: &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{user}, ExtraFields: map[string]string{"n": "128"}}, param: "extra_fields.n"},
		{name: "extra_fields carry stream", req: &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{user}, ExtraFields: map[string]string{"stream": "true"}}, param: "extra_fields.stream"},
		{name: "unknown role", req: &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{{Role: "wizard", Content: &flexwayv1.ChatMessage_Text{Text: "hi"}}}}, param: "messages[0].role"},
		{name: "model too long", req: &flexwayv1.CreateChatCompletionRequest{Model: strings.Repeat("m", 257), Messages: []*flexwayv1.ChatMessage{user}}, param: "model"},
		{name: "embeddings model with a control character", req: &flexwayv1.CreateEmbeddingRequest{Model: "m\n", Input: text}, param: "model"},
		{name: "embeddings extra_fields carry input", req: &flexwayv1.CreateEmbeddingRequest{Model: "m", Input: text, ExtraFields: map[string]string{"Input": `"b"`}}, param: "extra_fields.Input"},
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

// TestStreamServerInterceptor: a streaming call's request passes the same
// checks when the handler receives it.
func TestStreamServerInterceptor(t *testing.T) {
	v, err := protovalidate.New()
	if err != nil {
		t.Fatal(err)
	}
	in := validate.StreamServerInterceptor(v)
	req := &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "hi"}}},
		StreamOptions: &flexwayv1.StreamOptions{ExtraFields: map[string]string{"Include_Usage": "false"}}}
	err = in(nil, recvStream{req: req}, &grpc.StreamServerInfo{}, func(_ any, ss grpc.ServerStream) error {
		return ss.RecvMsg(&flexwayv1.CreateChatCompletionRequest{})
	})
	var fe *faults.Error
	if !errors.As(err, &fe) || fe.Reason != faults.InvalidRequest || fe.Param != "stream_options.extra_fields.Include_Usage" {
		t.Fatalf("err = %v, want invalid_request on stream_options.extra_fields.Include_Usage", err)
	}
}

// recvStream is a server stream whose one message is req.
type recvStream struct {
	grpc.ServerStream
	req *flexwayv1.CreateChatCompletionRequest
}

func (s recvStream) RecvMsg(m any) error {
	proto.Merge(m.(proto.Message), s.req)
	return nil
}
