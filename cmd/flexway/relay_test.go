package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// testPKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate it signed, and a client certificate of another CA, all
// written as PEM files in dir.
type testPKI struct {
	dir                   string
	caFile                string
	serverCert, serverKey string
	clientCert, clientKey string
	// strangerCert and strangerKey are a client certificate the CA did
	// not sign.
	strangerCert, strangerKey string
	pool                      *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir(), pool: x509.NewCertPool()}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(p.dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, "PRIVATE KEY", der)
	}
	serial := int64(1)
	newCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		k := newKey()
		serial++
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(serial),
			Subject:               pkix.Name{CommonName: name},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(24 * time.Hour),
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
			BasicConstraintsValid: true,
			IsCA:                  true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return cert, k, der
	}
	leaf := func(ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, usage x509.ExtKeyUsage, certFile, keyFile string) (string, string) {
		k := newKey()
		serial++
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return write(certFile, "CERTIFICATE", der), writeKey(keyFile, k)
	}
	ca, caKey, caDER := newCA("flexway test CA")
	p.caFile = write("ca.pem", "CERTIFICATE", caDER)
	p.pool.AddCert(ca)
	p.serverCert, p.serverKey = leaf(ca, caKey, "flexway-b", x509.ExtKeyUsageServerAuth, "server.pem", "server-key.pem")
	p.clientCert, p.clientKey = leaf(ca, caKey, "flexway-a", x509.ExtKeyUsageClientAuth, "client.pem", "client-key.pem")
	other, otherKey, _ := newCA("another CA")
	p.strangerCert, p.strangerKey = leaf(other, otherKey, "stranger", x509.ExtKeyUsageClientAuth, "stranger.pem", "stranger-key.pem")
	return p
}

// clientTLS is a client configuration trusting the test CA, presenting
// the key pair certFile/keyFile when not empty.
func (p *testPKI) clientTLS(t *testing.T, certFile, keyFile string) *tls.Config {
	t.Helper()
	c := &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}

// httpsClient is an HTTP client over c, HTTP/2 when the server offers it.
func httpsClient(c *tls.Config) *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: c, ForceAttemptHTTP2: true},
	}
}

// serverTLSBlock is the server.tls block of p, client certificates
// required.
func (p *testPKI) serverTLSBlock() string {
	return fmt.Sprintf("  tls: {cert_file: %q, key_file: %q, client_ca_file: %q}\n", p.serverCert, p.serverKey, p.caFile)
}

// do sends a request with key as its bearer and the given headers.
func do(t *testing.T, c *http.Client, method, url, key, body string, headers map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	return resp, raw
}

// TestServeTLS: with server.tls and client_ca_file both listeners speak
// TLS (1.2 at least) and require a client certificate the CA signed: a
// client without one, or with another CA's, is refused at the handshake
// and reaches nothing; with it, the OpenAI API (over HTTP/2), /readyz and
// gRPC (grpc-go's TLS credentials, and grpcurl) answer.
func TestServeTLS(t *testing.T) {
	p := newTestPKI(t)
	up := newUpstream(t, jsonHandler(200, completion))
	cfg := strings.Replace(baseConfig(t, up.URL, ""), "server:\n", "server:\n"+p.serverTLSBlock(), 1)
	g := startGateway(t, cfg)
	base := "https://" + strings.TrimPrefix(g.HTTP, "http://")

	withCert := httpsClient(p.clientTLS(t, p.clientCert, p.clientKey))
	resp, raw := do(t, withCert, "GET", base+"/v1/models", demoKey, "", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"m-large"`) {
		t.Fatalf("/v1/models with a client certificate: %d %s", resp.StatusCode, raw)
	}
	if resp.ProtoMajor != 2 || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Errorf("answer over %s, TLS %+v; want HTTP/2 over TLS 1.2+", resp.Proto, resp.TLS)
	}
	if resp, _ := do(t, withCert, "GET", base+"/readyz", "", "", nil); resp.StatusCode != 200 {
		t.Errorf("/readyz over TLS: %d", resp.StatusCode)
	}
	resp, raw = do(t, withCert, "POST", base+"/v1/chat/completions", demoKey, `{"model":"m-large","messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(raw), "Hello from upstream") {
		t.Fatalf("chat over TLS: %d %s", resp.StatusCode, raw)
	}

	// Refused at the handshake: no certificate, another CA's certificate,
	// TLS 1.1.
	for name, c := range map[string]*tls.Config{
		"no client certificate":    p.clientTLS(t, "", ""),
		"another CA's certificate": p.clientTLS(t, p.strangerCert, p.strangerKey),
		"TLS 1.1 with a certificate": func() *tls.Config {
			c := p.clientTLS(t, p.clientCert, p.clientKey)
			c.MinVersion, c.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
			return c
		}(),
	} {
		for _, addr := range []string{strings.TrimPrefix(base, "https://"), g.GRPC} {
			if err := handshake(addr, c); err == nil {
				t.Errorf("%s to %s: handshake and first read succeeded, want a refusal", name, addr)
			}
		}
		req, _ := http.NewRequest("GET", base+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+demoKey)
		if resp, err := httpsClient(c).Do(req); err == nil {
			resp.Body.Close()
			t.Errorf("%s: HTTP answered %d, want a TLS refusal", name, resp.StatusCode)
		}
	}
	// Plain HTTP to the TLS listener gets no API answer.
	if resp, err := http.Get(g.HTTP + "/v1/models"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS listener: %d, want 400", resp.StatusCode)
		}
	}

	// gRPC with grpc-go's TLS credentials.
	conn, err := grpc.NewClient(g.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(p.clientTLS(t, p.clientCert, p.clientKey))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	out, err := flexwayv1.NewChatServiceClient(conn).CreateChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
		Model: "m-large", Messages: []*flexwayv1.ChatMessage{userMessage("Hello")},
	})
	if err != nil {
		t.Fatalf("gRPC over TLS: %v", err)
	}
	if got := out.GetChoices()[0].GetMessage().GetText(); got != "Hello from upstream" {
		t.Errorf("gRPC over TLS answered %q", got)
	}
	// Without a client certificate, and in plaintext, gRPC gets nowhere.
	n := len(up.requests())
	for name, creds := range map[string]credentials.TransportCredentials{
		"no client certificate": credentials.NewTLS(p.clientTLS(t, "", "")),
		"plaintext":             insecure.NewCredentials(),
	} {
		conn, err := grpc.NewClient(g.GRPC, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(withKey(t, demoKey), 3*time.Second)
		_, err = flexwayv1.NewChatServiceClient(conn).CreateChatCompletion(ctx, &flexwayv1.CreateChatCompletionRequest{
			Model: "m-large", Messages: []*flexwayv1.ChatMessage{userMessage("Hello")},
		})
		cancel()
		conn.Close()
		if err == nil {
			t.Errorf("gRPC with %s: answered, want a refusal", name)
		}
	}
	if got := len(up.requests()); got != n {
		t.Errorf("%d calls without a valid client certificate reached the upstream", got-n)
	}

	// grpcurl with the CA and the client certificate.
	grpcurl := grpcurlPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tlsArgs := []string{"-cacert", p.caFile, "-cert", p.clientCert, "-key", p.clientKey}
	list, err := exec.CommandContext(ctx, grpcurl, append(tlsArgs, g.GRPC, "list")...).CombinedOutput()
	if err != nil || !strings.Contains(string(list), "flexway.v1.ChatService\n") {
		t.Fatalf("grpcurl list over TLS: %v\n%s", err, list)
	}
	call, err := exec.CommandContext(ctx, grpcurl, append(tlsArgs, "-H", "authorization: Bearer "+demoKey,
		"-d", `{"model":"m-large","messages":[{"role":"user","text":"Hello"}]}`,
		g.GRPC, "flexway.v1.ChatService/CreateChatCompletion")...).CombinedOutput()
	if err != nil || !strings.Contains(string(call), `"text": "Hello from upstream"`) {
		t.Fatalf("grpcurl call over TLS: %v\n%s", err, call)
	}
	if noCert, err := exec.CommandContext(ctx, grpcurl, "-cacert", p.caFile, "-max-time", "3", g.GRPC, "list").CombinedOutput(); err == nil {
		t.Errorf("grpcurl without a client certificate listed services:\n%s", noCert)
	}
}

// handshake dials addr over TLS with c and reads once: with TLS 1.3 a
// refused client certificate is only reported at the client's first
// read. A server that accepts the client leaves the read waiting, which
// is success here.
func handshake(addr string, c *tls.Config) error {
	c = c.Clone()
	c.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	// An HTTP/2 server speaks first (its SETTINGS frame): bytes read
	// mean the connection was accepted.
	if err == nil {
		return nil
	}
	return err
}

// TestServeTLSFilesRefused: serve and validate fail on server.tls files
// that cannot be used, naming the key path and the file.
func TestServeTLSFilesRefused(t *testing.T) {
	p := newTestPKI(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, jsonHandler(200, completion))
	t.Setenv("FLEXWAY_TEST_KEY", demoKey)
	t.Setenv("FLEXWAY_TEST_UPSTREAM_TOKEN", "upstream-secret-token")
	for _, tc := range []struct {
		name, block, want string
	}{
		{"missing cert", fmt.Sprintf("  tls: {cert_file: %q, key_file: %q}\n", missing, p.serverKey), "server.tls.cert_file: open " + missing},
		{"missing key", fmt.Sprintf("  tls: {cert_file: %q, key_file: %q}\n", p.serverCert, missing), "server.tls.key_file: open " + missing},
		{"key of another certificate", fmt.Sprintf("  tls: {cert_file: %q, key_file: %q}\n", p.serverCert, p.clientKey), "server.tls.cert_file: " + p.serverCert + " with key_file " + p.clientKey},
		{"client CA not PEM", fmt.Sprintf("  tls: {cert_file: %q, key_file: %q, client_ca_file: %q}\n", p.serverCert, p.serverKey, notPEM), "server.tls.client_ca_file: " + notPEM + ": no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := strings.Replace(baseConfig(t, up.URL, ""), "server:\n", "server:\n"+tc.block, 1)
			path := filepath.Join(t.TempDir(), "flexway.yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := serve(ctx, path, io.Discard, io.Discard, serveEnv{Ready: func(string, string) { t.Error("serve started listening") }})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("serve: %v, want an error containing %q", err, tc.want)
			}
			var out strings.Builder
			if err := validate(path, &out); err == nil || !strings.Contains(out.String(), "error: "+tc.want) {
				t.Errorf("validate: %v\n%s\nwant an error line containing %q", err, out.String(), tc.want)
			}
		})
	}
}

// edgeConfig is gateway A: four callers (acme/bot, acme, globex, tiny),
// the default backend "hq" a kind: relay to hqURL, metered upstream,
// passing identity under X-Peer-Tenant, X-Peer-Agent and
// X-Peer-Sensitive; tlsBlock is hq's tls line (may be empty).
func edgeConfig(t *testing.T, hqURL, tlsBlock string) string {
	t.Helper()
	return fmt.Sprintf(`
server:
  http: %s
  grpc: %s
identity:
  api_keys:
    - {name: acme-bot, key: env:RELAY_TEST_ACME_BOT_KEY, tenant: acme, agent: bot}
    - {name: acme, key: env:RELAY_TEST_ACME_KEY, tenant: acme}
    - {name: globex, key: env:RELAY_TEST_GLOBEX_KEY, tenant: globex}
    - {name: tiny, key: env:RELAY_TEST_TINY_KEY, tenant: tiny}
ai:
  backend: hq
  budget:
    default: {tokens_per_day: 1000000}
  backends:
    hq:
      kind: relay
      url: %s/v1
      auth: {type: bearer, secret: env:RELAY_TEST_RELAY_KEY}
%s      external: false
      metering: upstream
      identity_headers: {tenant: X-Peer-Tenant, agent: X-Peer-Agent, sensitive: X-Peer-Sensitive}
      timeout: 5s
      idle_timeout: 5s
`, "127.0.0.1:0", "localhost:0", hqURL, tlsBlock)
}

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
	g := startGateway(t, edgeConfig(t, peer.URL, ""))
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
	var backends strings.Builder
	for _, name := range []string{"acme", "acmebot", "direct", "internal", "shared"} {
		fmt.Fprintf(&backends, "    %s:\n      url: %s/v1\n      timeout: 5s\n", name, ups[name].URL)
		if name == "internal" {
			backends.WriteString("      external: false\n")
		}
	}
	return fmt.Sprintf(`
server:
  http: %s
  grpc: %s
%sidentity:
  api_keys:
    - {name: direct, key: env:RELAY_TEST_DIRECT_KEY, tenant: direct}
  relays:
    - name: edge
      key: env:RELAY_TEST_RELAY_KEY
      identity_headers: {tenant: X-Peer-Tenant, agent: X-Peer-Agent, sensitive: X-Peer-Sensitive}
ai:
  backend: shared
  sensitive_backend: internal
  budget:
    default: {tokens_per_day: 1000000}
  tenants:
    acme:
      backend: acme
      agents:
        bot: {backend: acmebot}
    globex: {}
    direct: {backend: direct}
    tiny:
      budget: {tokens_per_day: %d}
  backends:
%s`, httpAddr, "localhost:0", p.serverTLSBlock(), tinyCap, backends.String())
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
	tlsLine := fmt.Sprintf("      tls: {ca_file: %q, cert_file: %q, key_file: %q}\n", p.caFile, p.clientCert, p.clientKey)
	a := startChild(t, t.TempDir(), edgeConfig(t, b.HTTP, tlsLine))

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
