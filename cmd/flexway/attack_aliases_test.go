package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Attack tests for issue 15 (aliases and credential pools): each one
// asserts what the issue promises on a real gateway.

// aliasCall posts a chat call for model with the extra headers and
// returns the status and Flexway-Route after draining the body.
func aliasCall(t *testing.T, g *testGW, model string, headers map[string]string) (int, string) {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + demoKey, "Content-Type": "application/json"}
	for k, v := range headers {
		h[k] = v
	}
	resp := send(t, g, "POST", "/v1/chat/completions", strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`), h)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Flexway-Route")
}

// TestAttackAliasStickyHeaderOverHTTP: an A/B alias sticky on
// header:X-Exp hashes the header's value into the arms; over HTTP the
// header must reach the resolver, so 16 distinct values over a 50/50
// split land on both arms (all on one arm means the header was lost and
// every call fell back to the tenant subject).
func TestAttackAliasStickyHeaderOverHTTP(t *testing.T) {
	g, _, _, _ := aliasGateway(t, "    rev:\n      strategy: ab\n      sticky: header:X-Exp\n      targets:\n        - {backend: main, model: a-1, weight: 50, arm: control}\n        - {backend: spare, model: b-1, weight: 50, arm: candidate}\n")
	arms := map[string]int{}
	for i := range 16 {
		st, route := aliasCall(t, g, "rev", map[string]string{"X-Exp": fmt.Sprintf("subject-%d", i)})
		if st != 200 {
			t.Fatalf("status %d", st)
		}
		arms[route]++
	}
	if len(arms) != 2 {
		t.Fatalf("16 distinct X-Exp subjects all landed on %v: the sticky header does not reach the resolver over HTTP", arms)
	}
}

// TestAttackAlias4xxNoFallback: a failover alias whose first target
// answers 400 must not fall back to the second (never on a 4xx).
func TestAttackAlias4xxNoFallback(t *testing.T) {
	bad := newUpstream(t, jsonHandler(400, `{"error":{"message":"bad model","type":"invalid_request_error"}}`))
	spare := modelEcho(t)
	c := baseTestConfig(bad.URL)
	c.Backends = append(c.Backends, baseBackend("spare", spare.URL))
	c.AI = "  aliases:\n    fast:\n      strategy: failover\n      targets:\n        - {backend: main, model: x-1}\n        - {backend: spare, model: y-1}\n"
	g := startGateway(t, c.yaml())
	st, route := aliasCall(t, g, "fast", nil)
	if st != 400 || len(spare.requests()) != 0 {
		t.Fatalf("status %d route %q, spare got %d calls: a 4xx must not fall back", st, route, len(spare.requests()))
	}
}

// sensitiveAliasGateway: main is external, inner internal and the
// sensitive backend; aliases are the yaml lines under ai.aliases.
func sensitiveAliasGateway(t *testing.T, aliases string) (*testGW, *fakeUpstream, *fakeUpstream) {
	ext, in := modelEcho(t), modelEcho(t)
	c := testConfig{
		Keys:             []testKey{acmeBot},
		Backend:          "main",
		SensitiveBackend: "inner",
		Backends: []testBackend{
			{Name: "main", URL: ext.URL + "/v1", Models: []string{"m-large"}, DefaultModel: "m-large"},
			{Name: "inner", URL: in.URL + "/v1", Internal: true, Models: []string{"m-local"}, DefaultModel: "m-local"},
		},
		AI: "  aliases:\n" + aliases,
	}
	return startGateway(t, c.yaml()), ext, in
}

// TestAttackAliasSensitiveNeverExternal: a sensitive call through a
// canary, an A/B and a failover alias whose targets include the external
// backend never reaches it.
func TestAttackAliasSensitiveNeverExternal(t *testing.T) {
	g, ext, in := sensitiveAliasGateway(t,
		"    can:\n      strategy: canary\n      targets:\n        - {backend: main, model: e-1, weight: 50}\n        - {backend: inner, model: i-1, weight: 50}\n"+
			"    ab:\n      strategy: ab\n      sticky: user\n      targets:\n        - {backend: main, model: e-1, weight: 50}\n        - {backend: inner, model: i-1, weight: 50}\n"+
			"    fo:\n      strategy: failover\n      targets:\n        - {backend: inner, model: fail}\n        - {backend: main, model: e-1}\n")
	for _, model := range []string{"can", "ab", "fo"} {
		for range 8 {
			aliasCall(t, g, model, map[string]string{"Flexway-Sensitive": "1"})
		}
	}
	if n := len(ext.requests()); n != 0 {
		t.Fatalf("the external backend got %d sensitive calls (internal got %d)", n, len(in.requests()))
	}
}

// TestAttackAliasStreamRouteAfterFailover: a streamed call through a
// failover alias whose first target 503s is served by the second, and
// Flexway-Route names it.
func TestAttackAliasStreamRouteAfterFailover(t *testing.T) {
	stream := func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Model string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		if body.Model == "fail" {
			jsonHandler(503, `{"error":{"message":"down"}}`)(w, r)
			return
		}
		sseUpstream(chunk(`[{"index":0,"delta":{"role":"assistant","content":"hey"}}]`, ""),
			chunk(`[]`, `{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}`))(w, r)
	}
	main, spare := newUpstream(t, stream), newUpstream(t, stream)
	c := baseTestConfig(main.URL)
	c.Backends = append(c.Backends, baseBackend("spare", spare.URL))
	c.AI = "  aliases:\n    fast:\n      strategy: failover\n      targets:\n        - {backend: main, model: fail}\n        - {backend: spare, model: tiny-1}\n"
	g := startGateway(t, c.yaml())
	resp := post(t, g, "/v1/chat/completions", `{"model":"fast","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Flexway-Route") != "fast/1" || !strings.Contains(string(raw), "hey") {
		t.Fatalf("%d route %q: %s", resp.StatusCode, resp.Header.Get("Flexway-Route"), raw)
	}
	if modelSent(spare) != "tiny-1" {
		t.Errorf("spare was sent %v", modelSent(spare))
	}
}

// TestAttackClassifierRedirectNotFollowed: a scorer that redirects to
// another host is an error (above); the other host never gets the text.
func TestAttackClassifierRedirectNotFollowed(t *testing.T) {
	thief := newUpstream(t, jsonHandler(200, `{"score":0.0}`))
	scorer := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, thief.URL+"/score", http.StatusTemporaryRedirect)
	})
	g, _, _, _ := aliasGateway(t, "    triage:\n      strategy: classifier\n      classifier: {url: "+scorer.URL+"/score, external: false, timeout: 300ms, threshold: 0.5}\n"+
		"      below: {backend: spare, model: small-1}\n      above: {backend: main, model: large-1}\n")
	_, route := aliasCall(t, g, "triage", nil)
	if route != "triage/above" || len(thief.requests()) != 0 {
		t.Fatalf("route %q, redirect target got %d calls", route, len(thief.requests()))
	}
}

// TestAttackClassifierGarbageScores: string, out-of-range and slow-drip
// answers all take the above route within the timeout.
func TestAttackClassifierGarbageScores(t *testing.T) {
	answer := make(chan string, 1)
	scorer := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		a := <-answer
		if a == "drip" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"score":`)
			w.(http.Flusher).Flush()
			time.Sleep(900 * time.Millisecond)
			io.WriteString(w, `0.1}`)
			return
		}
		jsonHandler(200, a)(w, r)
	})
	g, _, _, _ := aliasGateway(t, "    triage:\n      strategy: classifier\n      classifier: {url: "+scorer.URL+"/score, external: false, timeout: 300ms, threshold: 0.5}\n"+
		"      below: {backend: spare, model: small-1}\n      above: {backend: main, model: large-1}\n")
	for _, a := range []string{`{"score":"0.1"}`, `{"score":2}`, `{"score":-0.1}`, `{"score":1e999}`, `{"score":null}`, `[0.1]`, "drip"} {
		answer <- a
		start := time.Now()
		st, route := aliasCall(t, g, "triage", nil)
		if st != 200 || route != "triage/above" || time.Since(start) > 800*time.Millisecond {
			t.Errorf("answer %s: status %d route %q took %v", a, st, route, time.Since(start))
		}
	}
}

// bigPoolGateway is poolGateway with a budget 200 parallel calls cannot
// exhaust and an upstream that streams when asked.
func bigPoolGateway(t *testing.T) (*testGW, *poolUpstream, *countingUpstream) {
	t.Helper()
	t.Setenv("FLEXWAY_TEST_POOL_A", "pool-secret-a")
	t.Setenv("FLEXWAY_TEST_POOL_B", "pool-secret-b")
	pu := &poolUpstream{status: map[string]int{}, retry: map[string]string{}}
	main := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Stream bool }
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		pu.mu.Lock()
		status := pu.status[key]
		pu.mu.Unlock()
		if body.Stream && status == 0 {
			pu.mu.Lock()
			pu.seen = append(pu.seen, key)
			pu.mu.Unlock()
			sseUpstream(chunk(`[{"index":0,"delta":{"role":"assistant","content":"streamed"}}]`, ""),
				chunk(`[]`, `{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}`))(w, r)
			return
		}
		r.Body = io.NopCloser(strings.NewReader(string(raw)))
		pu.handle(w, r)
	})
	cheap := newCounting(t, usageUpstream(10, 5))
	c := budgetTestConfig(t, main.URL, cheap.URL, "    default: {tokens_per_day: 1000000000}")
	c.Backends[0].Extra = poolWith("{name: a, auth: {type: bearer, secret: env:FLEXWAY_TEST_POOL_A}}")
	return startGateway(t, c.yaml()), pu, cheap
}

// poolWith is main's credentials: key a as given (a YAML flow map), then
// key b from FLEXWAY_TEST_POOL_B.
func poolWith(a string) string {
	return "      credentials:\n        keys:\n          - " + a + "\n          - {name: b, auth: {type: bearer, secret: env:FLEXWAY_TEST_POOL_B}}"
}

// refusal posts one chat call and returns its status, Retry-After and body.
func refusal(t *testing.T, g *testGW, stream bool) (int, string, string) {
	t.Helper()
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	if stream {
		body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	}
	resp := post(t, g, "/v1/chat/completions", body)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(raw)
}

// TestAttackPoolRetryAfterForms: key a rests until an HTTP date two
// minutes away, key b answers a garbage Retry-After (60 s by default):
// the refusal is Flexway's 429 with the earliest return, 60 s; a huge
// Retry-After is capped, not wrapped into "no rest".
func TestAttackPoolRetryAfterForms(t *testing.T) {
	g, pu, cheap, log := poolGateway(t)
	pu.set("pool-secret-a", 429, time.Now().Add(120*time.Second).UTC().Format(http.TimeFormat))
	pu.set("pool-secret-b", 429, "soon-ish")
	st, ra, body := refusal(t, g, false)
	if st != 429 || (ra != "60" && ra != "59") || strings.Contains(body, "upstream says no") || strings.Contains(body, "pool-secret") {
		t.Fatalf("status %d Retry-After %q: %s", st, ra, body)
	}
	states := poolStates(t, g)
	if !strings.HasPrefix(states, "a=resting until") || !strings.Contains(states, "b=resting until") {
		t.Fatalf("states %q", states)
	}
	if cheap.calls.Load() != 0 || strings.Contains(log.String(), "pool-secret") {
		t.Fatalf("cheap %d calls; log holds a key", cheap.calls.Load())
	}

	g2, pu2, _, _ := poolGateway(t)
	pu2.set("pool-secret-a", 429, "99999999999999999999")
	if st, _, body := refusal(t, g2, false); st != 200 {
		t.Fatalf("status %d: %s", st, body)
	}
	pu2.set("pool-secret-b", 429, "1e308")
	st, ra, body = refusal(t, g2, false)
	if st != 429 || ra == "" || strings.HasPrefix(ra, "-") || ra == "0" {
		t.Fatalf("huge Retry-After: status %d Retry-After %q: %s", st, ra, body)
	}
	if s := poolStates(t, g2); !strings.Contains(s, "a=resting until") || !strings.Contains(s, "b=resting until") {
		t.Fatalf("states %q", s)
	}
}

// TestAttackPoolStreamFirstKey429: a streamed call whose first key 429s
// is served by the next key, not failed and not fallen back.
func TestAttackPoolStreamFirstKey429(t *testing.T) {
	g, pu, cheap := bigPoolGateway(t)
	pu.set("pool-secret-a", 429, "30")
	st, _, body := refusal(t, g, true)
	if st != 200 || !strings.Contains(body, "streamed") || cheap.calls.Load() != 0 {
		t.Fatalf("status %d, cheap %d: %s", st, cheap.calls.Load(), body)
	}
	if pu.keys() != "pool-secret-a,pool-secret-b" {
		t.Fatalf("keys %s", pu.keys())
	}
	// Every key set aside: 502 upstream_credentials_exhausted on a stream too.
	pu.set("pool-secret-b", 401, "")
	st, _, body = refusal(t, g, true)
	if st != 429 && st != 502 || strings.Contains(body, "pool-secret") || strings.Contains(body, "upstream says no") {
		t.Fatalf("status %d: %s", st, body)
	}
}

// TestAttackPoolConcurrentEvenness: 200 parallel calls over two healthy
// keys split 100/100 (±1); then with key a 429ing, 200 parallel calls are
// all served (by b) and none falls back.
func TestAttackPoolConcurrentEvenness(t *testing.T) {
	g, pu, cheap := bigPoolGateway(t)
	run := func() map[int]int {
		out := map[int]int{}
		res := make(chan int, 200)
		for range 200 {
			go func() {
				resp := post(t, g, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				res <- resp.StatusCode
			}()
		}
		for range 200 {
			out[<-res]++
		}
		return out
	}
	if got := run(); got[200] != 200 {
		t.Fatalf("statuses %v", got)
	}
	a, b := strings.Count(pu.keys(), "pool-secret-a"), strings.Count(pu.keys(), "pool-secret-b")
	if a < 99 || a > 101 || b < 99 || b > 101 {
		t.Fatalf("round robin split %d/%d", a, b)
	}
	pu.set("pool-secret-a", 429, "30")
	if got := run(); got[200] != 200 || cheap.calls.Load() != 0 {
		t.Fatalf("with a 429ing: statuses %v, cheap %d", got, cheap.calls.Load())
	}
}

// TestAttackClassifierExternalSensitive: an external scorer never gets a
// sensitive call's text (the call goes above without a scorer call).
func TestAttackClassifierExternalSensitive(t *testing.T) {
	scorer := newUpstream(t, jsonHandler(200, `{"score":0.1}`))
	g, _, _, _ := aliasGateway(t, "    triage:\n      strategy: classifier\n      classifier: {url: "+scorer.URL+"/score, external: true, timeout: 300ms, threshold: 0.5}\n"+
		"      below: {backend: spare, model: small-1}\n      above: {backend: main, model: large-1}\n")
	aliasCall(t, g, "triage", map[string]string{"Flexway-Sensitive": "1"})
	if n := len(scorer.requests()); n != 0 {
		t.Fatalf("the external scorer got %d sensitive calls", n)
	}
}

// TestAttackAliasStickyUser: an A/B alias sticky on the OpenAI user field
// spreads 16 users over both arms, and one user keeps its arm.
func TestAttackAliasStickyUser(t *testing.T) {
	g, _, _, _ := aliasGateway(t, "    rev:\n      strategy: ab\n      sticky: user\n      targets:\n        - {backend: main, model: a-1, weight: 50, arm: control}\n        - {backend: spare, model: b-1, weight: 50, arm: candidate}\n")
	arms := map[string]string{}
	seen := map[string]int{}
	for round := range 2 {
		for i := range 16 {
			user := fmt.Sprintf("u-%d", i)
			resp := post(t, g, "/v1/chat/completions", `{"model":"rev","user":"`+user+`","messages":[{"role":"user","content":"hi"}]}`)
			io.Copy(io.Discard, resp.Body)
			r := resp.Header.Get("Flexway-Route")
			if round == 1 && arms[user] != r {
				t.Fatalf("user %s moved from %q to %q", user, arms[user], r)
			}
			arms[user] = r
			seen[r]++
		}
	}
	if len(seen) != 2 {
		t.Fatalf("16 users all on %v", seen)
	}
}

// TestAttackAliasEmbeddingsChatOnlyTarget: an alias whose target lacks
// embeddings, asked for embeddings, is a client-facing error or a load
// error, never a 5xx from the gateway itself nor a call to the target.
func TestAttackAliasEmbeddingsChatOnlyTarget(t *testing.T) {
	main, spare := modelEcho(t), modelEcho(t)
	c := baseTestConfig(main.URL)
	sb := baseBackend("spare", spare.URL)
	sb.Capabilities = []string{"chat"}
	c.Backends = append(c.Backends, sb)
	c.AI = "  aliases:\n    fast:\n      targets:\n        - {backend: spare, model: chat-1}\n"
	g := startGateway(t, c.yaml())
	resp := post(t, g, "/v1/embeddings", `{"model":"fast","input":"hi"}`)
	raw, _ := io.ReadAll(resp.Body)
	t.Logf("status %d main %d: %s", resp.StatusCode, len(main.requests()), raw)
	if resp.StatusCode >= 500 || len(spare.requests()) != 0 {
		t.Fatalf("status %d, spare %d calls: %s", resp.StatusCode, len(spare.requests()), raw)
	}
}
