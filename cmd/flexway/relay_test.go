package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// edgeConfig is gateway A: four callers (acme/bot, acme, globex, tiny),
// the default backend "hq" a kind: relay to hqURL, metered upstream,
// passing identity under X-Peer-Tenant, X-Peer-Agent and
// X-Peer-Sensitive; tls is hq's tls (nil: none).
func edgeConfig(t *testing.T, hqURL string, tls *testTLS) string {
	t.Helper()
	return testConfig{
		Keys: []testKey{
			{Name: "acme-bot", Env: "RELAY_TEST_ACME_BOT_KEY", Tenant: "acme", Agent: "bot"},
			{Name: "acme", Env: "RELAY_TEST_ACME_KEY", Tenant: "acme"},
			{Name: "globex", Env: "RELAY_TEST_GLOBEX_KEY", Tenant: "globex"},
			{Name: "tiny", Env: "RELAY_TEST_TINY_KEY", Tenant: "tiny"},
		},
		Backend: "hq",
		Budget:  "    default: {tokens_per_day: 1000000}",
		Backends: []testBackend{{Name: "hq", Kind: "relay", URL: hqURL + "/v1", Auth: "{type: bearer, secret: env:RELAY_TEST_RELAY_KEY}",
			TLS: tls, Internal: true, Metering: "upstream", IdentityHeaders: peerIdentityHeaders, Timeout: "5s", IdleTimeout: "5s"}},
	}.yaml()
}

// peerIdentityHeaders are the identity headers between the relay tests'
// two gateways.
const peerIdentityHeaders = "{tenant: X-Peer-Tenant, agent: X-Peer-Agent, sensitive: X-Peer-Sensitive}"

// The keys of the relay tests.
const (
	acmeBotKey = "sk-relay-test-acme-bot"
	acmeKey    = "sk-relay-test-acme"
	globexKey  = "sk-relay-test-globex"
	tinyKey    = "sk-relay-test-tiny"
	relayKey   = "sk-relay-test-edge" // A's key at B, a relay key there
	directKey  = "sk-relay-test-direct"
)

func setRelayKeys(t *testing.T) {
	for k, v := range map[string]string{
		"RELAY_TEST_ACME_BOT_KEY": acmeBotKey, "RELAY_TEST_ACME_KEY": acmeKey,
		"RELAY_TEST_GLOBEX_KEY": globexKey, "RELAY_TEST_TINY_KEY": tinyKey,
		"RELAY_TEST_RELAY_KEY": relayKey, "RELAY_TEST_DIRECT_KEY": directKey,
	} {
		t.Setenv(k, v)
	}
}

// baseHeaders are the headers every upstream request carries, whoever
// called.
var baseHeaders = []string{"Accept", "Accept-Encoding", "Content-Length", "Content-Type", "User-Agent"}

// TestRelaySendsIdentityUnderDeclaredHeaders: a kind: relay backend sends
// the caller's identity from the call's state (its key's tenant and agent,
// its sensitivity) under the declared names only, with the relay's own
// credentials; identity headers a caller sends itself and every other
// caller header stay behind.
func TestRelaySendsIdentityUnderDeclaredHeaders(t *testing.T) {
	setRelayKeys(t)
	peer := newUpstream(t, usageUpstream(10, 5))
	g := startGateway(t, edgeConfig(t, peer.URL, nil))
	spoof := map[string]string{
		"X-Peer-Tenant": "globex", "X-Peer-Agent": "intruder", "X-Peer-Sensitive": "false",
		"Cookie": "session=1", "X-Caller-Secret": "do-not-forward", "Traceparent": "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01",
	}
	for _, tc := range []struct {
		name, key string
		sensitive bool
		want      map[string]string
	}{
		{"agent, sensitive by header", acmeBotKey, true, map[string]string{"X-Peer-Tenant": "acme", "X-Peer-Agent": "bot", "X-Peer-Sensitive": "true"}},
		{"tenant only, not sensitive", globexKey, false, map[string]string{"X-Peer-Tenant": "globex"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			headers := maps(spoof)
			if tc.sensitive {
				headers["Flexway-Sensitive"] = "true"
			}
			resp, raw := do(t, http.DefaultClient, "POST", g.HTTP+"/v1/chat/completions", tc.key, chatBody, headers)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, raw)
			}
			reqs := peer.requests()
			h := reqs[len(reqs)-1].Header
			want := append(slices.Clone(baseHeaders), "Authorization")
			for k := range tc.want {
				want = append(want, k)
			}
			slices.Sort(want)
			if got := sortedNames(h); !slices.Equal(got, want) {
				t.Errorf("the peer saw headers %v, want %v", got, want)
			}
			for k, v := range tc.want {
				if got := h.Values(k); !slices.Equal(got, []string{v}) {
					t.Errorf("%s = %q, want [%q]", k, got, v)
				}
			}
			if got := h.Get("Authorization"); got != "Bearer "+relayKey {
				t.Errorf("Authorization = %q, want the relay's own key", got)
			}
		})
	}
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedNames(h http.Header) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// peerUpstream answers as upstream name: a completion (or a stream) whose
// text names it, with usage.
func peerUpstream(t *testing.T, name string) *fakeUpstream {
	return newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stream bool `json:"stream"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Stream {
			sseUpstream(
				chunk(`[{"index":0,"delta":{"role":"assistant","content":"served by "}}]`, ""),
				chunk(`[{"index":0,"delta":{"content":"`+name+`"},"finish_reason":"stop"}]`, `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`),
			)(w, r)
			return
		}
		jsonHandler(200, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"served by `+name+`"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)(w, r)
	})
}

// hqConfig is gateway B: TLS with client certificates required, A
// trusted as relay "edge" (its key relayKey), one caller of its own
// (directKey, tenant direct), and an upstream per route: tenant acme,
// agent acme/bot, tenant direct, the default (shared), the internal
// sensitive backend; tenant tiny has a daily cap of tinyCap tokens.
func hqConfig(t *testing.T, p *testPKI, httpAddr string, ups map[string]*fakeUpstream, tinyCap int64) string {
	t.Helper()
	var backends []testBackend
	for _, name := range []string{"acme", "acmebot", "direct", "internal", "shared"} {
		backends = append(backends, testBackend{Name: name, URL: ups[name].URL + "/v1", Timeout: "5s", Internal: name == "internal"})
	}
	return testConfig{
		HTTP:             httpAddr,
		TLS:              p.serverTLS(),
		Keys:             []testKey{{Name: "direct", Env: "RELAY_TEST_DIRECT_KEY", Tenant: "direct"}},
		Relays:           []testRelay{{Name: "edge", Env: "RELAY_TEST_RELAY_KEY", IdentityHeaders: peerIdentityHeaders}},
		Backend:          "shared",
		SensitiveBackend: "internal",
		Budget:           "    default: {tokens_per_day: 1000000}",
		Tenants: []testTenant{
			{Name: "acme", Backend: "acme", Agents: []testAgent{{Name: "bot", Backend: "acmebot"}}},
			{Name: "globex"},
			{Name: "direct", Backend: "direct"},
			{Name: "tiny", Budget: fmt.Sprintf("{tokens_per_day: %d}", tinyCap)},
		},
		Backends: backends,
	}.yaml()
}

// startTLSChild is startChild for a gateway whose HTTP listener requires
// a client certificate: readiness is polled with client.
func startTLSChild(t *testing.T, dir, cfg string, client *http.Client) *child {
	t.Helper()
	path := filepath.Join(dir, "flexway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &child{stderr: &syncBuffer{}}
	c.cmd = exec.Command(os.Args[0], "serve", "--config", path)
	c.cmd.Env = append(os.Environ(), "FLEXWAY_TEST_EXEC=1")
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stderr = c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.kill() })
	c.HTTP = servingAddr(t, stdout, c.stderr) // https://host:port
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := client.Get(c.HTTP + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("flexway serve (TLS) did not become ready (%v):\n%s", err, c.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTwoGatewaysRelay: two `flexway serve` processes, A relaying to B
// over mutual TLS (certificates made here), B in front of fake upstreams.
// B identifies each call as A's caller (its tenant and agent pick B's
// upstream), a call flagged sensitive at A is sensitive at B (pinned to
// B's internal backend), and B's upstreams see neither identity nor caller
// headers. A client that sends identity headers straight to B with its own
// key is itself. B's 429 budget_exceeded reaches A's client as is.
func TestTwoGatewaysRelay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	setRelayKeys(t)
	p := newTestPKI(t)
	ups := map[string]*fakeUpstream{}
	for _, name := range []string{"acme", "acmebot", "direct", "internal", "shared"} {
		ups[name] = peerUpstream(t, name)
	}
	mtls := httpsClient(p.clientTLS(t, p.clientCert, p.clientKey))
	// tiny's cap at B fits one call of chatBody (its reservation), not two
	// (the upstreams report 15 tokens a call).
	est := reservedFor(t, chatBody, 1024)
	b := startTLSChild(t, t.TempDir(), hqConfig(t, p, "127.0.0.1:0", ups, est.Input+est.Output+10), mtls)
	a := startChild(t, t.TempDir(), edgeConfig(t, b.HTTP, &testTLS{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey}))

	// Caller headers A must not pass on: its own attempt at identity
	// headers, B's sensitive header, and others.
	callerHeaders := map[string]string{
		"X-Peer-Tenant": "direct", "X-Peer-Agent": "intruder",
		"Cookie": "session=1", "X-Caller-Secret": "do-not-forward",
	}
	served := func(resp *http.Response, raw []byte) string {
		t.Helper()
		if resp.StatusCode != 200 {
			t.Fatalf("answer %d %s", resp.StatusCode, raw)
		}
		var c struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("not a completion: %v %s", err, raw)
		}
		return strings.TrimPrefix(c.Choices[0].Message.Content, "served by ")
	}
	for _, tc := range []struct {
		name, key string
		sensitive bool
		want      string
	}{
		{"tenant and agent pick B's agent backend", acmeBotKey, false, "acmebot"},
		{"tenant alone picks B's tenant backend", acmeKey, false, "acme"},
		{"another tenant gets B's default", globexKey, false, "shared"},
		{"sensitive at A is pinned internal at B", acmeBotKey, true, "internal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := maps(callerHeaders)
			if tc.sensitive {
				h["Flexway-Sensitive"] = "true"
			}
			if got := served(do(t, http.DefaultClient, "POST", a.HTTP+"/v1/chat/completions", tc.key, chatBody, h)); got != tc.want {
				t.Errorf("served by %q, want %q", got, tc.want)
			}
		})
	}

	// A stream crosses both gateways chunk by chunk.
	resp, raw := do(t, http.DefaultClient, "POST", a.HTTP+"/v1/chat/completions", acmeBotKey,
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, callerHeaders)
	text, finish, done := streamText(t, sseEvents(raw))
	if resp.StatusCode != 200 || text != "served by acmebot" || finish != "stop" || !done {
		t.Errorf("stream through the relay: %d %q %q done=%v\n%s", resp.StatusCode, text, finish, done, raw)
	}

	// A client sending identity headers straight to B with its own key is
	// itself: tenant direct, not sensitive.
	got := served(do(t, mtls, "POST", b.HTTP+"/v1/chat/completions", directKey, chatBody, map[string]string{
		"X-Peer-Tenant": "acme", "X-Peer-Agent": "bot", "X-Peer-Sensitive": "true",
	}))
	if got != "direct" {
		t.Errorf("a direct caller passing identity headers was served by %q, want its own tenant's backend direct", got)
	}

	// What B's upstreams saw: the calls above, each where it belonged, and
	// nothing of any caller's headers or identity.
	wantCalls := map[string]int{"acme": 1, "acmebot": 2, "direct": 1, "internal": 1, "shared": 1}
	for name, u := range ups {
		reqs := u.requests()
		if len(reqs) != wantCalls[name] {
			t.Errorf("upstream %s got %d calls, want %d", name, len(reqs), wantCalls[name])
		}
		for _, r := range reqs {
			if got := sortedNames(r.Header); !slices.Equal(got, baseHeaders) {
				t.Errorf("upstream %s saw headers %v, want only %v", name, got, baseHeaders)
			}
		}
	}

	// B's 429 at tiny's cap reaches A's client as B answered it: status,
	// body, Retry-After. The first call fits.
	if got := served(do(t, http.DefaultClient, "POST", a.HTTP+"/v1/chat/completions", tinyKey, chatBody, nil)); got != "shared" {
		t.Fatalf("tiny's first call served by %q, want shared", got)
	}
	before := len(ups["shared"].requests())
	viaA, bodyA := do(t, http.DefaultClient, "POST", a.HTTP+"/v1/chat/completions", tinyKey, chatBody, nil)
	atB, bodyB := do(t, mtls, "POST", b.HTTP+"/v1/chat/completions", relayKey, chatBody, map[string]string{"X-Peer-Tenant": "tiny"})
	if atB.StatusCode != 429 || !strings.Contains(string(bodyB), `"budget_exceeded"`) {
		t.Fatalf("B itself: %d %s; want 429 budget_exceeded", atB.StatusCode, bodyB)
	}
	if viaA.StatusCode != 429 {
		t.Fatalf("through A: %d %s; want B's 429", viaA.StatusCode, bodyA)
	}
	// The bodies are the same but for the time to the rollover, which
	// may tick between the two calls.
	var errA, errB struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	if json.Unmarshal(bodyA, &errA) != nil || json.Unmarshal(bodyB, &errB) != nil {
		t.Fatalf("not JSON errors:\n  %s\n  %s", bodyA, bodyB)
	}
	msgA, _, _ := strings.Cut(errA.Error.Message, "resets in")
	msgB, _, _ := strings.Cut(errB.Error.Message, "resets in")
	if errA.Error.Code != "budget_exceeded" || errA.Error.Type != errB.Error.Type || msgA != msgB || !strings.Contains(msgA, `tenant "tiny"`) {
		t.Errorf("through A the body is\n  %s\nB answers\n  %s", bodyA, bodyB)
	}
	ra, errRA := strconv.Atoi(viaA.Header.Get("Retry-After"))
	rb, errRB := strconv.Atoi(atB.Header.Get("Retry-After"))
	if errRA != nil || errRB != nil || ra <= 0 || ra-rb > 1 || rb-ra > 1 {
		t.Errorf("Retry-After through A %q, at B %q; want B's (a second apart at most)", viaA.Header.Get("Retry-After"), atB.Header.Get("Retry-After"))
	}
	if ct := viaA.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type through A %q", ct)
	}
	if n := len(ups["shared"].requests()); n != before {
		t.Errorf("%d refused calls reached B's upstream", n-before)
	}
	if strings.Contains(b.stderr.String(), relayKey) || strings.Contains(a.stderr.String(), relayKey) {
		t.Error("the relay key reached a log")
	}
}
