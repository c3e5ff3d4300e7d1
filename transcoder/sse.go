package transcoder

import (
	"context"
	"errors"
	"io"
	"net/http"

	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// streamChat relays a streamed chat completion as server-sent events.
func (f *front) streamChat(ctx context.Context, w http.ResponseWriter, r *http.Request, req *flexwayv1.CreateChatCompletionRequest) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := f.chat.StreamChatCompletion(ctx, req)
	if err != nil {
		f.fail(w, r, err)
		return
	}
	header, _ := stream.Header()
	copyHeaders(w, header)
	writeSSE(w, stream.Recv, func() metadata.MD { return stream.Trailer() }, func(fe *faults.Error, started bool) {
		f.logFailure(r, fe, started)
	})
}

// writeSSE writes the chunks recv returns as `data: <json>` events, each
// flushed as soon as it is written, and `data: [DONE]` when recv returns
// io.EOF. An error before the first event is written as a plain OpenAI
// error response with its status; after it, the status can no longer
// change, so the error goes out as a final `data: {"error":...}` event and
// the stream ends without [DONE]: a cut stream never looks complete.
//
// The response headers are written with the first event. failed, when not
// nil, is told of the error and whether the stream had started. writeSSE
// is shaped like grpc-gateway's ForwardResponseStream.
func writeSSE(w http.ResponseWriter, recv func() (*flexwayv1.ChatCompletionChunk, error), trailer func() metadata.MD, failed func(fe *faults.Error, started bool)) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeOpenAIError(w, faults.New(faults.Internal, "streaming is not supported by this connection"))
		return
	}
	buf := make([]byte, 0, 512)
	started := false
	for {
		ch, err := recv()
		if errors.Is(err, io.EOF) {
			if !started {
				startSSE(w)
			}
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			flusher.Flush()
			return
		}
		if err != nil {
			fe := toFault(err)
			if failed != nil {
				failed(fe, started)
			}
			if !started {
				if trailer != nil {
					copyHeaders(w, trailer())
				}
				writeOpenAIError(w, fe)
				return
			}
			buf = append(buf[:0], "data: "...)
			buf = openaiwire.AppendError(buf, fe.Message, fe.Reason.OpenAIType(), fe.Param, string(fe.Reason))
			buf = append(buf, "\n\n"...)
			_, _ = w.Write(buf)
			flusher.Flush()
			return
		}
		if !started {
			startSSE(w)
			started = true
		}
		buf = append(buf[:0], "data: "...)
		buf = openaiwire.AppendChatCompletionChunk(buf, ch)
		buf = append(buf, "\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return
		}
		flusher.Flush()
	}
}

func startSSE(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}
