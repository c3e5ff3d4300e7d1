package main

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// crawlerKey is the API key of agent crawler of tenant acme in the
// per-minute tests (acmeBot is agent bot's).
const crawlerKey = "sk-test-acme-crawler"

// rateConfig is [budgetTestConfig] (no budget of its own) with tenant
// acme, its agents bot and crawler declared (each its own key), acme's
// budget in YAML flow form (e.g. "{tokens_per_minute: 100}") and ai lines
// after the backends (ai.policies).
func rateConfig(t testing.TB, upURL, acmeBudget, ai string) string {
	t.Helper()
	return rateTestConfig(t, upURL, acmeBudget, ai).yaml()
}

// rateTestConfig is [rateConfig] before it is rendered.
func rateTestConfig(t testing.TB, upURL, acmeBudget, ai string) testConfig {
	t.Helper()
	t.Setenv("FLEXWAY_TEST_KEY_CRAWLER", crawlerKey)
	c := budgetTestConfig(t, upURL, upURL, "")
	c.Keys = append(c.Keys, testKey{Name: "acme-crawler", Env: "FLEXWAY_TEST_KEY_CRAWLER", Tenant: "acme", Agent: "crawler"})
	c.Tenants = []testTenant{{Name: "acme", Budget: acmeBudget, Agents: []testAgent{{Name: "bot"}, {Name: "crawler"}}}}
	c.AI = ai
	return c
}

// postKey posts a chat body to the gateway with key, reading the answer
// whole.
func postKey(t testing.TB, g *testGW, key, body string) (*http.Response, string) {
	t.Helper()
	resp := send(t, g, "POST", "/v1/chat/completions", strings.NewReader(body), map[string]string{"Authorization": "Bearer " + key})
	raw, _ := io.ReadAll(resp.Body)
	return resp, string(raw)
}

// rateHeaders are the four x-ratelimit-* headers of h, "" when absent.
type rateHeaders struct{ limitTokens, remainingTokens, limitRequests, remainingRequests string }

func rateOf(h http.Header) rateHeaders {
	return rateHeaders{h.Get("X-Ratelimit-Limit-Tokens"), h.Get("X-Ratelimit-Remaining-Tokens"), h.Get("X-Ratelimit-Limit-Requests"), h.Get("X-Ratelimit-Remaining-Requests")}
}

// wantRateLimited checks a 429 rate_limited answer with a Retry-After of
// whole seconds, at least 1, returning it.
func wantRateLimited(t testing.TB, what string, resp *http.Response, body string) int {
	t.Helper()
	if resp.StatusCode != 429 || !strings.Contains(body, `"code":"rate_limited"`) {
		t.Fatalf("%s: %d %s; want 429 rate_limited", what, resp.StatusCode, body)
	}
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 61 {
		t.Fatalf("%s: Retry-After %q, want whole seconds in [1, 61] (an amount of second s counts until s+61)", what, resp.Header.Get("Retry-After"))
	}
	if resp.Header.Get("X-Should-Retry") != "" {
		t.Errorf("%s: x-should-retry %q on a refusal a retry cures", what, resp.Header.Get("X-Should-Retry"))
	}
	return ra
}

// TestTokensPerMinute: a tenant's tokens_per_minute admits calls while
// their reservations (input bound + max_tokens) fit; every answer carries
// the four x-ratelimit-* headers, the remaining tokens going down by each
// call's reservation and the remaining requests by one; the next call is
// 429 rate_limited with Retry-After, never sent upstream; a call whose
// max_tokens alone passes the cap is refused at once, saying so.
func TestTokensPerMinute(t *testing.T) {
	est := reservedFor(t, chatBody, 1024)
	perCall := est.Input + est.Output
	const n = 3
	up := newUpstream(t, usageUpstream(est.Input, est.Output))
	capTokens := n*perCall + perCall/2
	g := startGateway(t, rateConfig(t, up.URL, fmt.Sprintf("{tokens_per_minute: %d, requests_per_minute: 100}", capTokens), ""))
	for i := int64(1); i <= n; i++ {
		resp, body := postKey(t, g, demoKey, chatBody)
		if resp.StatusCode != 200 {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, body)
		}
		want := rateHeaders{strconv.FormatInt(capTokens, 10), strconv.FormatInt(capTokens-i*perCall, 10), "100", strconv.FormatInt(100-i, 10)}
		if got := rateOf(resp.Header); got != want {
			t.Errorf("call %d: headers %+v, want %+v", i, got, want)
		}
	}
	resp, body := postKey(t, g, demoKey, chatBody)
	wantRateLimited(t, "past the cap", resp, body)
	if got, want := rateOf(resp.Header), (rateHeaders{strconv.FormatInt(capTokens, 10), strconv.FormatInt(capTokens-n*perCall, 10), "100", strconv.FormatInt(100-n, 10)}); got != want {
		t.Errorf("429 headers %+v, want %+v", got, want)
	}
	if !strings.Contains(body, "tokens_per_minute") {
		t.Errorf("the refusal does not name the cap: %s", body)
	}
	if got := len(up.requests()); got != n {
		t.Fatalf("%d calls reached the upstream, want %d", got, n)
	}

	// One call bigger than the whole cap: refused at once, no wait helps.
	big := fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":"Hi"}]}`, capTokens+1)
	start := time.Now()
	resp, body = postKey(t, g, demoKey, big)
	if resp.StatusCode != 429 || !strings.Contains(body, `"code":"rate_limited"`) || !strings.Contains(body, "more than") || !strings.Contains(body, "whole tokens_per_minute cap") {
		t.Fatalf("over the cap alone: %d %s; want 429 rate_limited saying the call is bigger than the cap", resp.StatusCode, body)
	}
	if resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-Should-Retry") != "false" || time.Since(start) > 2*time.Second {
		t.Errorf("over the cap alone: Retry-After %q, x-should-retry %q, took %v; want none, false, at once", resp.Header.Get("Retry-After"), resp.Header.Get("X-Should-Retry"), time.Since(start))
	}
}

// TestRequestsPerMinute: requests_per_minute admits that many calls in
// the window, the next is 429 rate_limited with Retry-After; the token
// headers are absent without a tokens_per_minute cap.
func TestRequestsPerMinute(t *testing.T) {
	up := newUpstream(t, usageUpstream(10, 5))
	g := startGateway(t, rateConfig(t, up.URL, "{requests_per_minute: 2}", ""))
	for i := 1; i <= 2; i++ {
		resp, body := postKey(t, g, demoKey, chatBody)
		if resp.StatusCode != 200 {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, body)
		}
		if got, want := rateOf(resp.Header), (rateHeaders{"", "", "2", strconv.Itoa(2 - i)}); got != want {
			t.Errorf("call %d: headers %+v, want %+v", i, got, want)
		}
	}
	resp, body := postKey(t, g, demoKey, chatBody)
	wantRateLimited(t, "third call", resp, body)
	if got, want := rateOf(resp.Header), (rateHeaders{"", "", "2", "0"}); got != want {
		t.Errorf("429 headers %+v, want %+v", got, want)
	}
	if !strings.Contains(body, "requests_per_minute") {
		t.Errorf("the refusal does not name the cap: %s", body)
	}
}

// TestPolicyBudgetPerAgent: a policy's requests_per_minute counted per
// agent holds each agent of the tenant in its own bucket: bot's second
// call is refused, naming the policy, while crawler's first is served.
func TestPolicyBudgetPerAgent(t *testing.T) {
	up := newUpstream(t, usageUpstream(10, 5))
	g := startGateway(t, rateConfig(t, up.URL, "", "  policies:\n    - name: one-a-minute\n      match: {tenant: acme}\n      budget: {requests_per_minute: 1, per: agent}\n"))
	if resp, body := postKey(t, g, demoKey, chatBody); resp.StatusCode != 200 || rateOf(resp.Header) != (rateHeaders{"", "", "1", "0"}) {
		t.Fatalf("bot's first: %d %+v %s", resp.StatusCode, rateOf(resp.Header), body)
	}
	resp, body := postKey(t, g, demoKey, chatBody)
	wantRateLimited(t, "bot's second", resp, body)
	if !strings.Contains(body, "one-a-minute") {
		t.Errorf("the refusal does not name the policy: %s", body)
	}
	if resp, body := postKey(t, g, crawlerKey, chatBody); resp.StatusCode != 200 || rateOf(resp.Header) != (rateHeaders{"", "", "1", "0"}) {
		t.Fatalf("crawler's first: %d %+v %s; its bucket is its own", resp.StatusCode, rateOf(resp.Header), body)
	}
	if resp, body := postKey(t, g, crawlerKey, chatBody); resp.StatusCode != 429 {
		t.Fatalf("crawler's second: %d %s", resp.StatusCode, body)
	}
}

// TestDayCapStaysBudgetExceeded: a per-day cap reached while a per-minute
// cap has room is budget_exceeded, not rate_limited, and still carries
// the x-ratelimit-* headers of the per-minute cap in force.
func TestDayCapStaysBudgetExceeded(t *testing.T) {
	est := reservedFor(t, chatBody, 1024)
	perCall := est.Input + est.Output
	up := newUpstream(t, usageUpstream(est.Input, est.Output))
	g := startGateway(t, rateConfig(t, up.URL, fmt.Sprintf("{tokens_per_day: %d, requests_per_minute: 50}", perCall), ""))
	if resp, body := postKey(t, g, demoKey, chatBody); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, body)
	}
	resp, body := postKey(t, g, demoKey, chatBody)
	if resp.StatusCode != 429 || !strings.Contains(body, `"code":"budget_exceeded"`) || !strings.Contains(body, "tokens_per_day") {
		t.Fatalf("second: %d %s; want 429 budget_exceeded naming tokens_per_day", resp.StatusCode, body)
	}
	if got, want := rateOf(resp.Header), (rateHeaders{"", "", "50", "49"}); got != want {
		t.Errorf("headers %+v, want %+v", got, want)
	}
}

// TestRateLimitedBeforeTheBody: a caller already at its per-minute cap is
// refused before its body is read — the tenant's own cap, and a policy's
// matched on the operation (no body field) — with the 429, Retry-After and
// the headers, while the declared body never arrives.
func TestRateLimitedBeforeTheBody(t *testing.T) {
	up := newUpstream(t, usageUpstream(10, 5))
	for _, tc := range []struct{ name, budget, ai string }{
		{"tenant cap", "{requests_per_minute: 1}", ""},
		{"policy on the operation", "", "  policies:\n    - name: chat-rpm\n      match: {operation: ai.chatCompletions}\n      budget: {requests_per_minute: 1}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := startGateway(t, rateConfig(t, up.URL, tc.budget, tc.ai))
			if resp, body := postKey(t, g, demoKey, chatBody); resp.StatusCode != 200 {
				t.Fatalf("first call: %d %s", resp.StatusCode, body)
			}
			pr, pw := io.Pipe()
			defer pw.Close()
			req, _ := http.NewRequest("POST", g.HTTP+"/v1/chat/completions", pr)
			req.Header.Set("Authorization", "Bearer "+demoKey)
			req.ContentLength = 1 << 20 // promised, never sent
			done := make(chan *http.Response, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
				}
				done <- resp
			}()
			select {
			case resp := <-done:
				if resp == nil {
					return
				}
				defer resp.Body.Close()
				raw, _ := io.ReadAll(resp.Body)
				wantRateLimited(t, "pre-body", resp, string(raw))
				if got, want := rateOf(resp.Header), (rateHeaders{"", "", "1", "0"}); got != want {
					t.Errorf("headers %+v, want %+v", got, want)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("no answer while the body is pending: the body was waited for")
			}
		})
	}
}

// TestRateHeadersOnStreams: a streamed answer carries the x-ratelimit-*
// headers with its status, before its first event.
func TestRateHeadersOnStreams(t *testing.T) {
	up := newUpstream(t, sseUpstream(chunk(`[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]`, ""), chunk(`[]`, `{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}`)))
	g := startGateway(t, rateConfig(t, up.URL, "{tokens_per_minute: 100000, requests_per_minute: 10}", ""))
	resp := send(t, g, "POST", "/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"max_tokens":40,"messages":[{"role":"user","content":"Hi"}]}`), nil)
	raw, _ := io.ReadAll(resp.Body)
	got := rateOf(resp.Header)
	if resp.StatusCode != 200 || !strings.HasSuffix(string(raw), "data: [DONE]\n\n") || got.limitTokens != "100000" || got.remainingTokens == "" || got.limitRequests != "10" || got.remainingRequests != "9" {
		t.Fatalf("status %d, headers %+v:\n%s", resp.StatusCode, got, raw)
	}
	if rt, _ := strconv.ParseInt(got.remainingTokens, 10, 64); rt >= 100000 || rt <= 0 {
		t.Errorf("remaining tokens %d: the reservation is not counted", rt)
	}
}

// TestRateLimitedOverGRPC: a gRPC caller gets the same refusal:
// RESOURCE_EXHAUSTED with ErrorInfo reason rate_limited and
// retry_after_seconds, and the x-ratelimit-* header metadata on its served
// calls and on the refusal.
func TestRateLimitedOverGRPC(t *testing.T) {
	up := newUpstream(t, usageUpstream(10, 5))
	g := startGateway(t, rateConfig(t, up.URL, "{requests_per_minute: 2}", ""))
	client := flexwayv1.NewChatServiceClient(grpcConn(t, g))
	req := &flexwayv1.CreateChatCompletionRequest{Model: "m", MaxTokens: proto.Int64(5), Messages: []*flexwayv1.ChatMessage{userMessage("Hi")}}
	for i := 1; i <= 2; i++ {
		var header metadata.MD
		if _, err := client.CreateChatCompletion(withKey(t, demoKey), req, grpc.Header(&header)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := header.Get("x-ratelimit-remaining-requests"); len(got) != 1 || got[0] != strconv.Itoa(2-i) || header.Get("x-ratelimit-limit-requests")[0] != "2" {
			t.Errorf("call %d: header %v", i, header)
		}
	}
	var header metadata.MD
	_, err := client.CreateChatCompletion(withKey(t, demoKey), req, grpc.Header(&header))
	st := status.Convert(err)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if e, ok := d.(*errdetails.ErrorInfo); ok {
			info = e
		}
	}
	if st.Code() != codes.ResourceExhausted || info.GetReason() != "rate_limited" {
		t.Fatalf("third call: %v (%v), want RESOURCE_EXHAUSTED rate_limited", err, info)
	}
	if s, _ := strconv.Atoi(info.GetMetadata()["retry_after_seconds"]); s < 1 || s > 61 {
		t.Errorf("retry_after_seconds %q", info.GetMetadata()["retry_after_seconds"])
	}
	if got := header.Get("x-ratelimit-remaining-requests"); len(got) != 1 || got[0] != "0" {
		t.Errorf("refusal header %v", header)
	}
}

// TestPolicyBudgetOnModel: a policy matched on the model is held once the
// body is parsed (the call's resolved policies): the first call for model
// m is served, the second, JSON or streamed, is 429 rate_limited naming
// the policy, with the headers and no event of a stream; the upstream sees
// one call.
func TestPolicyBudgetOnModel(t *testing.T) {
	up := newUpstream(t, usageUpstream(10, 5))
	g := startGateway(t, rateConfig(t, up.URL, "", "  policies:\n    - name: m-rpm\n      match: {model: m}\n      budget: {requests_per_minute: 1}\n"))
	if resp, body := postKey(t, g, demoKey, chatBody); resp.StatusCode != 200 || rateOf(resp.Header) != (rateHeaders{"", "", "1", "0"}) {
		t.Fatalf("first: %d %+v %s", resp.StatusCode, rateOf(resp.Header), body)
	}
	for _, body := range []string{chatBody, `{"model":"m","stream":true,"max_tokens":40,"messages":[{"role":"user","content":"Hi"}]}`} {
		resp, raw := postKey(t, g, demoKey, body)
		wantRateLimited(t, body, resp, raw)
		if !strings.Contains(raw, "m-rpm") || strings.Contains(raw, "data:") {
			t.Errorf("refusal body: %s", raw)
		}
		if got, want := rateOf(resp.Header), (rateHeaders{"", "", "1", "0"}); got != want {
			t.Errorf("headers %+v, want %+v", got, want)
		}
	}
	if n := len(up.requests()); n != 1 {
		t.Fatalf("%d calls reached the upstream, want 1", n)
	}
}
