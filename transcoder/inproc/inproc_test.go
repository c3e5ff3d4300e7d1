package inproc_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/transcoder/inproc"
)

// chat answers with what it received, so that the test sees the request
// the handler got.
type chat struct {
	flexwayv1.UnimplementedChatServiceServer
	chunks int
	fail   error
}

func (chat) CreateChatCompletion(ctx context.Context, req *flexwayv1.CreateChatCompletionRequest) (*flexwayv1.ChatCompletion, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs("flexway-served-by", "main"))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("flexway-t", "1"))
	return &flexwayv1.ChatCompletion{Id: req.GetModel() + "/" + md.Get("authorization")[0]}, nil
}

func (c chat) StreamChatCompletion(req *flexwayv1.CreateChatCompletionRequest, ss flexwayv1.ChatService_StreamChatCompletionServer) error {
	_ = ss.SetHeader(metadata.Pairs("flexway-degraded", "backend-fallback"))
	ss.SetTrailer(metadata.Pairs("flexway-t", "2"))
	for i := range c.chunks {
		if err := ss.Send(&flexwayv1.ChatCompletionChunk{Id: req.GetModel(), Created: int64(i)}); err != nil {
			return err
		}
	}
	return c.fail
}

// sink records what a stream delivers, in order.
type sink struct {
	events  []string
	refuse  int // Send fails from this message on (0: never)
	gotSent int
}

func (s *sink) Header(md metadata.MD) {
	s.events = append(s.events, "header:"+md.Get("flexway-degraded")[0])
}

func (s *sink) Send(m any) error {
	s.gotSent++
	if s.refuse > 0 && s.gotSent >= s.refuse {
		return errors.New("client went away")
	}
	ch := m.(*flexwayv1.ChatCompletionChunk)
	s.events = append(s.events, ch.GetId())
	return nil
}

func newChannel(t *testing.T, impl flexwayv1.ChatServiceServer, seen *[]string) *inproc.Channel {
	t.Helper()
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		*seen = append(*seen, "unary "+info.FullMethod)
		return h(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		*seen = append(*seen, "stream "+info.FullMethod)
		return h(srv, ss)
	}
	c := inproc.New(unary, stream)
	flexwayv1.RegisterChatServiceServer(c, impl)
	return c
}

func TestInvokeRunsThroughTheInterceptor(t *testing.T) {
	var seen []string
	c := newChannel(t, chat{}, &seen)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer k")
	var header, trailer metadata.MD
	resp, err := flexwayv1.NewChatServiceClient(c).CreateChatCompletion(ctx,
		&flexwayv1.CreateChatCompletionRequest{Model: "m"}, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetId() != "m/Bearer k" {
		t.Errorf("reply id %q: the handler did not get the request and metadata", resp.GetId())
	}
	if got := header.Get("flexway-served-by"); !slices.Equal(got, []string{"main"}) {
		t.Errorf("header %v", header)
	}
	if got := trailer.Get("flexway-t"); !slices.Equal(got, []string{"1"}) {
		t.Errorf("trailer %v", trailer)
	}
	if !slices.Equal(seen, []string{"unary " + flexwayv1.ChatService_CreateChatCompletion_FullMethodName}) {
		t.Errorf("interceptor saw %v", seen)
	}
}

func TestServerStreamPushesHeaderThenChunks(t *testing.T) {
	var seen []string
	c := newChannel(t, chat{chunks: 2}, &seen)
	s := &sink{}
	trailer, err := c.ServerStream(context.Background(), flexwayv1.ChatService_StreamChatCompletion_FullMethodName,
		&flexwayv1.CreateChatCompletionRequest{Model: "m"}, s)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"header:backend-fallback", "m", "m"}; !slices.Equal(s.events, want) {
		t.Errorf("events %v, want %v", s.events, want)
	}
	if got := trailer.Get("flexway-t"); !slices.Equal(got, []string{"2"}) {
		t.Errorf("trailer %v", trailer)
	}
	if !slices.Equal(seen, []string{"stream " + flexwayv1.ChatService_StreamChatCompletion_FullMethodName}) {
		t.Errorf("interceptor saw %v", seen)
	}
}

func TestServerStreamErrors(t *testing.T) {
	var seen []string
	boom := status.Error(codes.Unavailable, "boom")
	c := newChannel(t, chat{chunks: 0, fail: boom}, &seen)
	s := &sink{}
	_, err := c.ServerStream(context.Background(), flexwayv1.ChatService_StreamChatCompletion_FullMethodName,
		&flexwayv1.CreateChatCompletionRequest{Model: "m"}, s)
	if !errors.Is(err, boom) {
		t.Errorf("error %v, want the handler's as it is", err)
	}
	if want := []string{"header:backend-fallback"}; !slices.Equal(s.events, want) {
		t.Errorf("a stream ending with no message still delivers its header: %v", s.events)
	}

	// A sink that refuses ends the handler's loop with its error.
	c = newChannel(t, chat{chunks: 5}, &seen)
	s = &sink{refuse: 2}
	_, err = c.ServerStream(context.Background(), flexwayv1.ChatService_StreamChatCompletion_FullMethodName,
		&flexwayv1.CreateChatCompletionRequest{Model: "m"}, s)
	if err == nil || err.Error() != "client went away" || s.gotSent != 2 {
		t.Errorf("error %v after %d sends, want the sink's after 2", err, s.gotSent)
	}

	if _, err := c.ServerStream(context.Background(), "/flexway.v1.ChatService/Nope", &flexwayv1.CreateChatCompletionRequest{}, s); status.Code(err) != codes.Unimplemented {
		t.Errorf("unknown stream: %v", err)
	}
	if err := c.Invoke(context.Background(), "/flexway.v1.ChatService/Nope", &flexwayv1.CreateChatCompletionRequest{}, &flexwayv1.ChatCompletion{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("unknown method: %v", err)
	}
}
