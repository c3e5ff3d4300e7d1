package gateway

import (
	"context"
	"crypto/sha256"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/interceptors/identity"
	"github.com/flexway/flexway/server/config"
)

const testKey = "sk-keyonce-test"

// countingKeys counts the lookups of the keyring it wraps.
type countingKeys struct {
	identity.Keyring
	n atomic.Int64
}

func (c *countingKeys) Lookup(sum [sha256.Size]byte) (identity.Key, bool) {
	c.n.Add(1)
	return c.Keyring.Lookup(sum)
}

// startCounted builds and serves a gateway over a fake upstream, with the
// embedded ledger unless skipLedger, and returns its HTTP base URL, its
// gRPC address and its keyring's lookup counter.
func startCounted(t *testing.T, skipLedger bool) (string, string, *countingKeys) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`))
	}))
	t.Cleanup(up.Close)
	t.Setenv("FLEXWAY_KEYONCE_KEY", testKey)
	dir := t.TempDir()
	path := filepath.Join(dir, "flexway.yaml")
	yaml := strings.Join([]string{
		"server: {http: '127.0.0.1:0', grpc: 'localhost:0'}",
		"identity:",
		"  api_keys:",
		"    - {name: acme-bot, key: env:FLEXWAY_KEYONCE_KEY, tenant: acme, agent: bot}",
		"ai:",
		"  backend: main",
		"  budget:",
		"    store: {path: " + filepath.Join(dir, "ledger.db") + "}",
		"  backends:",
		"    main: {url: " + up.URL + "/v1, external: false, models: [m], default_model: m, timeout: 2s, idle_timeout: 2s}",
		"",
	}, "\n")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, problems, err := config.Load(path)
	if err != nil || len(problems) > 0 {
		t.Fatalf("config: %v %v", err, problems)
	}
	keys := &countingKeys{}
	g, err := New(Options{Config: cfg, SkipAudit: true, SkipLedger: skipLedger, wrapKeys: func(k identity.Keyring) identity.Keyring {
		keys.Keyring = k
		return keys
	}})
	if err != nil {
		t.Fatal(err)
	}
	grpcLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, grpcLis, httpLis) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return")
		}
		_ = g.Close()
	})
	return "http://" + httpLis.Addr().String(), grpcLis.Addr().String(), keys
}

// postChat makes one HTTP chat call with key and returns its status.
func postChat(t *testing.T, base, key string) int {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The API key is looked up once per call: an HTTP call's pre-body check
// hands the caller it identified to the identity interceptor, and a gRPC
// call's key is looked up by the interceptor alone.
func TestKeyLookedUpOnce(t *testing.T) {
	base, grpcAddr, keys := startCounted(t, false)
	if code := postChat(t, base, testKey); code != http.StatusOK {
		t.Fatalf("HTTP chat: status %d", code)
	}
	if n := keys.n.Swap(0); n != 1 {
		t.Errorf("HTTP chat call: %d key lookups, want 1", n)
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+testKey)
	if _, err := flexwayv1.NewChatServiceClient(conn).CreateChatCompletion(ctx, &flexwayv1.CreateChatCompletionRequest{
		Model:    "m",
		Messages: []*flexwayv1.ChatMessage{{Role: "user", Content: &flexwayv1.ChatMessage_Text{Text: "hello"}}},
	}); err != nil {
		t.Fatalf("gRPC chat: %v", err)
	}
	if n := keys.n.Swap(0); n != 1 {
		t.Errorf("gRPC chat call: %d key lookups, want 1", n)
	}
}

// Without a ledger the HTTP front makes no check before the body: the
// identity interceptor still authenticates every call, once.
func TestKeyCheckedWithoutLedger(t *testing.T) {
	base, _, keys := startCounted(t, true)
	if code := postChat(t, base, "sk-not-a-key"); code != http.StatusUnauthorized {
		t.Errorf("unknown key: status %d, want 401", code)
	}
	if code := postChat(t, base, testKey); code != http.StatusOK {
		t.Errorf("known key: status %d, want 200", code)
	}
	if n := keys.n.Load(); n != 2 {
		t.Errorf("two HTTP calls: %d key lookups, want 2", n)
	}
}
