package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/metering"
	"github.com/flexway/flexway/server/openaiwire"
)

// testAdminKey is server.admin_key in budget test configs.
const testAdminKey = "adm-test-key"

// capState is one cap of the admin usage endpoint.
type capState struct {
	Limit, Committed, Reserved, Remaining int64
	Soft                                  bool
	Period, Unit                          string
}

// usageOf reads GET /flexway/v1/tenants/acme[/agents/bot]/usage, by cap.
func usageOf(t testing.TB, g *testGW, agent string) map[string]capState {
	t.Helper()
	path := "/flexway/v1/tenants/acme/usage"
	if agent != "" {
		path = "/flexway/v1/tenants/acme/agents/" + agent + "/usage"
	}
	resp := send(t, g, "GET", path, nil, map[string]string{"Authorization": "Bearer " + testAdminKey})
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", path, resp.StatusCode, raw)
	}
	var body struct {
		Caps []struct {
			Cap, Period, Unit                     string
			Limit, Committed, Reserved, Remaining string
			Soft                                  bool
		}
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, raw)
	}
	out := map[string]capState{}
	for _, c := range body.Caps {
		n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
		out[c.Cap] = capState{Limit: n(c.Limit), Committed: n(c.Committed), Reserved: n(c.Reserved), Remaining: n(c.Remaining), Soft: c.Soft, Period: c.Period, Unit: c.Unit}
	}
	return out
}

// chatBody is the request the budget tests send.
const chatBody = `{"model":"m","max_tokens":40,"messages":[{"role":"user","content":"Count to three, please."}]}`

// reservedFor is what the gateway reserves for body, in tokens, from the
// interceptor's own estimate.
func reservedFor(t testing.TB, body string, reserveOutput int64) metering.Estimate {
	t.Helper()
	req, err := openaiwire.ParseChatCompletionRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	est, ok := metering.New(metering.Config{ReserveOutputTokens: reserveOutput}).Estimate(req)
	if !ok {
		t.Fatal("no estimate for a chat request")
	}
	return est
}

// usageUpstream answers every chat call with the given usage.
func usageUpstream(prompt, completion int64) http.HandlerFunc {
	return jsonHandler(200, fmt.Sprintf(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"one two three"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, prompt, completion, prompt+completion))
}

// TestBudgetHoldsUnderConcurrency: 64 callers race for a cap that fits
// exactly N calls (the upstream reports exactly what was reserved):
// exactly N are served, every other gets 429 budget_exceeded with
// Retry-After, and the ledger holds exactly the cap.
func TestBudgetHoldsUnderConcurrency(t *testing.T) {
	est := reservedFor(t, chatBody, 1024)
	perCall := est.Input + est.Output
	const n = 10
	var served atomic.Int64
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		time.Sleep(20 * time.Millisecond) // keep reservations in flight together
		usageUpstream(est.Input, est.Output)(w, r)
	})
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, fmt.Sprintf("    default: {tokens_per_day: %d}", n*perCall)))

	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := post(t, g, "/v1/chat/completions", chatBody)
			body, _ := io.ReadAll(resp.Body)
			switch resp.StatusCode {
			case 200:
				ok.Add(1)
			case 429:
				refused.Add(1)
				if resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"code":"budget_exceeded"`) {
					t.Errorf("429 without Retry-After or code: %v %s", resp.Header, body)
				}
			default:
				t.Errorf("status %d: %s", resp.StatusCode, body)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != n || refused.Load() != 64-n || served.Load() != n {
		t.Fatalf("%d served (%d upstream), %d refused; want exactly %d served", ok.Load(), served.Load(), refused.Load(), n)
	}
	u := usageOf(t, g, "")["tokens_per_day"]
	if u.Committed != n*perCall || u.Reserved != 0 || u.Remaining != 0 {
		t.Fatalf("ledger %+v, want committed %d (the cap), nothing reserved", u, n*perCall)
	}
}

// TestFailingBackendsDrainNothing: 100 calls to an upstream answering 500,
// then 100 to one refusing connections: the budget is unchanged.
func TestFailingBackendsDrainNothing(t *testing.T) {
	failing := newUpstream(t, jsonHandler(500, `{"error":{"message":"boom"}}`))
	closed := newUpstream(t, jsonHandler(200, "{}"))
	closed.Close()
	for _, tc := range []struct{ name, url string }{{"500", failing.URL}, {"refused", closed.URL}} {
		t.Run(tc.name, func(t *testing.T) {
			// cheap is the same failing upstream: the fallback fails too.
			g := startGateway(t, budgetConfig(t, tc.url, tc.url, "    default: {tokens_per_day: 100000, eur_per_month: 5}"))
			for range 100 {
				resp := post(t, g, "/v1/chat/completions", chatBody)
				io.Copy(io.Discard, resp.Body)
				if resp.StatusCode < 500 {
					t.Fatalf("status %d from a failing upstream", resp.StatusCode)
				}
			}
			for name, c := range usageOf(t, g, "") {
				if c.Committed != 0 || c.Reserved != 0 {
					t.Errorf("%s after 100 failed calls: %+v", name, c)
				}
			}
		})
	}
}

// TestSoftAndHardCaps: past the soft mark the answer carries
// Flexway-Budget: soft and is served by the soft backend, at its price; at
// the cap the OpenAI SDK gets a 429 budget_exceeded with Retry-After.
func TestSoftAndHardCaps(t *testing.T) {
	est := reservedFor(t, chatBody, 1024)
	perCall := est.Input + est.Output
	var mainCalls, cheapCalls atomic.Int64
	main := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		mainCalls.Add(1)
		usageUpstream(est.Input, est.Output)(w, r)
	})
	cheap := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		cheapCalls.Add(1)
		usageUpstream(est.Input, est.Output)(w, r)
	})
	// Soft at half of 4 calls: calls 1-2 on main, 3-4 on cheap, then 429.
	g := startGateway(t, budgetConfig(t, main.URL, cheap.URL, fmt.Sprintf("    soft: 0.5\n    default: {tokens_per_day: %d, eur_per_month: 5}", 4*perCall)))
	for i := 1; i <= 4; i++ {
		resp := post(t, g, "/v1/chat/completions", chatBody)
		io.Copy(io.Discard, resp.Body)
		wantSoft := i > 2
		if resp.StatusCode != 200 || (resp.Header.Get("Flexway-Budget") == "soft") != wantSoft {
			t.Fatalf("call %d: status %d, Flexway-Budget %q; want 200, soft %v", i, resp.StatusCode, resp.Header.Get("Flexway-Budget"), wantSoft)
		}
	}
	if mainCalls.Load() != 2 || cheapCalls.Load() != 2 {
		t.Fatalf("main served %d, cheap %d; want 2 and 2", mainCalls.Load(), cheapCalls.Load())
	}

	// The streamed answer carries the header too.
	client := sdkClient(g, demoKey)
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "m",
		MaxTokens: openai.Int(40),
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Count to three, please.")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "budget_exceeded" {
		t.Fatalf("SDK error %v, want a 429 budget_exceeded", err)
	}
	retry, _ := strconv.Atoi(apiErr.Response.Header.Get("Retry-After"))
	now := time.Now().UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	if d := time.Duration(retry)*time.Second - midnight.Sub(now); d < -2*time.Second || d > 2*time.Second {
		t.Errorf("Retry-After %ds, want the seconds to UTC midnight (%s)", retry, midnight.Sub(now))
	}

	// Cost: two calls at main's price and two at cheap's, in nano-euros
	// (1 € and 2 €, 0.10 € and 0.20 € per million tokens).
	eur := usageOf(t, g, "")
	wantNano := 2*ceilDiv(est.Input*1_000_000_000+est.Output*2_000_000_000, 1_000_000) +
		2*ceilDiv(est.Input*100_000_000+est.Output*200_000_000, 1_000_000)
	if got := eur["tokens_per_day"]; got.Committed != 4*perCall || !got.Soft {
		t.Errorf("tokens_per_day %+v, want %d committed, soft", got, 4*perCall)
	}
	if got := eur["eur_per_month"]; got.Committed != wantNano || got.Unit != "nano_eur" {
		t.Errorf("eur_per_month %+v, want %d nano-euros committed: each call at its serving backend's price", got, wantNano)
	}
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// TestSoftHeaderOnStreams: the soft header comes with the SSE response.
func TestSoftHeaderOnStreams(t *testing.T) {
	up := newUpstream(t, sseUpstream(
		chunk(`[{"index":0,"delta":{"role":"assistant","content":"hi"}}]`, ""),
		chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""),
		chunk(`[]`, `{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}`),
	))
	// 0.1 of 60 tokens: past the mark once the first call committed its 6.
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, "    soft: 0.1\n    default: {tokens_per_day: 60}"))
	const body = `{"model":"m","stream":true,"max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
	first := post(t, g, "/v1/chat/completions", body)
	io.Copy(io.Discard, first.Body)
	if first.StatusCode != 200 || first.Header.Get("Flexway-Budget") != "" {
		t.Fatalf("first call: status %d, Flexway-Budget %q", first.StatusCode, first.Header.Get("Flexway-Budget"))
	}
	resp := post(t, g, "/v1/chat/completions", body)
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Flexway-Budget") != "soft" || !strings.HasSuffix(string(raw), "data: [DONE]\n\n") {
		t.Fatalf("status %d, Flexway-Budget %q:\n%s", resp.StatusCode, resp.Header.Get("Flexway-Budget"), raw)
	}
}

// TestStreamCommits: a complete stream commits its final usage chunk, at
// the serving backend's price; a client that disconnects after two chunks
// and a stream the upstream cuts are charged an estimate (the input
// estimate plus what was relayed), not the reservation.
func TestStreamCommits(t *testing.T) {
	const body = `{"model":"m","stream":true,"max_tokens":500,"messages":[{"role":"user","content":"Tell me a story."}]}`
	est := reservedFor(t, body, 1024)
	content := func(s string) string {
		return chunk(`[{"index":0,"delta":{"content":"`+s+`"}}]`, "")
	}
	cases := []struct {
		name       string
		upstream   http.HandlerFunc
		disconnect bool
		want       int64
	}{
		{
			name: "complete",
			upstream: sseUpstream(content("Once"), content(" upon"),
				chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""),
				chunk(`[]`, `{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}`)),
			want: 10,
		},
		{
			name: "client disconnects after two chunks",
			upstream: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for i := 0; ; i++ {
					if _, err := fmt.Fprintf(w, "data: %s\n\n", content("word ")); err != nil {
						return
					}
					w.(http.Flusher).Flush()
					select {
					case <-r.Context().Done():
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			},
			disconnect: true,
			want:       -1, // input charge + relayed bytes / 3, checked below
		},
		{
			name: "upstream cuts the stream",
			upstream: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "data: %s\n\ndata: %s\n\n", content("Once"), content(" upon"))
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler) // the connection drops, no [DONE]
			},
			want: est.InputCharge + metering.TokensForBytes(int64(len("Once upon"))),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, tc.upstream)
			g := startGateway(t, budgetConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 100000, eur_per_month: 5}"))
			resp := post(t, g, "/v1/chat/completions", body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			relayed := 0
			if tc.disconnect {
				br := bufio.NewReader(resp.Body)
				for relayed < 2 {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Fatal(err)
					}
					if strings.HasPrefix(line, "data: ") {
						relayed++
					}
				}
				resp.Body.Close()
			} else {
				io.Copy(io.Discard, resp.Body)
			}
			var u map[string]capState
			deadline := time.Now().Add(3 * time.Second)
			for {
				u = usageOf(t, g, "")
				if u["tokens_per_day"].Reserved == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			got := u["tokens_per_day"]
			if got.Reserved != 0 {
				t.Fatalf("still reserved after the call: %+v", got)
			}
			want := tc.want
			if tc.disconnect {
				// At least the two chunks read, maybe a few more in flight
				// when the client went away; never the reservation.
				lo := est.InputCharge + metering.TokensForBytes(int64(2*len("word ")))
				if got.Committed < lo || got.Committed >= est.Input+est.Output {
					t.Fatalf("committed %d after a disconnect, want an estimate in [%d, %d)", got.Committed, lo, est.Input+est.Output)
				}
				return
			}
			if got.Committed != want {
				t.Fatalf("committed %d tokens, want %d", got.Committed, want)
			}
			if tc.name == "complete" {
				// 7 input and 3 output tokens at 1 € and 2 € per million.
				if e := u["eur_per_month"].Committed; e != ceilDiv(7*1_000_000_000+3*2_000_000_000, 1_000_000) {
					t.Errorf("eur_per_month committed %d nano-euros, want %d", e, ceilDiv(7*1_000_000_000+3*2_000_000_000, 1_000_000))
				}
			}
		})
	}
}

// TestBudgetRefusedBeforeTheBody: a caller at its cap is refused before
// its body is read: a body that never arrives does not hold the answer.
func TestBudgetRefusedBeforeTheBody(t *testing.T) {
	est := reservedFor(t, chatBody, 1024)
	up := newUpstream(t, usageUpstream(est.Input, est.Output))
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, fmt.Sprintf("    default: {tokens_per_day: %d}", est.Input+est.Output)))
	if resp := post(t, g, "/v1/chat/completions", chatBody); resp.StatusCode != 200 {
		t.Fatalf("first call: %d", resp.StatusCode)
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", g.HTTP+"/v1/chat/completions", pr)
	req.Header.Set("Authorization", "Bearer "+demoKey)
	req.ContentLength = 1000 // promised, never sent
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			done <- nil
			return
		}
		done <- resp
	}()
	select {
	case resp := <-done:
		if resp == nil {
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("status %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no answer while the body is pending: the body was waited for")
	}
}

// TestBudgetOverGRPC: gRPC calls are metered like HTTP ones: a served call
// commits its usage, and one past the cap is RESOURCE_EXHAUSTED with
// ErrorInfo reason budget_exceeded and retry_after_seconds; the soft mark
// comes as header metadata.
func TestBudgetOverGRPC(t *testing.T) {
	up := newUpstream(t, usageUpstream(10, 5))
	// 15 tokens per call against 70: soft (0.2) after the first, refused
	// when the third's reservation (max_tokens 5 + its input bound, 6 bytes
	// + 8 + 32: 51) does not fit.
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, "    soft: 0.2\n    default: {tokens_per_day: 70}"))
	client := flexwayv1.NewChatServiceClient(grpcConn(t, g))
	req := &flexwayv1.CreateChatCompletionRequest{Model: "m", MaxTokens: proto.Int64(5), Messages: []*flexwayv1.ChatMessage{userMessage("Hi")}}
	var soft []string
	for i := 0; ; i++ {
		var header metadata.MD
		_, err := client.CreateChatCompletion(withKey(t, demoKey), req, grpc.Header(&header))
		if err != nil {
			st := status.Convert(err)
			var info *errdetails.ErrorInfo
			for _, d := range st.Details() {
				if e, ok := d.(*errdetails.ErrorInfo); ok {
					info = e
				}
			}
			if st.Code() != codes.ResourceExhausted || info.GetReason() != "budget_exceeded" || info.GetMetadata()["retry_after_seconds"] == "" {
				t.Fatalf("call %d: %v (%v), want RESOURCE_EXHAUSTED budget_exceeded with retry_after_seconds", i, err, info)
			}
			if i != 2 {
				t.Fatalf("refused at call %d, want the third (15 + 15 committed, 70 capped)", i+1)
			}
			break
		}
		soft = append(soft, strings.Join(header.Get("flexway-budget"), ","))
	}
	if soft[0] != "" || soft[1] != "soft" {
		t.Errorf("flexway-budget by call: %q, want none then soft", soft)
	}
	if u := usageOf(t, g, "")["tokens_per_day"]; u.Committed != 30 {
		t.Errorf("committed %d, want 30", u.Committed)
	}
}

// TestEmbeddingsMetered: an embeddings call commits its prompt_tokens (no
// output), at the serving backend's input price.
func TestEmbeddingsMetered(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"model":"m","usage":{"prompt_tokens":12,"total_tokens":12}}`))
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 1000, eur_per_month: 1}"))
	resp := post(t, g, "/v1/embeddings", `{"model":"m","input":["hello world","again"]}`)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	u := usageOf(t, g, "")
	if u["tokens_per_day"].Committed != 12 || u["eur_per_month"].Committed != ceilDiv(12*1_000_000_000, 1_000_000) {
		t.Errorf("committed %+v, want 12 tokens at 1 EUR per million input tokens", u)
	}
}

// TestRelayUndeclaredAgentChargedToTenant: a relay may pass an agent this
// gateway does not declare under a tenant it does: the call is served and
// charged to the tenant (its caps hold; the agent has none of its own),
// the audit keeps the agent's name as passed, and the metrics label it
// "other". An agent name over 64 bytes or not printable ASCII is refused
// (400 invalid_request); an undeclared tenant is refused with 403
// unknown_tenant (PERMISSION_DENIED on gRPC), not 401: the relay's key was
// valid. Nothing refused reaches the upstream or is charged.
func TestRelayUndeclaredAgentChargedToTenant(t *testing.T) {
	up := newUpstream(t, usageUpstream(10, 5))
	sum := sha256.Sum256([]byte("sk-relay-edge"))
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	c := budgetTestConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 1000}")
	c.AuditPath = auditPath
	c.Relays = []testRelay{{Name: "edge", KeySHA256: fmt.Sprintf("%x", sum), IdentityHeaders: "{tenant: Flexway-Tenant, agent: Flexway-Agent}"}}
	cfg := c.yaml()
	g := startGateway(t, cfg)
	long := strings.Repeat("a", 65)
	for _, tc := range []struct {
		tenant, agent string
		status        int
		code          string
	}{
		{"acme", "bot", 200, ""},
		{"acme", "", 200, ""},
		{"acme", "ghost-agent", 200, ""},
		{"acme", strings.Repeat("a", 64), 200, ""},
		{"ghost", "", 403, "unknown_tenant"},
		{"ghost", "bot", 403, "unknown_tenant"},
		{"acme", long, 400, "invalid_request"},
		{"acme", "agént", 400, "invalid_request"},
		{"acme", "two words", 400, "invalid_request"},
	} {
		resp := send(t, g, "POST", "/v1/chat/completions", strings.NewReader(chatBody), map[string]string{
			"Authorization": "Bearer sk-relay-edge", "Flexway-Tenant": tc.tenant, "Flexway-Agent": tc.agent,
		})
		raw, _ := io.ReadAll(resp.Body)
		var e struct{ Error struct{ Code string } }
		_ = json.Unmarshal(raw, &e)
		if resp.StatusCode != tc.status || e.Error.Code != tc.code {
			t.Errorf("relay for %s/%.20s: %d %s, want %d %s", tc.tenant, tc.agent, resp.StatusCode, raw, tc.status, tc.code)
		}
	}
	// gRPC: the same refusal of an undeclared tenant.
	ctx := metadata.AppendToOutgoingContext(withKey(t, "sk-relay-edge"), "flexway-tenant", "ghost")
	_, err := flexwayv1.NewChatServiceClient(grpcConn(t, g)).CreateChatCompletion(ctx, &flexwayv1.CreateChatCompletionRequest{
		Model: "m", Messages: []*flexwayv1.ChatMessage{userMessage("hi")},
	})
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || !strings.Contains(fmt.Sprint(st.Details()), `reason:"unknown_tenant"`) {
		t.Errorf("gRPC relay for an undeclared tenant: %v, want PERMISSION_DENIED unknown_tenant", err)
	}

	if n := len(up.requests()); n != 4 {
		t.Errorf("%d calls reached the upstream, want the 4 served", n)
	}
	// The tenant paid for all four, 15 tokens each.
	if got := usageOf(t, g, "")["tokens_per_day"]; got.Committed != 60 || got.Reserved != 0 {
		t.Errorf("acme tokens_per_day %+v, want 60 committed", got)
	}

	resp := send(t, g, "GET", "/metrics", nil, map[string]string{"Authorization": ""})
	metrics, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`flexway_inference_calls_total{agent="bot",backend="main",capability="chat",feature="",metered_by="local",model="m",operation="ai.chatCompletions",outcome="ok",tenant="acme"} 1`,
		`flexway_inference_calls_total{agent="other",backend="main",capability="chat",feature="",metered_by="local",model="m",operation="ai.chatCompletions",outcome="ok",tenant="acme"} 2`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(metrics), "ghost") {
		t.Error("an undeclared name reached /metrics")
	}

	g.stop()
	if err := g.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	agents := map[string]int{}
	for _, l := range auditLines(t, auditPath) {
		if l["outcome"] == "ok" {
			agents[fmt.Sprint(l["agent"])]++
		}
	}
	if want := map[string]int{"bot": 1, "": 1, "ghost-agent": 1, strings.Repeat("a", 64): 1}; fmt.Sprint(agents) != fmt.Sprint(want) {
		t.Errorf("audit agents of the served calls %v, want %v", agents, want)
	}
}
