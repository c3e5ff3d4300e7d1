package anthropic

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/sse"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

var testOptions = Options{MaxOutputTokens: 64000}

// TestEncode encodes each testdata/encode/*.openai.json (an OpenAI
// request, as a client sends it) and compares the Messages body and the
// dropped field names with its .anthropic.json golden file. The fixtures
// cover: system/developer → system and same-role merging
// (system_merge); N tool messages → one user turn of N tool_result blocks
// after the tool_use turn, arguments → input, tool_choice required → any
// with disable_parallel_tool_use (tools_round); content "" plus tool_calls
// → only tool_use blocks, auto (empty_content_tool_calls); a named
// function → tool, stop array (tool_choice_function); none never gets
// disable_parallel_tool_use (tool_choice_none_parallel);
// parallel_tool_calls false alone → auto (parallel_only); data:image/jpg
// → base64 image/jpeg, https → url without media_type (images); the
// backend's max_output_tokens and the dropped names (dropped).
func TestEncode(t *testing.T) {
	for _, path := range fixtures(t, "encode", ".openai.json") {
		name := strings.TrimSuffix(path, ".openai.json")
		if strings.HasPrefix(name, "testdata/encode/refuse_") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			req := parseRequest(t, path)
			body, dropped, err := Encode(req, "claude-sonnet-4-5", testOptions)
			if err != nil {
				t.Fatal(err)
			}
			got := indent(t, body)
			if len(dropped) > 0 {
				got = append(got, []byte("dropped: "+strings.Join(dropped, ", ")+"\n")...)
			}
			golden(t, name+".anthropic.json", got)
		})
	}
}

func parseRequest(t *testing.T, path string) *flexwayv1.CreateChatCompletionRequest {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	req, err := openaiwire.ParseChatCompletionRequest(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return req
}

// TestEncodeRefuses: what the Messages API cannot express is a 400
// invalid_request naming the field, before anything is sent.
func TestEncodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		fixture, param string
		opt            Options
	}{
		{"refuse_n", "n", testOptions},
		{"refuse_temperature", "temperature", testOptions},
		{"refuse_bad_arguments", "messages[1].tool_calls[0].function.arguments", testOptions},
		{"refuse_image_type", "messages[0].content[0].image_url.url", testOptions},
		{"refuse_no_max_tokens", "max_tokens", Options{}},
		{"refuse_tool_no_id", "messages[1].tool_call_id", testOptions},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			req := parseRequest(t, "testdata/encode/"+tc.fixture+".openai.json")
			body, _, err := Encode(req, "m", tc.opt)
			var fe *faults.Error
			if !errors.As(err, &fe) || fe.Reason != faults.InvalidRequest || fe.Param != tc.param {
				t.Fatalf("Encode = %s, %v; want invalid_request naming %s", body, err, tc.param)
			}
		})
	}
}

// TestDecode decodes each testdata/decode/*.json Message and compares the
// chat completion (OpenAI's encoding) with its .openai.json golden file:
// text blocks joined, thinking → reasoning_content, tool_use → tool_calls
// with arguments as a JSON string, stop reasons (end_turn → stop,
// tool_use → tool_calls, max_tokens → length, refusal → content_filter,
// unknown → stop, logged once), prompt_tokens = input + cache_read +
// cache_write and cached_tokens = cache_read.
func TestDecode(t *testing.T) {
	var logged []string
	logUnknown = func(kind, v string) { logged = append(logged, kind+"="+v) }
	defer func(old func(string, string)) { logUnknown = old }(logUnknown)
	for _, path := range fixtures(t, "decode", ".json") {
		if strings.HasSuffix(path, ".openai.json") {
			continue
		}
		name := strings.TrimSuffix(path, ".json")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c, u, err := Decode(data, 1700000000)
			if err != nil {
				t.Fatal(err)
			}
			got := indent(t, openaiwire.AppendChatCompletion(nil, c))
			got = append(got, []byte("ledger: "+usageLine(u)+"\n")...)
			golden(t, name+".openai.json", got)
		})
	}
	// Decoded again: the unknown value is logged once only.
	data, _ := os.ReadFile("testdata/decode/unknown_stop.json")
	_, _, _ = Decode(data, 0)
	if want := []string{"stop_reason=model_context_window_exceeded"}; strings.Join(logged, ",") != strings.Join(want, ",") {
		t.Errorf("logged %q, want %q", logged, want)
	}
	for _, bad := range []string{"", "<html>", `{"type":"error","error":{"type":"api_error","message":"x"}}`} {
		if _, _, err := Decode([]byte(bad), 0); !isReason(err, faults.UpstreamError) {
			t.Errorf("Decode(%q) = %v, want upstream_error", bad, err)
		}
	}
}

func usageLine(u Usage) string {
	return strings.Join([]string{
		"input=" + itoa(u.Input), "output=" + itoa(u.Output),
		"cache_read=" + itoa(u.CacheRead), "cache_write=" + itoa(u.CacheWrite),
	}, " ")
}

func isReason(err error, r faults.Reason) bool {
	var fe *faults.Error
	return errors.As(err, &fe) && fe.Reason == r
}

// TestDecodeError is the "every kind" error mapping, with
// Anthropic's documented error bodies
// (https://docs.anthropic.com/en/api/errors).
func TestDecodeError(t *testing.T) {
	body := func(typ, msg string) []byte {
		return []byte(`{"type":"error","error":{"type":"` + typ + `","message":"` + msg + `"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`)
	}
	for _, tc := range []struct {
		name       string
		status     int
		retry      int64
		body       []byte
		reason     faults.Reason
		relayed    int    // UpstreamHTTPStatus
		envelope   string // UpstreamBody
		retryAfter int64
		auth       bool
	}{
		{name: "invalid_request", status: 400, body: body("invalid_request_error", "max_tokens: Field required"),
			reason: faults.UpstreamStatus, relayed: 400,
			envelope: `{"error":{"message":"max_tokens: Field required","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}`},
		{name: "not_found", status: 404, body: body("not_found_error", "model: claude-x"),
			reason: faults.UpstreamStatus, relayed: 404,
			envelope: `{"error":{"message":"model: claude-x","type":"invalid_request_error","param":null,"code":"not_found_error"}}`},
		{name: "request_too_large", status: 413, body: body("request_too_large", "Request exceeds the maximum allowed number of bytes."),
			reason: faults.UpstreamStatus, relayed: 413,
			envelope: `{"error":{"message":"Request exceeds the maximum allowed number of bytes.","type":"invalid_request_error","param":null,"code":"request_too_large"}}`},
		{name: "authentication", status: 401, body: body("authentication_error", "invalid x-api-key"), reason: faults.UpstreamError, auth: true},
		{name: "permission", status: 403, body: body("permission_error", "no access"), reason: faults.UpstreamError, auth: true},
		{name: "rate_limit", status: 429, retry: 17, body: body("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
			reason: faults.UpstreamStatus, relayed: 429, retryAfter: 17,
			envelope: `{"error":{"message":"Number of request tokens has exceeded your per-minute rate limit","type":"rate_limit_error","param":null,"code":"rate_limit_error"}}`},
		{name: "overloaded_529", status: 529, body: body("overloaded_error", "Overloaded"), reason: faults.UpstreamError},
		{name: "api_error_500", status: 500, body: body("api_error", "Internal server error"), reason: faults.UpstreamError},
		{name: "html_502", status: 502, body: []byte("<html><body>Bad Gateway</body></html>"), reason: faults.UpstreamError},
		{name: "garbage_503", status: 503, retry: 3, body: []byte("\x00\xffnot json"), reason: faults.UpstreamError, retryAfter: 3},
		{name: "html_400", status: 400, body: []byte("<html>400 Bad Request</html>"),
			reason: faults.UpstreamStatus, relayed: 400,
			envelope: `{"error":{"message":"upstream answered 400","type":"invalid_request_error","param":null,"code":null}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := DecodeError(tc.status, tc.retry, tc.body)
			if fe.Reason != tc.reason || fe.UpstreamHTTPStatus != tc.relayed || string(fe.UpstreamBody) != tc.envelope ||
				fe.RetryAfterSeconds != tc.retryAfter || errors.Is(fe, backends.ErrUpstreamAuth) != tc.auth {
				t.Fatalf("got reason %s, status %d, body %s, retry %d, err %v", fe.Reason, fe.UpstreamHTTPStatus, fe.UpstreamBody, fe.RetryAfterSeconds, fe.Err)
			}
			if tc.auth && strings.Contains(fe.Message+fe.Err.Error(), "x-api-key") {
				t.Errorf("the upstream's text leaked: %v", fe.Err)
			}
			if fe.Reason != faults.UpstreamStatus && bytes.Contains([]byte(fe.Message), tc.body) {
				t.Errorf("message %q carries the body", fe.Message)
			}
		})
	}
}

// TestStream replays each testdata/stream/*.sse through the event reader
// and the decoder and compares the chunks and the end with its .chunks
// golden file, then replays it split at every byte boundary (and with a
// 16-byte read buffer, so that lines cross buffer refills) for the same
// output, and once with the encoding/json path alone. The fixtures cover: the chunk sequence of a text answer, LF and
// CRLF (text, text_crlf); thinking_delta → reasoning_content, tool calls
// indexed 0 and 1 after a thinking and a text block, id/type/name on the
// first fragment only, empty partial_json skipped, tool_use → tool_calls
// (tools_after_thinking); cumulative usage, last value wins, a
// message_delta without stop_reason, max_tokens → length
// (usage_last_wins); refusal → content_filter (refusal); an error event
// after content and before any (error_after_content,
// error_before_content: an upstream_error the fallback may act on); a
// stream cut before message_stop (cut).
func TestStream(t *testing.T) {
	for _, path := range fixtures(t, "stream", ".sse") {
		name := strings.TrimSuffix(path, ".sse")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := replay(bytes.NewReader(data), 0)
			golden(t, name+".chunks", []byte(want))
			fastPath = false
			general := replay(bytes.NewReader(data), 0)
			fastPath = true
			if general != want {
				t.Fatalf("the general path decodes otherwise than the fast one:\n got: %s\nwant: %s", general, want)
			}
			for i := 0; i <= len(data); i++ {
				r := io.MultiReader(bytes.NewReader(data[:i]), bytes.NewReader(data[i:]))
				if got := replay(r, 16); got != want {
					t.Fatalf("split at byte %d:\n got: %s\nwant: %s", i, got, want)
				}
			}
		})
	}
}

// TestStreamContent: Content tells a failure before any content (the
// fallback rules may act) from a cut stream.
func TestStreamContent(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		content bool
	}{{"error_before_content", false}, {"error_after_content", true}, {"cut", true}, {"refusal", false}} {
		data, _ := os.ReadFile("testdata/stream/" + tc.fixture + ".sse")
		er := sse.NewReader(bytes.NewReader(data), 0)
		s := NewStream(0)
		for {
			name, d, err := er.Next()
			if err != nil {
				break
			}
			if _, err := s.Event(name, d); err != nil {
				break
			}
		}
		if s.Content() != tc.content {
			t.Errorf("%s: Content() = %v, want %v", tc.fixture, s.Content(), tc.content)
		}
	}
}

// TestStreamFastPathEscapes: the fast path unescapes as encoding/json
// does, and leaves what it does not read exactly to the general path.
func TestStreamFastPathEscapes(t *testing.T) {
	start := []byte(`{"type":"message_start","message":{"id":"m","type":"message","model":"x","usage":{}}}`)
	for _, data := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\"b\\c\/d\n\t\u00e9\ud83d\ude00 \u2028"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lone \ud83d surrogate"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"invalid ` + "\xff" + ` utf-8"}}`,
		` { "index" : 0 , "type" : "content_block_delta" , "delta" : { "text" : "spaced" , "type" : "text_delta" } } `,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"},"extra":[1,{"a":null}]}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"type":"char_location"}}}`,
		`{"type":"content_block_delta","index":007,"delta":{"type":"text_delta","text":"x"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}} trailing`,
	} {
		var outs [2]string
		for i, fast := range []bool{true, false} {
			fastPath = fast
			s := NewStream(0)
			_, _ = s.Event(nil, start)
			c, err := s.Event(nil, []byte(data))
			if err != nil {
				outs[i] = endLine(err)
			} else if c != nil {
				outs[i] = string(openaiwire.AppendChatCompletionChunk(nil, c))
			}
		}
		fastPath = true
		if outs[0] != outs[1] {
			t.Errorf("%s:\n fast:    %s\n general: %s", data, outs[0], outs[1])
		}
	}
}

// TestStreamBadEvents: malformed or out-of-order upstream events are an
// upstream_error, never a panic or a silent success; unknown event types
// and events after message_stop emit nothing.
func TestStreamBadEvents(t *testing.T) {
	start := `{"type":"message_start","message":{"id":"m","type":"message","model":"x","usage":{}}}`
	for _, tc := range []struct {
		name   string
		events []string
		want   faults.Reason // "" when every event is accepted
	}{
		{"garbage", []string{"<html>"}, faults.UpstreamError},
		{"delta before message_start", []string{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}`}, faults.UpstreamError},
		{"two message_start", []string{start, start}, faults.UpstreamError},
		{"input_json_delta outside a tool block", []string{start, `{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{"}}`}, faults.UpstreamError},
		{"block index out of range", []string{start, `{"type":"content_block_start","index":99999999,"content_block":{"type":"text","text":""}}`}, faults.UpstreamError},
		{"error event with garbage data", []string{start, "not json"}, faults.UpstreamError},
		{"unknown events are ignored", []string{`{"type":"future_event"}`, start, `{"type":"future_event","x":1}`}, ""},
		{"events after message_stop are ignored", []string{start, `{"type":"message_stop"}`, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"late"}}`}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStream(0)
			var err error
			for i, ev := range tc.events {
				var name []byte
				if tc.name == "error event with garbage data" && i == 1 {
					name = []byte("error")
				}
				var c *flexwayv1.ChatCompletionChunk
				if c, err = s.Event(name, []byte(ev)); err != nil {
					break
				}
				if c != nil && strings.Contains(ev, "late") {
					t.Fatalf("an event after message_stop emitted %v", c)
				}
			}
			if tc.want == "" && err != nil || tc.want != "" && !isReason(err, tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
