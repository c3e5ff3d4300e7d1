package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestSSELineOverOneMiB(t *testing.T) {
	big := strings.Repeat("abcdefgh", (3<<20)/16) // 1.5 MiB
	up := newUpstream(t, sseUpstream(
		chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"content":"`+big+`"},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""),
	))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	resp, raw := streamBody(t, g, `{"model":"m-large","stream":true,"messages":[{"role":"user","content":"long"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %.300s", resp.StatusCode, raw)
	}
	text, finish, done := streamText(t, sseEvents(raw))
	if text != big || finish != "stop" || !done {
		t.Fatalf("content %d bytes (want %d), finish %q, done %v; tail %q", len(text), len(big), finish, done, tail(raw))
	}
}

func tail(b []byte) []byte {
	if len(b) > 300 {
		return b[len(b)-300:]
	}
	return b
}

// streamText joins the content deltas of choice 0 of SSE events and
// returns the last finish_reason and whether [DONE] ended the stream. An
// error event fails the test.
func streamText(t *testing.T, evs []string) (text, finish string, done bool) {
	t.Helper()
	var b strings.Builder
	for i, e := range evs {
		if e == "[DONE]" {
			if i != len(evs)-1 {
				t.Fatalf("[DONE] is not last: %q", evs)
			}
			return b.String(), finish, true
		}
		var c struct {
			Error   any `json:"error"`
			Choices []struct {
				Delta        struct{ Content *string } `json:"delta"`
				FinishReason *string                   `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event %d is not JSON: %v: %.200s", i, err, e)
		}
		if c.Error != nil {
			t.Fatalf("error event: %s", e)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				b.WriteString(*ch.Delta.Content)
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	return b.String(), finish, false
}

// TestEventSplitAcrossReads: the upstream writes its stream one byte per
// write, each flushed (a chunk of its own on the wire), and pauses inside
// multi-byte characters, so that events and UTF-8 characters arrive split
// across many reads.
func TestEventSplitAcrossReads(t *testing.T) {
	words := []string{"Grüße ", "aus ", "Tōkyō ", "日本語 ", "🎉"}
	var stream strings.Builder
	stream.WriteString("data: " + chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, "") + "\r\n\r\n")
	for _, w := range words {
		fmt.Fprintf(&stream, "data: %s\n\n", chunk(fmt.Sprintf(`[{"index":0,"delta":{"content":%q},"finish_reason":null}]`, w), ""))
	}
	stream.WriteString(": keep-alive comment\n\n")
	stream.WriteString("data: " + chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, "") + "\n\n")
	stream.WriteString("data: [DONE]\n\n")
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		s := stream.String()
		for i := 0; i < len(s); i++ {
			if _, err := w.Write([]byte{s[i]}); err != nil {
				return
			}
			f.Flush()
			if s[i] >= 0x80 {
				// Inside or at the end of a multi-byte character: let the
				// gateway read what came so far.
				time.Sleep(2 * time.Millisecond)
			}
		}
	})
	g := startGateway(t, baseConfig(t, up.URL, ""))
	resp, raw := streamBody(t, g, `{"model":"m-large","stream":true,"messages":[{"role":"user","content":"greet"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	text, finish, done := streamText(t, sseEvents(raw))
	if want := strings.Join(words, ""); text != want || finish != "stop" || !done {
		t.Fatalf("text %q (want %q) finish %q done %v\n%s", text, want, finish, done, raw)
	}
	if bytes.Contains(raw, []byte("\ufffd")) || bytes.Contains(raw, []byte(`\ufffd`)) {
		t.Fatalf("a character was broken: %s", raw)
	}
}

// TestStreamCutShortNeverLooksComplete: an upstream stream that ends
// before [DONE], cleanly or by a dropped connection, reaches the client
// with what was sent, then an error event, and no [DONE] or finish_reason.
func TestStreamCutShortNeverLooksComplete(t *testing.T) {
	for _, abrupt := range []bool{false, true} {
		t.Run(map[bool]string{false: "body ends", true: "connection dropped"}[abrupt], func(t *testing.T) {
			up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				f := w.(http.Flusher)
				fmt.Fprintf(w, "data: %s\n\n", chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, ""))
				fmt.Fprintf(w, "data: %s\n\n", chunk(`[{"index":0,"delta":{"content":"partial answ"},"finish_reason":null}]`, ""))
				f.Flush()
				if abrupt {
					time.Sleep(20 * time.Millisecond)
					conn, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						conn.Close()
					}
					return
				}
				io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","choi`) // cut inside an event
			})
			g := startGateway(t, baseConfig(t, up.URL, ""))
			resp, raw := streamBody(t, g, `{"model":"m-large","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, raw)
			}
			if bytes.Contains(raw, []byte("data: [DONE]")) {
				t.Fatalf("a cut stream ended with [DONE]:\n%s", raw)
			}
			evs := sseEvents(raw)
			if len(evs) < 2 {
				t.Fatalf("events: %q", evs)
			}
			text, finish, _ := streamText(t, evs[:len(evs)-1])
			if text != "partial answ" || finish != "" {
				t.Fatalf("text %q finish %q\n%s", text, finish, raw)
			}
			var last struct {
				Error *struct{ Message, Type, Code string } `json:"error"`
			}
			if err := json.Unmarshal([]byte(evs[len(evs)-1]), &last); err != nil || last.Error == nil {
				t.Fatalf("last event is no error event: %s", evs[len(evs)-1])
			}
			if last.Error.Code != "upstream_error" || last.Error.Message == "" {
				t.Fatalf("error event %+v", *last.Error)
			}
			if !bytes.HasSuffix(raw, []byte("\n\n")) {
				t.Fatalf("the error event is not terminated: %q", tail(raw))
			}
		})
	}
}

func TestUsageChunkOnlyWhenAsked(t *testing.T) {
	events := []string{
		// As OpenAI does once include_usage is on: "usage": null in
		// every chunk before the usage-only one.
		chunk(`[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]`, "null"),
		chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, "null"),
		chunk(`[]`, `{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}`),
	}
	for _, tt := range []struct {
		name, options string
		want          bool
	}{
		{"include_usage true", `,"stream_options":{"include_usage":true}`, true},
		{"not asked", ``, false},
		{"include_usage false", `,"stream_options":{"include_usage":false}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t, sseUpstream(events...))
			g := startGateway(t, baseConfig(t, up.URL, ""))
			_, raw := streamBody(t, g, `{"model":"m-large","stream":true`+tt.options+`,"messages":[{"role":"user","content":"hi"}]}`)
			evs := sseEvents(raw)
			text, finish, done := streamText(t, evs)
			if text != "hi" || finish != "stop" || !done {
				t.Fatalf("text %q finish %q done %v\n%s", text, finish, done, raw)
			}
			usageChunks := 0
			for _, e := range evs[:len(evs)-1] {
				var c struct {
					Choices []any           `json:"choices"`
					Usage   json.RawMessage `json:"usage"`
				}
				_ = json.Unmarshal([]byte(e), &c)
				if len(c.Usage) > 0 && string(c.Usage) != "null" {
					usageChunks++
					if len(c.Choices) != 0 || !strings.Contains(string(c.Usage), `"total_tokens":6`) {
						t.Errorf("usage chunk %s", e)
					}
				}
			}
			if !tt.want && strings.Contains(string(raw), `"usage"`) {
				t.Fatalf("a client that did not ask for usage sees it:\n%s", raw)
			}
			if want := map[bool]int{true: 1, false: 0}[tt.want]; usageChunks != want || len(evs) != 3+want {
				t.Fatalf("%d usage chunks in %d events, want %d\n%s", usageChunks, len(evs), want, raw)
			}
			so, _ := up.requests()[0].Body["stream_options"].(map[string]any)
			if so["include_usage"] != true {
				t.Fatalf("upstream was not asked for usage: %v", up.requests()[0].Body)
			}
		})
	}
}

// sseReader reads SSE data lines from a live stream, one event at a time.
type sseReader struct{ r *bufio.Reader }

// next returns the next event's data, or an error at the end of the body.
func (s *sseReader) next() (string, error) {
	var data []string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if len(data) > 0 {
				return strings.Join(data, "\n"), nil
			}
			continue
		}
		if v, ok := strings.CutPrefix(line, "data:"); ok {
			data = append(data, strings.TrimPrefix(v, " "))
		}
	}
}

func TestStreamChunksReachClient(t *testing.T) {
	events := []string{
		`{"id":"c9","object":"chat.completion.chunk","created":1741569952,"model":"m-large","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"abc"}`,
		`{"id":"c9","object":"chat.completion.chunk","created":1741569952,"model":"m-large","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hé \"x\"\n"},"logprobs":{"content":[{"token":"H","logprob":-1.5e-7,"bytes":[72],"top_logprobs":[]}]},"finish_reason":null}],"usage":null}`,
		`{"id":"c9","object":"chat.completion.chunk","created":1741569952,"model":"m-large","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`,
		`{"id":"c9","object":"chat.completion.chunk","created":1741569952,"model":"m-large","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":0}}}`,
	}
	up := newUpstream(t, sseUpstream(events...))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	_, raw := streamBody(t, g, `{"model":"m-large","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	evs := sseEvents(raw)
	if len(evs) != len(events)+1 || evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("events %q", evs)
	}
	for i, e := range events {
		semanticEqual(t, []byte(e), []byte(evs[i]))
	}
}

func TestNChoicesStream(t *testing.T) {
	events := []string{
		chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null},{"index":1,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, ""),
		chunk(`[{"index":1,"delta":{"content":"B1"},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"content":"A1"},"finish_reason":null}]`, ""),
		chunk(`[{"index":0,"delta":{"content":"A2"},"finish_reason":"stop"}]`, ""),
		chunk(`[{"index":1,"delta":{},"finish_reason":"length"}]`, ""),
	}
	up := newUpstream(t, sseUpstream(events...))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	_, raw := streamBody(t, g, `{"model":"m-large","n":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	evs := sseEvents(raw)
	if len(evs) != len(events)+1 || evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("events %q", evs)
	}
	for i, e := range events {
		semanticEqual(t, []byte(e), []byte(evs[i]))
	}
	if n := up.requests()[0].Body["n"]; n != float64(2) {
		t.Fatalf("upstream n = %v", n)
	}
}

// TestStreamCutBeforeContent: a stream cut after the role-only preamble
// sent nothing the client saw, so the failure is a plain 502, not a stream.
func TestStreamCutBeforeContent(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\n", chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, ""))
	})
	g := startGateway(t, baseConfig(t, up.URL, ""))
	resp, raw := streamBody(t, g, `{"model":"m-large","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 502 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
	}
	var env struct{ Error struct{ Code string } }
	if err := json.Unmarshal(raw, &env); err != nil || env.Error.Code != "upstream_error" {
		t.Fatalf("envelope %s (%v)", raw, err)
	}
}
