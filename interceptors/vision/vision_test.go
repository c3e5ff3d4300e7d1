package vision_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/interceptors/vision"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/imagecheck"
)

// policy allows 1000-byte images, data: URIs and one origin.
var policy = imagecheck.Policy{MaxImageBytes: 1000, AllowDataURIs: true, AllowedOrigins: []string{"https://images.example.com"}}

func checker(t *testing.T) *imagecheck.Checker {
	t.Helper()
	c, err := imagecheck.New(policy)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// chat is a chat request whose second message holds text and an image.
func chat(url string) *flexwayv1.CreateChatCompletionRequest {
	q := "what is this?"
	return &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{
		{Role: "system", Content: &flexwayv1.ChatMessage_Text{Text: "be brief"}},
		{Role: "user", Content: &flexwayv1.ChatMessage_Parts{Parts: &flexwayv1.ContentParts{Parts: []*flexwayv1.ContentPart{
			{Type: "text", Text: &q},
			{Type: "image_url", ImageUrl: &flexwayv1.ImageUrl{Url: url}},
		}}}},
	}}
}

func image(n int) string {
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(make([]byte, n))
}

const param = "messages[1].content[1].image_url.url"

var cases = []struct {
	name   string
	req    any
	reason faults.Reason // empty: served
}{
	{name: "image at the limit", req: chat(image(1000))},
	{name: "allowed remote image", req: chat("https://images.example.com/a.png")},
	{name: "image over the limit", req: chat(image(1001)), reason: faults.RequestTooLarge},
	{name: "broken base64", req: chat("data:image/png;base64,QU!D"), reason: faults.InvalidRequest},
	{name: "http origin", req: chat("http://images.example.com/a.png"), reason: faults.InvalidRequest},
	{name: "look-alike origin", req: chat("https://images.example.com.evil.test/a.png"), reason: faults.InvalidRequest},
	{name: "embeddings pass", req: &flexwayv1.CreateEmbeddingRequest{Model: "m"}},
	{name: "not a proto message passes", req: []byte("raw frame")},
}

// wantRefusal asserts err is the refusal of the image part with reason r.
func wantRefusal(t *testing.T, err error, r faults.Reason) {
	t.Helper()
	var fe *faults.Error
	if !errors.As(err, &fe) || fe.Reason != r || fe.Param != param {
		t.Fatalf("err = %v (%+v), want %s on %s", err, fe, r, param)
	}
}

func TestUnaryServerInterceptor(t *testing.T) {
	in := vision.UnaryServerInterceptor(checker(t))
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			resp, err := in(context.Background(), tt.req, &grpc.UnaryServerInfo{}, func(_ context.Context, req any) (any, error) {
				called = true
				return "served", nil
			})
			if tt.reason == "" {
				if err != nil || !called || resp != "served" {
					t.Fatalf("resp %v, err %v, handler called %v", resp, err, called)
				}
				return
			}
			wantRefusal(t, err, tt.reason)
			if called || resp != nil {
				t.Fatalf("the handler ran for a refused request (resp %v)", resp)
			}
		})
	}
}

// fakeStream delivers one message.
type fakeStream struct {
	grpc.ServerStream
	msg  proto.Message
	recv int
}

func (s *fakeStream) Context() context.Context { return context.Background() }

func (s *fakeStream) RecvMsg(m any) error {
	s.recv++
	proto.Merge(m.(proto.Message), s.msg)
	return nil
}

func TestStreamServerInterceptor(t *testing.T) {
	in := vision.StreamServerInterceptor(checker(t))
	for _, tt := range cases {
		msg, ok := tt.req.(*flexwayv1.CreateChatCompletionRequest)
		if !ok {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			fs := &fakeStream{msg: msg}
			served := false
			// The handler does what a generated server-streaming handler
			// does: receive the request, then run the service.
			err := in(nil, fs, &grpc.StreamServerInfo{IsServerStream: true}, func(_ any, ss grpc.ServerStream) error {
				req := new(flexwayv1.CreateChatCompletionRequest)
				if err := ss.RecvMsg(req); err != nil {
					return err
				}
				if !proto.Equal(req, msg) {
					t.Errorf("the service received %v, want %v", req, msg)
				}
				served = true
				return nil
			})
			if fs.recv != 1 {
				t.Fatalf("the underlying stream received %d messages, want 1", fs.recv)
			}
			if tt.reason == "" {
				if err != nil || !served {
					t.Fatalf("err %v, served %v", err, served)
				}
				return
			}
			wantRefusal(t, err, tt.reason)
			if served {
				t.Fatal("the service ran for a refused request")
			}
		})
	}
}

func TestNilChecker(t *testing.T) {
	for name, build := range map[string]func(){
		"unary":  func() { vision.UnaryServerInterceptor(nil) },
		"stream": func() { vision.StreamServerInterceptor(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != "interceptors/vision: nil Checker" {
					t.Fatalf("recovered %v, want the nil Checker panic", r)
				}
			}()
			build()
		})
	}
}

// chatService counts the calls that reach it.
type chatService struct {
	flexwayv1.UnimplementedChatServiceServer
	calls atomic.Int32
}

func (s *chatService) CreateChatCompletion(context.Context, *flexwayv1.CreateChatCompletionRequest) (*flexwayv1.ChatCompletion, error) {
	s.calls.Add(1)
	return &flexwayv1.ChatCompletion{Id: "c1"}, nil
}

func (s *chatService) StreamChatCompletion(_ *flexwayv1.CreateChatCompletionRequest, ss grpc.ServerStreamingServer[flexwayv1.ChatCompletionChunk]) error {
	s.calls.Add(1)
	return ss.Send(&flexwayv1.ChatCompletionChunk{Id: "c1"})
}

// TestOverGRPC runs the interceptors in a real gRPC server: a refused
// request comes back as INVALID_ARGUMENT with Flexway's ErrorInfo (reason
// and param) and never reaches the service, unary or streaming.
func TestOverGRPC(t *testing.T) {
	c := checker(t)
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.UnaryInterceptor(vision.UnaryServerInterceptor(c)), grpc.StreamInterceptor(vision.StreamServerInterceptor(c)))
	svc := &chatService{}
	flexwayv1.RegisterChatServiceServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := flexwayv1.NewChatServiceClient(conn)
	ctx := context.Background()

	unary := func(req *flexwayv1.CreateChatCompletionRequest) error {
		_, err := client.CreateChatCompletion(ctx, req)
		return err
	}
	streaming := func(req *flexwayv1.CreateChatCompletionRequest) error {
		st, err := client.StreamChatCompletion(ctx, req)
		if err != nil {
			return err
		}
		chunk, err := st.Recv()
		if err == nil && chunk.GetId() != "c1" {
			t.Errorf("chunk %v", chunk)
		}
		return err
	}
	for name, do := range map[string]func(*flexwayv1.CreateChatCompletionRequest) error{"unary": unary, "stream": streaming} {
		t.Run(name, func(t *testing.T) {
			before := svc.calls.Load()
			if err := do(chat(image(1000))); err != nil {
				t.Fatalf("image at the limit: %v", err)
			}
			if got := svc.calls.Load() - before; got != 1 {
				t.Fatalf("the service ran %d times for a valid request, want 1", got)
			}
			for _, tt := range []struct {
				url    string
				reason faults.Reason
				msg    string
			}{
				{image(1001), faults.RequestTooLarge, "the image is 1001 bytes decoded, over the limit of 1000 bytes"},
				{"https://user@images.example.com/a.png", faults.InvalidRequest, "userinfo"},
			} {
				err := do(chat(tt.url))
				st, _ := status.FromError(err)
				fe := faults.FromStatus(st)
				if st.Code() != codes.InvalidArgument || fe.Reason != tt.reason || fe.Param != param || !strings.Contains(st.Message(), tt.msg) {
					t.Errorf("%s: status %v, reason %s, param %q; want INVALID_ARGUMENT, %s, %s, %q", tt.reason, st, fe.Reason, fe.Param, tt.reason, param, tt.msg)
				}
			}
			if got := svc.calls.Load() - before; got != 1 {
				t.Fatalf("the service ran %d times, want only for the valid request", got)
			}
		})
	}
}
