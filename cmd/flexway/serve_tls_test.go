package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// serverTLS is the server.tls of p, client certificates required.
func (p *testPKI) serverTLS() *testTLS {
	return &testTLS{CertFile: p.serverCert, KeyFile: p.serverKey, ClientCAFile: p.caFile}
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
	cfg := baseTestConfig(up.URL)
	cfg.TLS = p.serverTLS()
	g := startGateway(t, cfg.yaml())
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
		name string
		tls  testTLS
		want string
	}{
		{"missing cert", testTLS{CertFile: missing, KeyFile: p.serverKey}, "server.tls.cert_file: open " + missing},
		{"missing key", testTLS{CertFile: p.serverCert, KeyFile: missing}, "server.tls.key_file: open " + missing},
		{"key of another certificate", testTLS{CertFile: p.serverCert, KeyFile: p.clientKey}, "server.tls.cert_file: " + p.serverCert + " with key_file " + p.clientKey},
		{"client CA not PEM", testTLS{CertFile: p.serverCert, KeyFile: p.serverKey, ClientCAFile: notPEM}, "server.tls.client_ca_file: " + notPEM + ": no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := baseTestConfig(up.URL)
			c.TLS = &tc.tls
			cfg := c.yaml()
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
