package a2a

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/sse"
	"github.com/flexway/flexway/server/faults"
)

// splitReader yields its body in the two reads body[:at] and body[at:], to
// replay a stream split at one byte boundary.
type splitReader struct {
	parts [][]byte
}

func (r *splitReader) Read(p []byte) (int, error) {
	for len(r.parts) > 0 && len(r.parts[0]) == 0 {
		r.parts = r.parts[1:]
	}
	if len(r.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.parts[0])
	r.parts[0] = r.parts[0][n:]
	return n, nil
}

// replayed is what a stream decoded to: one line per chunk, and the end.
type replayed struct {
	chunks      []string
	end         string // "done", or the error's reason and message
	contentSent bool   // ContentSent at the end
	err         error
}

// replay reads body through a real SSE reader into a fresh decoder, as the
// shared upstream path will: until the decoder is done, the body ends or
// an error.
func replay(r io.Reader) replayed { return replayWith(r, false) }

// replayWith is replay, with every event decoded by encoding/json when
// slowOnly (no fast path).
func replayWith(r io.Reader, slowOnly bool) replayed {
	events := sse.NewReader(r, 0)
	d := NewStreamDecoder(decodeOpts)
	d.slowOnly = slowOnly
	var out replayed
	var err error
	for !d.Done() {
		var event, data []byte
		event, data, err = events.Next()
		if err == io.EOF || err == io.ErrUnexpectedEOF { // the body's end, cut inside an event or not
			err = d.End()
			break
		}
		if err != nil {
			break
		}
		c, ferr := d.Feed(event, data)
		if ferr != nil {
			err = ferr
			break
		}
		if c != nil {
			ch := c.GetChoices()[0]
			out.chunks = append(out.chunks, fmt.Sprintf("%s %s idx=%d role=%q content=%q finish=%q usage=%v",
				c.GetId(), c.GetObject(), ch.GetIndex(), ch.GetDelta().GetRole(), ch.GetDelta().GetText(), ch.GetFinishReason(), c.Usage != nil))
		}
	}
	out.contentSent, out.err, out.end = d.ContentSent(), err, "done"
	if err != nil {
		fe := faults.As(err)
		out.end = fmt.Sprintf("%s: %s", fe.Reason, fe.Message)
	}
	return out
}

// TestStream covers the issue's `a2a` stream bullet (message/stream over
// SSE): artifact updates as content deltas, the Message shape, the
// input-required question as a normal end, failed as an error before
// content (fallback may act: Unavailable), an error event or a cut after
// content (a cut stream); no chunk carries usage. Each fixture is also
// replayed split at every byte boundary and one byte per read.
func TestStream(t *testing.T) {
	const id = "a2a-225d6247-06ba-4cda-a08b-33ae35c8dcfa chat.completion.chunk idx=0 "
	for _, tc := range []struct {
		fixture     string
		chunks      []string
		end         string
		contentSent bool
		unavailable bool
	}{
		{"stream_artifacts.sse", []string{
			id + `role="assistant" content="<section 1...>" finish="" usage=false`,
			id + `role="" content="<section 2...>" finish="" usage=false`,
			id + `role="" content="\nReferences." finish="" usage=false`,
			id + `role="" content="" finish="stop" usage=false`,
		}, "done", true, false},
		{"stream_message.sse", []string{
			`a2a-m-9 chat.completion.chunk idx=0 role="assistant" content="Hello from the agent." finish="stop" usage=false`,
		}, "done", true, false},
		{"stream_input_required.sse", []string{
			`a2a-t-q chat.completion.chunk idx=0 role="assistant" content="Which date?" finish="stop" usage=false`,
		}, "done", true, false},
		{"stream_failed.sse", nil, "upstream_error: upstream agentx failed the task", false, true},
		{"stream_error_after_content.sse", []string{
			`a2a-t-a chat.completion.chunk idx=0 role="assistant" content="Partial" finish="" usage=false`,
		}, "upstream_error: upstream agentx answered JSON-RPC error -32603", true, true},
		{"stream_cut.sse", []string{
			`a2a-t-c chat.completion.chunk idx=0 role="assistant" content="Partial" finish="" usage=false`,
		}, "upstream_error: upstream agentx stream ended before its final event", true, true},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			body := fixture(t, tc.fixture)
			got := replay(bytes.NewReader(body))
			if !slices.Equal(got.chunks, tc.chunks) || got.end != tc.end || got.contentSent != tc.contentSent {
				t.Fatalf("got\n%s\nend %q content %v\nwant\n%s\nend %q content %v",
					strings.Join(got.chunks, "\n"), got.end, got.contentSent, strings.Join(tc.chunks, "\n"), tc.end, tc.contentSent)
			}
			if got.err != nil && backends.Unavailable(got.err) != tc.unavailable {
				t.Errorf("Unavailable %v, want %v", backends.Unavailable(got.err), tc.unavailable)
			}
			for at := 0; at <= len(body); at++ {
				split := replay(&splitReader{parts: [][]byte{slices.Clone(body[:at]), slices.Clone(body[at:])}})
				if !slices.Equal(split.chunks, got.chunks) || split.end != got.end || split.contentSent != got.contentSent {
					t.Fatalf("split at %d: got %q end %q, want %q end %q", at, split.chunks, split.end, got.chunks, got.end)
				}
			}
			one := replay(iotest.OneByteReader(bytes.NewReader(body)))
			if !slices.Equal(one.chunks, got.chunks) || one.end != got.end {
				t.Fatalf("one byte per read: got %q end %q", one.chunks, one.end)
			}
			slow := replayWith(bytes.NewReader(body), true)
			if !slices.Equal(slow.chunks, got.chunks) || slow.end != got.end {
				t.Fatalf("without the fast path: got %q end %q", slow.chunks, slow.end)
			}
		})
	}
}

// TestStreamRejected covers a rejected task in a stream: a 502 that is
// the call's own (no fallback, no breaker count).
func TestStreamRejected(t *testing.T) {
	d := NewStreamDecoder(decodeOpts)
	_, err := d.Feed(nil, []byte(`{"jsonrpc":"2.0","id":"call-1","result":{"taskId":"t","contextId":"c","kind":"status-update","status":{"state":"rejected"},"final":true}}`))
	if fe := asFault(t, err); fe.HTTPStatus() != 502 || !errors.Is(err, backends.ErrRequestCaused) {
		t.Fatalf("got %v (%d)", err, fe.HTTPStatus())
	}
}

// TestStreamEvents covers, event by event (each replayed with and without
// the fast path), the rules every event of a message/stream answer
// follows: its JSON-RPC id is the request's (a null id only on an error
// object, which is the agent's); auth-required without a status message
// text is an error, not an empty answer; and a JSON-RPC error's cause
// keeps its code and data size, never its message.
func TestStreamEvents(t *testing.T) {
	const (
		artifact = `data: {"jsonrpc":"2.0","id":"call-1","result":{"taskId":"t","kind":"artifact-update","artifact":{"artifactId":"a","parts":[{"kind":"text","text":"Part"}]}}}` + "\n\n"
		done     = `data: {"jsonrpc":"2.0","id":"call-1","result":{"taskId":"t","kind":"status-update","status":{"state":"completed"},"final":true}}` + "\n\n"
		chunk    = `a2a-t chat.completion.chunk idx=0 role="assistant" content="Part" finish="" usage=false`
		last     = `a2a-t chat.completion.chunk idx=0 role="" content="" finish="stop" usage=false`
		other    = "upstream_error: upstream agentx answered another JSON-RPC request (its id is not this call's)"
		authErr  = "upstream_error: upstream agentx asked for authentication without saying what it needs"
	)
	event := func(id, result string) string {
		return `data: {"jsonrpc":"2.0","id":` + id + `,` + result + `}` + "\n\n"
	}
	artifactOf := func(id string) string {
		return event(id, `"result":{"taskId":"t","kind":"artifact-update","artifact":{"artifactId":"a","parts":[{"kind":"text","text":"Part"}]}}`)
	}
	status := func(st string) string {
		return event(`"call-1"`, `"result":{"taskId":"t","kind":"status-update","status":`+st+`,"final":true}`)
	}
	for _, tc := range []struct {
		name, body  string
		chunks      []string
		end         string
		contentSent bool
		cause       string // the error's cause, when not empty
	}{
		{"ids match", artifact + done, []string{chunk, last}, "done", true, ""},
		{"first event of another id", artifactOf(`"not-yours"`) + done, nil, other, false, "a2a JSON-RPC response id a string of 9 bytes, not the request's"},
		{"later event of another id", artifact + artifactOf(`"x"`) + done, []string{chunk}, other, true, ""},
		{"number id", artifactOf(`1`) + done, nil, other, false, "a2a JSON-RPC response id a non-string of 1 bytes, not the request's"},
		{"null-id result", artifactOf(`null`) + done, nil, other, false, "a2a JSON-RPC response id null, not the request's"},
		{"no id", `data: {"jsonrpc":"2.0","result":{"kind":"message","messageId":"m","parts":[{"kind":"text","text":"hi"}]}}` + "\n\n", nil, other, false, "a2a JSON-RPC response id absent, not the request's"},
		{"final status of another id", artifact + strings.Replace(done, `"call-1"`, `"x"`, 1), []string{chunk}, other, true, ""},
		{"null-id error is the agent's", event(`null`, `"error":{"code":-32603,"message":"no trip to SECRET-PROMPT","data":"x"}`), nil,
			"upstream_error: upstream agentx answered JSON-RPC error -32603", false, "a2a JSON-RPC error -32603, 3 data bytes"},
		{"another id's error", event(`"x"`, `"error":{"code":-32603,"message":"SECRET-PROMPT"}`), nil, other, false, ""},
		{"auth-required without message", status(`{"state":"auth-required"}`), nil, authErr, false, `a2a task state "auth-required", status message of 0 bytes`},
		{"auth-required after content", artifact + status(`{"state":"auth-required"}`), []string{chunk}, authErr, true, ""},
		{"auth-required task without message", event(`"call-1"`, `"result":{"kind":"task","id":"t","status":{"state":"auth-required"}}`), nil, authErr, false, ""},
		{"auth-required with its question", status(`{"state":"auth-required","message":{"role":"agent","messageId":"m","parts":[{"kind":"text","text":"Sign in"}]}}`),
			[]string{`a2a-t chat.completion.chunk idx=0 role="assistant" content="Sign in" finish="stop" usage=false`}, "done", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, slow := range []bool{false, true} {
				got := replayWith(strings.NewReader(tc.body), slow)
				if !slices.Equal(got.chunks, tc.chunks) || got.end != tc.end || got.contentSent != tc.contentSent {
					t.Fatalf("slow %v: got %q end %q content %v; want %q end %q content %v", slow, got.chunks, got.end, got.contentSent, tc.chunks, tc.end, tc.contentSent)
				}
				if got.err != nil && !backends.Unavailable(got.err) {
					t.Errorf("slow %v: an error the fallback rules may not act on", slow)
				}
				if tc.cause != "" {
					if fe := faults.As(got.err); fe.Err == nil || fe.Err.Error() != tc.cause {
						t.Errorf("slow %v: cause %v, want %q", slow, fe.Err, tc.cause)
					}
				}
			}
		})
	}
}
