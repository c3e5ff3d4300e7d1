package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// TestShutdownLetsOpenStreamFinish: once serve's context is done (SIGTERM
// in main), the listeners refuse new connections while an open stream runs
// to its end, [DONE] included, and serve returns.
func TestShutdownLetsOpenStreamFinish(t *testing.T) {
	const chunks = 10
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", chunk(fmt.Sprintf(`[{"index":0,"delta":{"content":"c%d "},"finish_reason":null}]`, i), ""))
			f.Flush()
			select {
			case <-time.After(100 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "data: %s\n\n", chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""))
		io.WriteString(w, "data: [DONE]\n\n")
	})
	g := startGateway(t, baseConfig(t, up.URL, ""))
	resp := post(t, g, "/v1/chat/completions", `{"model":"m-large","stream":true,"messages":[{"role":"user","content":"slow"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	events := &sseReader{r: bufio.NewReader(resp.Body)}
	first, err := events.next()
	if err != nil || !strings.Contains(first, `"c0 "`) {
		t.Fatalf("first event %q: %v", first, err)
	}
	// The same over gRPC.
	gs, err := flexwayv1.NewChatServiceClient(grpcConn(t, g)).StreamChatCompletion(withKey(t, demoKey),
		&flexwayv1.CreateChatCompletionRequest{Model: "m-large", Messages: []*flexwayv1.ChatMessage{userMessage("slow")}})
	if err != nil {
		t.Fatal(err)
	}
	gfirst, err := gs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	grpcText := make(chan string, 1)
	go func() {
		text := gfirst.GetChoices()[0].GetDelta().GetText()
		for {
			ch, err := gs.Recv()
			if err != nil {
				if err != io.EOF {
					text += " error: " + err.Error()
				}
				grpcText <- text
				return
			}
			for _, c := range ch.GetChoices() {
				text += c.GetDelta().GetText()
			}
		}
	}()

	g.stop() // what SIGTERM does to main's context
	for _, addr := range []string{strings.TrimPrefix(g.HTTP, "http://"), g.GRPC} {
		deadline := time.Now().Add(2 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err != nil {
				break
			}
			c.Close()
			if time.Now().After(deadline) {
				t.Fatalf("%s still accepts connections after shutdown began", addr)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	var rest []string
	for {
		ev, err := events.next()
		if err != nil {
			if err != io.EOF {
				t.Fatalf("stream cut after %q: %v", rest, err)
			}
			break
		}
		rest = append(rest, ev)
	}
	text, finish, done := streamText(t, append([]string{first}, rest...))
	var want strings.Builder
	for i := range chunks {
		fmt.Fprintf(&want, "c%d ", i)
	}
	if text != want.String() || finish != "stop" || !done {
		t.Fatalf("text %q finish %q done %v", text, finish, done)
	}
	select {
	case got := <-grpcText:
		if got != want.String() {
			t.Fatalf("gRPC stream: %q, want %q", got, want.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the gRPC stream did not end")
	}
	if err := g.wait(t, 5*time.Second); err != nil {
		t.Fatalf("serve returned %v", err)
	}
}

// TestShutdownLetsInFlightRequestFinish: a request whose body is still
// arriving when shutdown begins has not reached the core yet; it is served
// all the same.
func TestShutdownLetsInFlightRequestFinish(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", g.HTTP+"/v1/chat/completions", pr)
	req.Header.Set("Authorization", "Bearer "+demoKey)
	type result struct {
		status int
		body   string
		err    error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			res <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		res <- result{status: resp.StatusCode, body: string(b)}
	}()
	io.WriteString(pw, `{"model":"m-large",`)
	time.Sleep(100 * time.Millisecond) // the server read the headers
	g.stop()
	time.Sleep(100 * time.Millisecond) // shutdown is under way
	io.WriteString(pw, `"messages":[{"role":"user","content":"hi"}]}`)
	pw.Close()
	var r result
	select {
	case r = <-res:
	case <-time.After(5 * time.Second):
		t.Fatal("no answer")
	}
	if r.err != nil || r.status != 200 || !strings.Contains(r.body, "Hello from upstream") {
		t.Fatalf("in-flight request: %d %s %v", r.status, r.body, r.err)
	}
	if err := g.wait(t, 5*time.Second); err != nil {
		t.Fatalf("serve returned %v", err)
	}
}

// TestClientGoneCancelsUpstream: a client that leaves mid-stream has the
// upstream request canceled, not read to its end.
func TestClientGoneCancelsUpstream(t *testing.T) {
	canceled := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := 0; i < 200; i++ {
			fmt.Fprintf(w, "data: %s\n\n", chunk(fmt.Sprintf(`[{"index":0,"delta":{"content":"c%d "},"finish_reason":null}]`, i), ""))
			f.Flush()
			select {
			case <-time.After(25 * time.Millisecond):
			case <-r.Context().Done():
				close(canceled)
				return
			}
		}
	})
	g := startGateway(t, baseConfig(t, up.URL, ""))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", g.HTTP+"/v1/chat/completions",
		strings.NewReader(`{"model":"m-large","stream":true,"messages":[{"role":"user","content":"slow"}]}`))
	req.Header.Set("Authorization", "Bearer "+demoKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := (&sseReader{r: bufio.NewReader(resp.Body)}).next(); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-canceled:
	case <-time.After(3 * time.Second):
		t.Fatal("the upstream request was not canceled when the client left")
	}
}

func TestHealthAndReadiness(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, completion))
	g := startGateway(t, baseConfig(t, up.URL, ""))
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(g.HTTP + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"status"`) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("probes reached the upstream %d times", n)
	}
}

// writeConfig writes cfg to a file in a temporary directory and returns
// its path.
func writeConfig(t *testing.T, cfg string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flexway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// lineOf returns the 1-based line of the first line of cfg containing s.
func lineOf(t *testing.T, cfg, s string) int {
	t.Helper()
	for i, l := range strings.Split(cfg, "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%q is not in the configuration", s)
	return 0
}

func TestValidateCommand(t *testing.T) {
	t.Setenv("FLEXWAY_TEST_KEY", demoKey)
	t.Setenv("FLEXWAY_TEST_UPSTREAM_TOKEN", "upstream-secret-token")
	t.Setenv("FLEXWAY_TEST_PEER_TOKEN", "peer-secret-token")
	validate := func(t *testing.T, cfg string) (string, error) {
		t.Helper()
		path := writeConfig(t, cfg)
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"validate", "--config", path}, &out, &errOut)
		all := out.String() + errOut.String()
		if strings.Contains(all, "upstream-secret-token") || strings.Contains(all, demoKey) || strings.Contains(all, "peer-secret-token") {
			t.Fatalf("a secret reached the output:\n%s", all)
		}
		return all, err
	}

	t.Run("good", func(t *testing.T) {
		out, err := validate(t, baseConfig(t, "http://127.0.0.1:1", ""))
		if err != nil {
			t.Fatalf("validate: %v\n%s", err, out)
		}
		if !strings.Contains(out, "ok") || strings.Contains(out, "error") {
			t.Fatalf("output:\n%s", out)
		}
	})

	t.Run("unknown key and bad reference", func(t *testing.T) {
		cfg := baseConfig(t, "http://127.0.0.1:1", "      timeuot: 5s\n")
		cfg = strings.Replace(cfg, "  backend: main\n", "  backend: mian\n", 1)
		out, err := validate(t, cfg)
		if err == nil {
			t.Fatalf("validate accepted a bad configuration:\n%s", out)
		}
		unknown := regexp.MustCompile(fmt.Sprintf(`:%d: .*unknown key ai\.backends\.main\.timeuot`, lineOf(t, cfg, "timeuot:")))
		ref := regexp.MustCompile(fmt.Sprintf(`:%d: .*ai\.backend\b.*mian`, lineOf(t, cfg, "backend: mian")))
		if !unknown.MatchString(out) || !ref.MatchString(out) {
			t.Fatalf("output does not list both problems with their lines (want %s and %s):\n%s", unknown, ref, out)
		}
	})

	t.Run("relay metered locally", func(t *testing.T) {
		cfg := baseConfig(t, "http://127.0.0.1:1", `    peer:
      kind: relay
      url: http://127.0.0.1:2/v1
      auth: {type: bearer, secret: env:FLEXWAY_TEST_PEER_TOKEN}
      identity_headers: {tenant: Flexway-Tenant, agent: Flexway-Agent, sensitive: Flexway-Sensitive}
      models: [m-large]
      default_model: m-large
`)
		out, err := validate(t, cfg)
		if err != nil {
			t.Fatalf("a warning failed validate: %v\n%s", err, out)
		}
		want := regexp.MustCompile(fmt.Sprintf(`:%d: warning: ai\.backends\.peer\.metering: relay metered locally`, lineOf(t, cfg, "    peer:")))
		if !want.MatchString(out) {
			t.Fatalf("no warning about the relay metered locally (want %s):\n%s", want, out)
		}
	})
}

func TestVersionCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "flexway ") || len(strings.TrimSpace(out.String())) <= len("flexway") {
		t.Fatalf("version printed %q", out.String())
	}
}
