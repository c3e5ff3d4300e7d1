package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// honestUpstream answers every chat call with max_tokens of output and a
// prompt counted as the most tokens an honest tokenizer and chat template
// make of it: one per byte of each message's role and content, 8 per
// message, 32 per call.
func honestUpstream(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			MaxTokens int64 `json:"max_tokens"`
			Messages  []struct{ Role, Content string }
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Error(err)
		}
		prompt := int64(32)
		for _, m := range req.Messages {
			prompt += int64(len(m.Role)+len(m.Content)) + 8
		}
		usageUpstream(prompt, req.MaxTokens)(w, r)
	}
}

// TestCapHoldsWithAnHonestTokenizer: with max_tokens honoured and an
// upstream counting the prompt as high as any honest tokenizer can,
// concurrent callers are served until the next call would not fit, and the
// committed usage never passes the cap (with the bytes/3 estimate it did:
// the calls' reservations were a third of their usage). Its soak version
// (FLEXWAY_SOAK=1) runs 32 callers against a cap of a thousand calls.
func TestCapHoldsWithAnHonestTokenizer(t *testing.T) {
	up := newUpstream(t, honestUpstream(t))
	// Each call uses 4 + 490 + 8 + 32 + 50 = 584 tokens.
	const perCall = 584
	calls, workers := int64(8), 4
	if soak() {
		calls, workers = 1000, 32
	}
	capTokens := calls*perCall + perCall - 1
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, fmt.Sprintf("    default: {tokens_per_day: %d}", capTokens)))
	body := fmt.Sprintf(`{"model":"m","max_tokens":50,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("tokens ", 70))
	var served, other atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				resp := post(t, g, "/v1/chat/completions", body)
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					served.Add(1)
					continue
				case 429:
				default:
					other.Add(1)
				}
				return
			}
		})
	}
	wg.Wait()
	u := usageOf(t, g, "")["tokens_per_day"]
	t.Logf("%d callers: %d calls served, committed %d of a %d-token cap", workers, served.Load(), u.Committed, capTokens)
	if u.Committed > capTokens || served.Load() != calls || other.Load() != 0 {
		t.Fatalf("served %d calls (%d other answers), committed %d against a cap of %d; want %d calls, never over the cap",
			served.Load(), other.Load(), u.Committed, capTokens, calls)
	}
}

// TestOutputLengthAliasReserved: llama.cpp's n_predict (read before
// max_tokens) counts toward the reservation, case-insensitively, and is
// passed on unchanged; a negative one is refused naming it.
func TestOutputLengthAliasReserved(t *testing.T) {
	up := newUpstream(t, usageUpstream(10, 20))
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 2000}"))
	resp := post(t, g, "/v1/chat/completions", `{"model":"m","max_tokens":20,"N_Predict":5000,"messages":[{"role":"user","content":"Hi"}]}`)
	if body := readJSON(t, resp); resp.StatusCode != 429 {
		t.Fatalf("n_predict 5000 against a 2,000 cap: %d %v, want 429 (the reservation counts it)", resp.StatusCode, body)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("upstream got %d calls", n)
	}
	resp = post(t, g, "/v1/chat/completions", `{"model":"m","max_tokens":20,"n_predict":300,"messages":[{"role":"user","content":"Hi"}]}`)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("n_predict 300: %d", resp.StatusCode)
	}
	if got := up.requests()[0].Body["n_predict"]; got != float64(300) {
		t.Fatalf("upstream got n_predict %v, want 300 unchanged", got)
	}
	// Over gRPC the field is carried raw in extra_fields: the same rule.
	client := flexwayv1.NewChatServiceClient(grpcConn(t, g))
	_, err := client.CreateChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
		Model: "m", MaxTokens: proto.Int64(20), Messages: []*flexwayv1.ChatMessage{userMessage("Hi")},
		ExtraFields: map[string]string{"options": `{"num_predict":5000}`},
	})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("gRPC options.num_predict 5000 against a 2,000 cap: %v, want RESOURCE_EXHAUSTED", err)
	}
	resp = post(t, g, "/v1/chat/completions", `{"model":"m","n_predict":-1,"messages":[{"role":"user","content":"Hi"}]}`)
	body := readJSON(t, resp)
	e, _ := body["error"].(map[string]any)
	if resp.StatusCode != 400 || e["param"] != "n_predict" || e["code"] != "invalid_request" {
		t.Fatalf("n_predict -1: %d %v, want 400 invalid_request naming n_predict", resp.StatusCode, body)
	}
}

// TestStreamCutAtMaxTokens: an upstream that ignores max_tokens and
// streams on is cut once the relayed output passes it: the client gets
// max_tokens content chunks, a finish_reason "length" chunk and [DONE];
// the upstream connection is closed; the relayed output is charged, as
// an estimate.
func TestStreamCutAtMaxTokens(t *testing.T) {
	closed := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := 0; i < 200; i++ {
			fmt.Fprintf(w, "data: %s\n\n", chunk(`[{"index":0,"delta":{"content":"word "}}]`, ""))
			f.Flush()
			if i == 20 {
				select {
				case <-r.Context().Done():
					close(closed)
					return
				case <-time.After(3 * time.Second):
				}
			}
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	dir := t.TempDir()
	auditPath := filepath.Join(dir, "audit.jsonl")
	g := startGateway(t, auditConfig(t, up.URL, auditPath))
	start := time.Now()
	resp := post(t, g, "/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"Go on forever"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var contents, lengths int
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Choices []struct {
				Delta        struct{ Content string }
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				contents++
			}
			if ch.FinishReason != nil && *ch.FinishReason == "length" {
				lengths++
			}
		}
	}
	resp.Body.Close()
	if contents != 10 || lengths != 1 || !done {
		t.Fatalf("client got %d content chunks, %d length finishes, [DONE] %v; want 10, 1, true", contents, lengths, done)
	}
	// The upstream stalls after its 21st event for 3 s unless its
	// connection is closed.
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatalf("the upstream connection was not closed at the cut (%s after the call)", time.Since(start))
	}
	u := usageOf(t, g, "")["tokens_per_day"]
	// "user" + "Go on forever" = 17 bytes → 6 + 4 + 3 = 13 input; 10
	// events of 5 bytes → max(50/3 → 17, 10) output.
	if u.Committed != 13+17 || u.Reserved != 0 {
		t.Fatalf("committed %d, reserved %d; want 30 (the relayed output, estimated), 0", u.Committed, u.Reserved)
	}
}

// TestUsageOverReservationAudited: a JSON answer whose reported usage is
// more than the call reserved (the upstream ignored max_tokens) is
// audited with usage_over_reservation true; a call within its reservation
// has no such field.
func TestUsageOverReservationAudited(t *testing.T) {
	var completion atomic.Int64
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		usageUpstream(10, completion.Load())(w, r)
	})
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	g := startGateway(t, auditConfig(t, up.URL, auditPath))
	for _, c := range []int64{40, 2000} {
		completion.Store(c)
		resp := post(t, g, "/v1/chat/completions", `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"Hi"}]}`)
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	var lines []map[string]any
	deadline := time.Now().Add(5 * time.Second)
	for len(lines) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		lines = auditLines(t, auditPath)
	}
	if len(lines) != 2 {
		t.Fatalf("%d audit lines, want 2", len(lines))
	}
	if _, ok := lines[0]["usage_over_reservation"]; ok {
		t.Errorf("a call within its reservation: %v", lines[0])
	}
	if lines[1]["usage_over_reservation"] != true || lines[1]["output_tokens"] != float64(2000) {
		t.Errorf("a call over its reservation: %v, want usage_over_reservation true", lines[1])
	}
}

// TestMaxOutputTokensSentAndReserved: with ai.budget.max_output_tokens, a
// call that sets no output limit is sent max_tokens and reserved that
// (here it fits a cap the 1,024-token default would not); a call with its
// own max_tokens keeps it.
func TestMaxOutputTokensSentAndReserved(t *testing.T) {
	up := newUpstream(t, usageUpstream(10, 20))
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, "    max_output_tokens: 64\n    default: {tokens_per_day: 500}"))
	for _, tc := range []struct {
		body string
		want float64
	}{
		{`{"model":"m","messages":[{"role":"user","content":"Hi"}]}`, 64},
		{`{"model":"m","max_tokens":7,"messages":[{"role":"user","content":"Hi"}]}`, 7},
	} {
		resp := post(t, g, "/v1/chat/completions", tc.body)
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", tc.body, resp.StatusCode)
		}
		reqs := up.requests()
		if got := reqs[len(reqs)-1].Body["max_tokens"]; got != tc.want {
			t.Fatalf("%s: upstream got max_tokens %v, want %v", tc.body, got, tc.want)
		}
	}
}

// streamEvents posts a streamed chat body and returns its events' data,
// [DONE] included.
func streamEvents(t *testing.T, g *testGW, body string) []string {
	t.Helper()
	resp := post(t, g, "/v1/chat/completions", body)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	raw, _ := io.ReadAll(resp.Body)
	return sseEvents(raw)
}

// TestHonestStreamsAreNotCut: streams that honour max_tokens are relayed
// whole, whatever their shape: one token per event up to the limit, or
// the whole answer in one event (a server that fakes streaming), or n
// choices each within the limit.
func TestHonestStreamsAreNotCut(t *testing.T) {
	word := func(i int) string { return chunk(fmt.Sprintf(`[{"index":%d,"delta":{"content":"word "}}]`, i), "") }
	stop := chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, "")
	var tenWords []string
	for range 10 {
		tenWords = append(tenWords, word(0))
	}
	var twoChoices []string
	for range 10 {
		twoChoices = append(twoChoices, word(0), word(1))
	}
	for _, tc := range []struct {
		name   string
		events []string
		n      int
	}{
		{"one token per event, up to the limit", append(tenWords, stop), 1},
		{"the whole answer in one event", []string{chunk(`[{"index":0,"delta":{"content":"`+strings.Repeat("longword ", 60)+`"}}]`, ""), stop}, 1},
		{"two choices, ten each", append(twoChoices, stop), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, sseUpstream(tc.events...))
			g := startGateway(t, budgetConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 100000}"))
			got := streamEvents(t, g, fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":10,"n":%d,"messages":[{"role":"user","content":"Hi"}]}`, tc.n))
			if len(got) != len(tc.events)+1 || got[len(got)-1] != "[DONE]" || strings.Contains(strings.Join(got, ""), `"length"`) {
				t.Fatalf("client got %d events (%v), want the %d sent and [DONE], none cut", len(got), got, len(tc.events))
			}
		})
	}
}

// TestStreamCutPerChoice: with n choices the limit holds per choice: the
// stream is cut when one choice passes it, and every choice not finished
// gets finish_reason "length".
func TestStreamCutPerChoice(t *testing.T) {
	var events []string
	events = append(events, chunk(`[{"index":1,"delta":{"content":"short"},"finish_reason":"stop"}]`, ""))
	for range 20 {
		events = append(events, chunk(`[{"index":0,"delta":{"content":"word "}}]`, ""), chunk(`[{"index":2,"delta":{"content":"w"}}]`, ""))
	}
	up := newUpstream(t, sseUpstream(events...))
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 100000}"))
	got := streamEvents(t, g, `{"model":"m","stream":true,"max_tokens":5,"n":3,"messages":[{"role":"user","content":"Hi"}]}`)
	// 1 (choice 1) + 5 × 2 (choices 0 and 2) relayed, then the 6th of
	// choice 0 passes the limit: the length chunk, then [DONE].
	if len(got) != 1+10+2 || got[len(got)-1] != "[DONE]" {
		t.Fatalf("client got %d events: %v", len(got), got)
	}
	var end struct {
		Choices []struct {
			Index        int
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal([]byte(got[len(got)-2]), &end); err != nil {
		t.Fatal(err)
	}
	if len(end.Choices) != 2 || end.Choices[0].Index != 0 || end.Choices[1].Index != 2 ||
		end.Choices[0].FinishReason != "length" || end.Choices[1].FinishReason != "length" {
		t.Fatalf("last chunk %s, want finish_reason length for choices 0 and 2", got[len(got)-2])
	}
}
