package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/cmd/flexway/gateway"
	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/config"
)

// completion is one chat completion, byte for byte as OpenAI writes it.
const completion = `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from upstream"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":4,"total_tokens":15}}`

const (
	testKey       = "sk-gateway-test"
	upstreamToken = "upstream-gateway-token"
)

// upstream is a fake OpenAI: every POST /v1/chat/completions gets
// completion; it records the Authorization header of each call.
type upstream struct {
	*httptest.Server
	mu    sync.Mutex
	auths []string
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		u.mu.Lock()
		u.auths = append(u.auths, r.Header.Get("Authorization"))
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, completion)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) calls() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auths...)
}

// minimalConfig is one key (tenant acme) and two backends serving model
// m: main, whose url refuses connections (127.0.0.1:1), falling back to
// spare, the fake upstream at spareURL with a bearer secret; the ledger
// and the audit are files of dir.
func minimalConfig(spareURL string) string {
	return `server:
  http: 127.0.0.1:0
  grpc: localhost:0
identity:
  api_keys:
    - name: acme
      key: env:GATEWAY_TEST_KEY
      tenant: acme
ai:
  backend: main
  backends:
    main:
      url: http://127.0.0.1:1/v1
      models: [m]
      default_model: m
      fallback: [spare]
      timeout: 2s
    spare:
      url: ` + spareURL + `/v1
      auth: {type: bearer, secret: env:GATEWAY_TEST_UPSTREAM_TOKEN}
      models: [m]
      default_model: m
      timeout: 2s
audit:
  path: audit.jsonl
`
}

// load writes yaml to a file of a temporary directory and loads it.
func load(t *testing.T, yaml string) *config.Config {
	t.Helper()
	t.Setenv("GATEWAY_TEST_KEY", testKey)
	t.Setenv("GATEWAY_TEST_UPSTREAM_TOKEN", upstreamToken)
	path := filepath.Join(t.TempDir(), "flexway.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, problems, err := config.Load(path)
	if err != nil {
		t.Fatalf("config.Load: %v\n%v", err, problems)
	}
	return cfg
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestServe: a gateway built with New serves one chat completion over
// HTTP and one over gRPC on the test's listeners, each from the fallback
// backend with the degraded header, then returns nil from Serve once its
// context is cancelled, well within the shutdown grace, with both
// listeners closed.
func TestServe(t *testing.T) {
	up := newUpstream(t)
	g, err := gateway.New(gateway.Options{Config: load(t, minimalConfig(up.URL))})
	if err != nil {
		t.Fatal(err)
	}
	grpcLis, httpLis := listen(t), listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, grpcLis, httpLis) }()

	// HTTP: the answer as the upstream wrote it.
	req, err := http.NewRequest(http.MethodPost, "http://"+httpLis.Addr().String()+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP status %d: %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Flexway-Degraded"); got != "backend-fallback" {
		t.Errorf("HTTP Flexway-Degraded %q, want backend-fallback (spare served)", got)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Error("HTTP answer without X-Request-Id")
	}
	var got struct {
		Model   string `json:"model"`
		Choices []struct {
			Message      struct{ Role, Content string } `json:"message"`
			FinishReason string                         `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
			Total      int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("HTTP body %s: %v", body, err)
	}
	if len(got.Choices) != 1 || got.Choices[0].Message.Content != "Hello from upstream" || got.Choices[0].Message.Role != "assistant" ||
		got.Choices[0].FinishReason != "stop" || got.Model != "m" {
		t.Errorf("HTTP answer %s", body)
	}
	if got.Usage.Prompt != 11 || got.Usage.Completion != 4 || got.Usage.Total != 15 {
		t.Errorf("HTTP usage %+v, want 11 + 4 = 15", got.Usage)
	}

	// gRPC: the same answer through flexway.v1's ChatService.
	conn, err := grpc.NewClient(grpcLis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+testKey), 10*time.Second)
	defer ccancel()
	var header metadata.MD
	gr, err := flexwayv1.NewChatServiceClient(conn).CreateChatCompletion(cctx, &flexwayv1.CreateChatCompletionRequest{
		Model:    "m",
		Messages: []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "hi"}}},
	}, grpc.Header(&header))
	if err != nil {
		t.Fatal(err)
	}
	if len(gr.GetChoices()) != 1 || gr.GetChoices()[0].GetMessage().GetText() != "Hello from upstream" ||
		gr.GetChoices()[0].GetFinishReason() != "stop" || gr.GetModel() != "m" {
		t.Errorf("gRPC answer %v", gr)
	}
	if u := gr.GetUsage(); u.GetPromptTokens() != 11 || u.GetCompletionTokens() != 4 || u.GetTotalTokens() != 15 {
		t.Errorf("gRPC usage %v, want 11 + 4 = 15", u)
	}
	if d := header.Get("flexway-degraded"); len(d) != 1 || d[0] != "backend-fallback" {
		t.Errorf("gRPC flexway-degraded %q, want backend-fallback (spare served)", d)
	}
	conn.Close()

	// The upstream got both calls with the backend's secret, never the
	// caller's key.
	if auths := up.calls(); len(auths) != 2 || auths[0] != "Bearer "+upstreamToken || auths[1] != "Bearer "+upstreamToken {
		t.Errorf("upstream Authorization headers %q, want two of the backend's bearer secret", auths)
	}

	// Shutdown: nothing is open, so Serve returns at once, nil.
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v, want nil after the context is cancelled", err)
		}
	case <-time.After(gateway.ShutdownGrace):
		t.Fatalf("Serve did not return within the shutdown grace (%v)", gateway.ShutdownGrace)
	}
	for name, l := range map[string]net.Listener{"gRPC": grpcLis, "HTTP": httpLis} {
		if c, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			if c != nil {
				c.Close()
			}
			t.Errorf("%s listener after Serve: Accept returned %v, want net.ErrClosed", name, err)
		}
		if c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
			c.Close()
			t.Errorf("%s listener %s still accepts connections after Serve", name, l.Addr())
		}
	}
	if err := g.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestNewBrokenConfig: New refuses a configuration it cannot build, with
// an error naming the key at fault, and does not panic.
func TestNewBrokenConfig(t *testing.T) {
	up := newUpstream(t)
	tests := []struct {
		name string
		edit func(t *testing.T, c *config.Config)
		want string // in the error
	}{
		{
			name: "backend url that cannot be parsed",
			edit: func(t *testing.T, c *config.Config) {
				b := c.AI.Backends["spare"]
				b.URL = "http://[::1/v1"
				c.AI.Backends["spare"] = b
			},
			want: "ai.backends.spare",
		},
		{
			name: "secret whose variable is unset",
			edit: func(t *testing.T, c *config.Config) {
				s, err := config.ParseSecret("env:GATEWAY_TEST_UNSET")
				if err != nil {
					t.Fatal(err)
				}
				b := c.AI.Backends["spare"]
				b.Auth.Secret = s
				c.AI.Backends["spare"] = b
			},
			want: "ai.backends.spare.auth.secret",
		},
		{
			name: "missing server certificate",
			edit: func(t *testing.T, c *config.Config) {
				dir := t.TempDir()
				c.Server.TLS.CertFile, c.Server.TLS.KeyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
			},
			want: "server.tls.cert_file",
		},
		{
			name: "prompt log under a file",
			edit: func(t *testing.T, c *config.Config) {
				file := filepath.Join(t.TempDir(), "plain")
				if err := os.WriteFile(file, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				c.AI.Policies = []config.Policy{{Name: "p", PromptLogging: &config.PromptLogging{Enabled: true, Path: filepath.Join(file, "p.jsonl")}}}
			},
			want: "ai.policies[0].prompt_logging.path",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := load(t, minimalConfig(up.URL))
			tt.edit(t, cfg)
			var g *gateway.Gateway
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("New panicked: %v", r)
					}
				}()
				g, err = gateway.New(gateway.Options{Config: cfg})
			}()
			if err == nil {
				g.Close()
				t.Fatal("New: nil error, want one")
			}
			if g != nil {
				t.Errorf("New returned a gateway with its error %v", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error naming %s", err, tt.want)
			}
		})
	}
}
