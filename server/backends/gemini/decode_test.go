package gemini

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

var testCall = Call{Model: "gemini-2.5-flash", Created: 1700000000}

// TestDecodeFixtures: each testdata/decode/<case>.gemini.json answer
// decodes into exactly <case>.openai.json. Covers: text and thought parts,
// usage (promptTokenCount includes cachedContentTokenCount; thoughts count
// as completion tokens), a functionCall making the finish reason
// tool_calls with ids carrying the thoughtSignature, MAX_TOKENS → length,
// a blocked prompt with no candidates → content_filter.
func TestDecodeFixtures(t *testing.T) {
	cases, _ := filepath.Glob("testdata/decode/*.gemini.json")
	if len(cases) == 0 {
		t.Fatal("no fixtures")
	}
	for _, c := range cases {
		name := strings.TrimSuffix(filepath.Base(c), ".gemini.json")
		t.Run(name, func(t *testing.T) {
			fixedIDs(t)
			got, err := Decode(readFixture(t, "decode", name+".gemini.json"), testCall)
			if err != nil {
				t.Fatal(err)
			}
			body := openaiwire.AppendChatCompletion(nil, got)
			if want := readFixture(t, "decode", name+".openai.json"); !jsonEqual(t, body, want) {
				t.Errorf("got  %s\nwant %s", body, compact(want))
			}
		})
	}
}

// TestThoughtSignatureRoundTrip: what Gemini sent with a function call
// reaches Gemini again on the next turn, carried by the tool call the
// client echoes back (no gateway state), and the tool results are named
// after their calls.
func TestThoughtSignatureRoundTrip(t *testing.T) {
	answer, err := Decode(readFixture(t, "decode", "function_call.gemini.json"), testCall)
	if err != nil {
		t.Fatal(err)
	}
	calls := answer.Choices[0].Message.ExtraFields["tool_calls"]
	// The client's next turn, as an OpenAI SDK builds it.
	next := `{"model":"gemini-2.5-flash","messages":[{"role":"user","content":"Weather?"},` +
		`{"role":"assistant","content":"Checking both.","tool_calls":` + calls + `},` +
		`{"role":"tool","tool_call_id":` + jsonField(t, calls, 0) + `,"content":"18C"},` +
		`{"role":"tool","tool_call_id":` + jsonField(t, calls, 1) + `,"content":"24C"}]}`
	req, err := openaiwire.ParseChatCompletionRequest([]byte(next))
	if err != nil {
		t.Fatal(err)
	}
	body, _, err := Encode(req, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"contents":[{"role":"user","parts":[{"text":"Weather?"}]},
	 {"role":"model","parts":[{"text":"Checking both."},
	   {"functionCall":{"name":"get_weather","args":{"city":"Paris"}},"thoughtSignature":"c2lnLW9uZQ=="},
	   {"functionCall":{"name":"get_weather","args":{"city":"Rome"}}}]},
	 {"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"content":"18C"}}},
	   {"functionResponse":{"name":"get_weather","response":{"content":"24C"}}}]}]}`
	if !jsonEqual(t, body, []byte(want)) {
		t.Errorf("next turn\n got %s\nwant %s", body, compact([]byte(want)))
	}
}

// jsonField returns the JSON text of calls[i].id.
func jsonField(t *testing.T, calls string, i int) string {
	t.Helper()
	var v []struct {
		ID string `json:"id"`
	}
	if err := jsonUnmarshal(calls, &v); err != nil || len(v) <= i {
		t.Fatalf("tool_calls %s: %v", calls, err)
	}
	return `"` + v[i].ID + `"`
}

// TestFinishReasons covers every Gemini finish reason the issue names.
func TestFinishReasons(t *testing.T) {
	for _, c := range []struct {
		in      string
		hasCall bool
		want    string
	}{
		{"STOP", false, "stop"}, {"MAX_TOKENS", false, "length"},
		{"SAFETY", false, "content_filter"}, {"BLOCKLIST", false, "content_filter"},
		{"PROHIBITED_CONTENT", false, "content_filter"}, {"SPII", false, "content_filter"},
		{"RECITATION", false, "content_filter"}, {"OTHER", false, "stop"},
		{"SOMETHING_NEW", false, "stop"}, {"STOP", true, "tool_calls"}, {"MAX_TOKENS", true, "tool_calls"},
	} {
		if got := FinishReason(c.in, c.hasCall); got != c.want {
			t.Errorf("FinishReason(%s, %v) = %s, want %s", c.in, c.hasCall, got, c.want)
		}
	}
}

// TestDecodeGarbage: a 200 that is not an answer is a 502.
func TestDecodeGarbage(t *testing.T) {
	for _, b := range []string{`<html>oops</html>`, `{"candidates":[]}`, `{}`, ``} {
		_, err := Decode([]byte(b), testCall)
		if fe, ok := errors.AsType[*faults.Error](err); !ok || fe.Reason != faults.UpstreamError {
			t.Errorf("Decode(%q) err %v, want upstream_error", b, err)
		}
	}
}

// TestDecodeError is the "every kind" error mapping, with Google's real
// error envelopes.
func TestDecodeError(t *testing.T) {
	const bad = `{"error":{"code":400,"message":"* GenerateContentRequest.contents: contents is not specified","status":"INVALID_ARGUMENT"}}`
	const quota = `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"17.2s"}]}}`
	const key = `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}}]}}`
	const overloaded = `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`
	for _, c := range []struct {
		name        string
		status      int
		retry       int64
		body        string
		reason      faults.Reason
		retryWant   int64
		relayedType string
		relayedMsg  string
		auth        bool
	}{
		{"invalid argument keeps 400 and message", 400, 0, bad, faults.UpstreamStatus, 0, "invalid_request_error", "* GenerateContentRequest.contents: contents is not specified", false},
		{"404 model", 404, 0, `{"error":{"code":404,"message":"models/x is not found","status":"NOT_FOUND"}}`, faults.UpstreamStatus, 0, "not_found_error", "models/x is not found", false},
		{"429 with RetryInfo", 429, 0, quota, faults.UpstreamStatus, 18, "rate_limit_error", "Resource has been exhausted (e.g. check quota).", false},
		{"429 Retry-After header wins", 429, 5, quota, faults.UpstreamStatus, 5, "rate_limit_error", "Resource has been exhausted (e.g. check quota).", false},
		{"401 is our credentials", 401, 0, `{"error":{"code":401,"status":"UNAUTHENTICATED","message":"key"}}`, faults.UpstreamError, 0, "", "", true},
		{"403 is our credentials", 403, 0, `{"error":{"code":403,"status":"PERMISSION_DENIED","message":"denied"}}`, faults.UpstreamError, 0, "", "", true},
		{"400 API_KEY_INVALID is our credentials", 400, 0, key, faults.UpstreamError, 0, "", "", true},
		{"503 overloaded is a 5xx the fallback acts on", 503, 0, overloaded, faults.UpstreamError, 0, "", "", false},
		{"500 HTML", 500, 0, `<html><body>Internal</body></html>`, faults.UpstreamError, 0, "", "", false},
		{"502 garbage", 502, 0, "\x00\x01garbage", faults.UpstreamError, 0, "", "", false},
		{"4xx garbage keeps its status", 413, 0, `<html>too big</html>`, faults.UpstreamStatus, 0, "invalid_request_error", "the Gemini upstream answered 413", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			fe := DecodeError(c.status, c.retry, []byte(c.body))
			if fe.Reason != c.reason || fe.RetryAfterSeconds != c.retryWant {
				t.Fatalf("got %s retry %d, want %s retry %d", fe.Reason, fe.RetryAfterSeconds, c.reason, c.retryWant)
			}
			if c.auth != errors.Is(fe, backends.ErrUpstreamAuth) {
				t.Fatalf("ErrUpstreamAuth %v, want %v", !c.auth, c.auth)
			}
			if fe.Reason == faults.UpstreamError {
				if fe.UpstreamBody != nil || strings.Contains(fe.Error(), "overloaded") || strings.Contains(fe.Message, "key") {
					t.Fatalf("a 502 shows the upstream's words: %q", fe.Message)
				}
				return
			}
			if fe.UpstreamHTTPStatus != c.status || fe.UpstreamContentType != "application/json" {
				t.Fatalf("status %d %q", fe.UpstreamHTTPStatus, fe.UpstreamContentType)
			}
			var env struct {
				Error struct{ Message, Type string } `json:"error"`
			}
			if err := jsonUnmarshal(string(fe.UpstreamBody), &env); err != nil || env.Error.Type != c.relayedType || env.Error.Message != c.relayedMsg {
				t.Fatalf("relayed %s", fe.UpstreamBody)
			}
		})
	}
}
