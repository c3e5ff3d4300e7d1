package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
)

// readAll receives every chunk's text until the stream's end, returning
// the texts and the final error.
func readAll(s backends.ChunkStream) ([]string, error) {
	var texts []string
	for {
		c, err := s.Recv()
		if err != nil {
			return texts, err
		}
		texts = append(texts, deltaText(c))
	}
}

// streamFrom starts a stream over an upstream serving transcript raw.
func streamFrom(t *testing.T, transcript string) backends.ChunkStream {
	t.Helper()
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, transcript)
	})
	s, _, err := newBackend(t, u, Options{}).StreamChatCompletion(context.Background(), chatRequest("m"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStreamRequest(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, serveStream("Hel", "lo"))
	s, served, err := newBackend(t, u, Options{Models: []string{"small-1"}, DefaultModel: "small-1"}).
		StreamChatCompletion(context.Background(), chatRequest("small-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := u.last(t)
	opts, _ := got.Body["stream_options"].(map[string]any)
	if got.Body["stream"] != true || opts["include_usage"] != true || got.Header.Get("Accept") != "text/event-stream" {
		t.Errorf("upstream saw stream %v, stream_options %v, Accept %q", got.Body["stream"], got.Body["stream_options"], got.Header.Get("Accept"))
	}
	if served != (backends.Served{Backend: "main", ModelSent: "small-1"}) {
		t.Errorf("served %+v", served)
	}
	var texts []string
	var usage int64
	for {
		c, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, deltaText(c))
		usage += c.GetUsage().GetTotalTokens()
	}
	if strings.Join(texts, "|") != "Hel|lo|" || usage != 5 {
		t.Errorf("texts %q, usage %d", texts, usage)
	}
	if _, err := s.Recv(); err != io.EOF {
		t.Errorf("Recv after the end: %v, want io.EOF again", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestSSEParsing(t *testing.T) {
	t.Parallel()
	// Two data lines of one event join with LF: a JSON document split
	// over lines stays one document.
	split := chunkJSON("two lines")
	cut := strings.Index(split, `"choices"`)
	tests := []struct {
		name       string
		transcript string
		want       []string
	}{
		{
			name:       "lf",
			transcript: "data: " + chunkJSON("a") + "\n\ndata: " + chunkJSON("b") + "\n\ndata: [DONE]\n\n",
			want:       []string{"a", "b"},
		},
		{
			name:       "crlf_and_no_space",
			transcript: "data:" + chunkJSON("a") + "\r\n\r\ndata:[DONE]\r\n\r\n",
			want:       []string{"a"},
		},
		{
			name: "comments_and_other_fields_ignored",
			transcript: ": OPENROUTER PROCESSING\n\n: ping\nevent: message\nid: 7\nretry: 3000\nfoo\ndata: " + chunkJSON("a") +
				"\n\n\n\nevent: completion\ndata: [DONE]\n\n",
			want: []string{"a"},
		},
		{
			name:       "multi_line_data",
			transcript: "data: " + split[:cut] + "\ndata: " + split[cut:] + "\n\ndata: [DONE]\n\n",
			want:       []string{"two lines"},
		},
		{
			name:       "empty_data_events_skipped",
			transcript: "data:\n\ndata: \n\ndata: " + chunkJSON("a") + "\n\ndata: [DONE]\n\n",
			want:       []string{"a"},
		},
		{
			name:       "bom",
			transcript: "\xEF\xBB\xBFdata: " + chunkJSON("a") + "\n\ndata: [DONE]\n\n",
			want:       []string{"a"},
		},
		{
			name:       "done_without_blank_line",
			transcript: "data: " + chunkJSON("a") + "\n\ndata: [DONE]\n",
			want:       []string{"a"},
		},
		{
			name:       "done_without_line_end",
			transcript: "data: " + chunkJSON("a") + "\n\ndata: [DONE]",
			want:       []string{"a"},
		},
		{
			name:       "error_word_in_content_is_content",
			transcript: "data: " + chunkJSON(`"error"`) + "\n\ndata: [DONE]\n\n",
			want:       []string{`"error"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := readAll(streamFrom(t, tt.transcript))
			if err != io.EOF {
				t.Fatalf("end: %v, want io.EOF", err)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("texts %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStreamFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		transcript string
		want       string // in the message
		secret     string // never in the message
	}{
		{
			name:       "cut_before_done",
			transcript: "data: " + chunkJSON("a") + "\n\n",
			want:       "stream ended before [DONE]",
		},
		{
			name:       "cut_mid_event",
			transcript: "data: " + chunkJSON("a") + "\n\ndata: {\"id\":\"chatcmpl-1\",\"cho",
			want:       "stream ended before [DONE]",
		},
		{
			name:       "cut_after_event_without_blank_line",
			transcript: "data: " + chunkJSON("a") + "\n\ndata: " + chunkJSON("b") + "\n",
			want:       "stream ended before [DONE]",
		},
		{
			name:       "error_object",
			transcript: "data: " + chunkJSON("a") + "\n\ndata: {\"error\":{\"message\":\"CUDA out of memory on gpu-node-7\",\"type\":\"server_error\",\"code\":500}}\n\ndata: [DONE]\n\n",
			want:       "reported an error in its stream",
			secret:     "gpu-node-7",
		},
		{
			name:       "error_event",
			transcript: "data: " + chunkJSON("a") + "\n\nevent: error\ndata: {\"message\":\"overloaded gpu-node-7\"}\n\n",
			want:       "reported an error in its stream",
			secret:     "gpu-node-7",
		},
		{
			name:       "unparseable_event",
			transcript: "data: " + chunkJSON("a") + "\n\ndata: <html>gpu-node-7</html>\n\ndata: [DONE]\n\n",
			want:       "unreadable stream event",
			secret:     "gpu-node-7",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := streamFrom(t, tt.transcript)
			got, err := readAll(s)
			if len(got) != 1 || got[0] != "a" {
				t.Errorf("texts %q, want [a] before the failure", got)
			}
			if err == io.EOF {
				t.Fatal("end: io.EOF, want an error")
			}
			fe := wantFault(t, err, faults.UpstreamError)
			if !strings.Contains(fe.Message, tt.want) {
				t.Errorf("message %q, want it to contain %q", fe.Message, tt.want)
			}
			if tt.secret != "" {
				notContains(t, "message", fe.Message, tt.secret)
				if strings.Contains(tt.name, "error_") {
					// An upstream's error event may echo a prompt or a
					// credential: not even the logged cause keeps it.
					notContains(t, "cause", fmt.Sprintf("%+v", fe.Err), tt.secret)
				}
			}
			if _, again := s.Recv(); again != err {
				t.Errorf("Recv after the failure: %v, want the same error", again)
			}
		})
	}
}

func TestStreamNotAnEventStream(t *testing.T) {
	t.Parallel()
	for _, ct := range []string{"application/json", "text/html; charset=utf-8"} {
		u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ct)
			io.WriteString(w, `{"error":{"message":"stream not supported"}}`)
		})
		_, served, err := newBackend(t, u, Options{}).StreamChatCompletion(context.Background(), chatRequest("m"))
		wantFault(t, err, faults.UpstreamError)
		if served.Backend != "main" {
			t.Errorf("served %+v", served)
		}
	}
}

// TestStreamLongLine: an event line over 1 MiB passes whole.
func TestStreamLongLine(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("abcdefgh", (1<<20)/8) + "é—end"
	got, err := readAll(streamFrom(t, "data: "+chunkJSON("a")+"\n\ndata: "+chunkJSON(long)+"\n\ndata: [DONE]\n\n"))
	if err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	if len(got) != 2 || got[1] != long {
		t.Errorf("got %d chunks, the long one %d bytes, want %d", len(got), len(got[len(got)-1]), len(long))
	}
}

// TestStreamOneByteAtATime: an upstream that writes and flushes one byte
// at a time, splitting every line, CRLF and multi-byte UTF-8 character.
func TestStreamOneByteAtATime(t *testing.T) {
	t.Parallel()
	texts := []string{"héllo ", "wörld — ", "世界 🎉", "€"}
	var sb strings.Builder
	sb.WriteString(": keep-alive\r\n\r\n")
	for i, text := range texts {
		c := chunkJSON(text)
		if i == 1 {
			// A multi-line event, split mid-document.
			cut := strings.Index(c, `"object"`)
			fmt.Fprintf(&sb, "event: message\r\ndata:%s\r\ndata:%s\r\n\r\n", c[:cut], c[cut:])
			continue
		}
		fmt.Fprintf(&sb, "data: %s\r\n\r\n", c)
	}
	sb.WriteString("data: " + usageChunkJSON + "\r\n\r\ndata: [DONE]\r\n\r\n")
	transcript := sb.String()
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := 0; i < len(transcript); i++ {
			w.Write([]byte{transcript[i]})
			f.Flush()
		}
	})
	s, _, err := newBackend(t, u, Options{}).StreamChatCompletion(context.Background(), chatRequest("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := readAll(s)
	if err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	if want := append(texts, ""); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("texts %q, want %q", got, want)
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	t.Parallel()
	done := make(chan struct{}, 1)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: "+chunkJSON("a")+"\n\n")
		w.(http.Flusher).Flush()
		block(r, done)
	})
	s, _, err := newBackend(t, u, Options{IdleTimeout: 300 * time.Millisecond}).StreamChatCompletion(context.Background(), chatRequest("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A slow reader is not an idle upstream: the timer only runs while a
	// read waits.
	time.Sleep(400 * time.Millisecond)
	if c, err := s.Recv(); err != nil || deltaText(c) != "a" {
		t.Fatalf("first Recv: %v, %v", c, err)
	}
	start := time.Now()
	_, err = s.Recv()
	fe := wantFault(t, err, faults.UpstreamTimeout)
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Errorf("timed out after %v, want about 300ms", d)
	}
	if !strings.Contains(fe.Message, "sent nothing for 300ms") {
		t.Errorf("message %q", fe.Message)
	}
	waitDone(t, done, "its request canceled")
}

// TestStreamKeepAliveComments: comments arriving more often than the idle
// timeout keep a slow stream alive. It is timing-bound, so it does not run
// in parallel with the package's CPU-heavy tests, and leaves a wide margin
// (a ping every 100ms against a 600ms idle timeout, for 1.2s in all).
func TestStreamKeepAliveComments(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for range 12 {
			io.WriteString(w, ": ping\n\n")
			f.Flush()
			time.Sleep(100 * time.Millisecond)
		}
		io.WriteString(w, "data: "+chunkJSON("late")+"\n\ndata: [DONE]\n\n")
	})
	s, _, err := newBackend(t, u, Options{IdleTimeout: 600 * time.Millisecond}).StreamChatCompletion(context.Background(), chatRequest("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := readAll(s); err != io.EOF || len(got) != 1 || got[0] != "late" {
		t.Errorf("got %q, %v", got, err)
	}
}

func TestStreamContextCancel(t *testing.T) {
	t.Parallel()
	done := make(chan struct{}, 1)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: "+chunkJSON("a")+"\n\n")
		w.(http.Flusher).Flush()
		block(r, done)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, _, err := newBackend(t, u, Options{}).StreamChatCompletion(ctx, chatRequest("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = s.Recv()
	wantFault(t, err, faults.Canceled)
	waitDone(t, done, "its request canceled")
}

func TestStreamCloseCancelsUpstream(t *testing.T) {
	t.Parallel()
	done := make(chan struct{}, 1)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: "+chunkJSON("a")+"\n\n")
		w.(http.Flusher).Flush()
		block(r, done)
	})
	b := newBackend(t, u, Options{})

	// Closed between two Recv calls.
	s, _, err := b.StreamChatCompletion(context.Background(), chatRequest("m"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, "its request canceled")
	_, err = s.Recv()
	wantFault(t, err, faults.Canceled)
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// Closed while a Recv waits.
	s, _, err = b.StreamChatCompletion(context.Background(), chatRequest("m"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { s.Close() })
	_, err = s.Recv()
	wantFault(t, err, faults.Canceled)
	waitDone(t, done, "its request canceled")
}

// TestStreamConnectionCut: the connection drops in the middle of a chunked
// body.
func TestStreamConnectionCut(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		event := "data: " + chunkJSON("a") + "\n\n"
		fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(event), event)
		fmt.Fprintf(buf, "100\r\ndata: {\"id\"")
		buf.Flush()
	})
	s, _, err := newBackend(t, u, Options{}).StreamChatCompletion(context.Background(), chatRequest("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := readAll(s)
	if len(got) != 1 {
		t.Errorf("texts %q", got)
	}
	if fe := wantFault(t, err, faults.UpstreamError); !strings.Contains(fe.Message, "stream ended before [DONE]") {
		t.Errorf("message %q", fe.Message)
	}
}

// TestStreamsConcurrent runs streams in parallel over one backend.
func TestStreamsConcurrent(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		bw := bufio.NewWriter(w)
		for i := range 20 {
			fmt.Fprintf(bw, "data: %s\n\n", chunkJSON(fmt.Sprint(i%10)))
			bw.Flush()
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	b := newBackend(t, u, Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 8 {
		wg.Go(func() {
			for range 5 {
				s, _, err := b.StreamChatCompletion(context.Background(), chatRequest("m"))
				if err != nil {
					errs <- err
					return
				}
				got, err := readAll(s)
				s.Close()
				if err != io.EOF || strings.Join(got, "") != "01234567890123456789" {
					errs <- fmt.Errorf("got %q, %v", got, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestStreamEventTooLarge: an event over the bound fails rather than
// growing without end.
func TestStreamEventTooLarge(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		line := "data: " + strings.Repeat("x", 1<<20) + "\n"
		for range 70 {
			if _, err := io.WriteString(w, line); err != nil {
				return
			}
		}
	})
	s, _, err := newBackend(t, u, Options{}).StreamChatCompletion(context.Background(), chatRequest("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Recv()
	if fe := wantFault(t, err, faults.UpstreamError); !strings.Contains(fe.Message, "over 64 MiB") {
		t.Errorf("message %q", fe.Message)
	}
	if errors.Is(err, io.EOF) {
		t.Error("error is io.EOF")
	}
}

// TestStreamAnsweredWithACompletion: a whole JSON completion answered to a
// stream call is a failure the request explains (backends.ErrRequestCaused:
// a carried field may have asked the upstream not to stream), which no
// circuit counts; a JSON error object stays the backend's failure.
func TestStreamAnsweredWithACompletion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body   string
		caused bool
	}{
		{`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`, true},
		{`{"error":{"message":"overloaded"}}`, false},
		{`{"id":"c","choices":[]}`, false},
	} {
		u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, tc.body)
		})
		_, _, err := newBackend(t, u, Options{}).StreamChatCompletion(context.Background(), chatRequest("m"))
		wantFault(t, err, faults.UpstreamError)
		if got := errors.Is(err, backends.ErrRequestCaused); got != tc.caused {
			t.Errorf("%s: request-caused %v, want %v", tc.body, got, tc.caused)
		}
	}
}

// TestUnaryAnsweredWithAStream: an event stream answered to a unary call,
// declared or not, is a failure the request explains.
func TestUnaryAnsweredWithAStream(t *testing.T) {
	t.Parallel()
	for _, ct := range []string{"text/event-stream", "application/json", ""} {
		u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ct)
			io.WriteString(w, "data: "+chunkJSON("hi")+"\n\ndata: [DONE]\n\n")
		})
		_, _, err := newBackend(t, u, Options{}).CreateChatCompletion(context.Background(), chatRequest("m"))
		wantFault(t, err, faults.UpstreamError)
		if !errors.Is(err, backends.ErrRequestCaused) {
			t.Errorf("Content-Type %q: %v, want a request-caused failure", ct, err)
		}
	}
}
