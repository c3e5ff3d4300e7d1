package upstream

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexway/flexway/server/faults"
)

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	const secret = "sk-very-secret"
	tests := []struct {
		name string
		o    Options
		want string // in the error
	}{
		{name: "no_name", o: Options{URL: "http://x/v1"}, want: "name is required"},
		{name: "no_url", o: Options{Name: "main"}, want: `backend "main": url: required`},
		{name: "bad_scheme", o: Options{Name: "main", URL: "ftp://x/v1"}, want: "scheme"},
		{name: "no_host", o: Options{Name: "main", URL: "http:///v1"}, want: "no host"},
		{name: "user_info", o: Options{Name: "main", URL: "https://user:" + secret + "@x/v1"}, want: "user info"},
		{name: "negative_timeout", o: Options{Name: "main", URL: "http://x", Timeout: -1}, want: "timeout"},
		{name: "negative_idle", o: Options{Name: "main", URL: "http://x", IdleTimeout: -1}, want: "idle_timeout"},
		{name: "models_without_default", o: Options{Name: "main", URL: "http://x", Models: []string{"a"}}, want: "default_model"},
		{name: "unknown_auth", o: Options{Name: "main", URL: "http://x", Auth: Auth{Type: "basic"}}, want: `unknown type "basic"`},
		{name: "bearer_no_secret", o: Options{Name: "main", URL: "http://x", Auth: Auth{Type: AuthBearer}}, want: "secret"},
		{name: "bearer_bad_secret", o: Options{Name: "main", URL: "http://x", Auth: Auth{Type: AuthBearer, Secret: secret + "\r\nX: y"}}, want: "not allowed in a header"},
		{name: "header_no_name", o: Options{Name: "main", URL: "http://x", Auth: Auth{Type: AuthHeader, Secret: secret}}, want: "header name"},
		{name: "header_bad_name", o: Options{Name: "main", URL: "http://x", Auth: Auth{Type: AuthHeader, Header: "api key", Secret: secret}}, want: "not a valid header name"},
		{name: "header_reserved", o: Options{Name: "main", URL: "http://x", Auth: Auth{Type: AuthHeader, Header: "content-type", Secret: secret}}, want: "set by the backend"},
		{name: "header_no_secret", o: Options{Name: "main", URL: "http://x", Auth: Auth{Type: AuthHeader, Header: "api-key"}}, want: "secret"},
		{name: "token_file_no_path", o: Options{Name: "main", URL: "http://x", Auth: Auth{Type: AuthTokenFile}}, want: "path"},
		{name: "tls_over_http", o: Options{Name: "main", URL: "http://x", TLS: TLS{CAFile: notPEM}}, want: "not https"},
		{name: "ca_missing", o: Options{Name: "main", URL: "https://x", TLS: TLS{CAFile: missing}}, want: "ca_file: open " + missing},
		{name: "ca_not_pem", o: Options{Name: "main", URL: "https://x", TLS: TLS{CAFile: notPEM}}, want: "ca_file " + notPEM + ": no PEM"},
		{name: "cert_without_key", o: Options{Name: "main", URL: "https://x", TLS: TLS{CertFile: notPEM}}, want: "without key_file"},
		{name: "key_without_cert", o: Options{Name: "main", URL: "https://x", TLS: TLS{KeyFile: notPEM}}, want: "without cert_file"},
		{name: "cert_missing", o: Options{Name: "main", URL: "https://x", TLS: TLS{CertFile: missing, KeyFile: notPEM}}, want: "cert_file: open " + missing},
		{name: "key_missing", o: Options{Name: "main", URL: "https://x", TLS: TLS{CertFile: notPEM, KeyFile: missing}}, want: "key_file: open " + missing},
		{name: "pair_unreadable", o: Options{Name: "main", URL: "https://x", TLS: TLS{CertFile: notPEM, KeyFile: notPEM}}, want: "cert_file " + notPEM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.o)
			if err == nil {
				t.Fatalf("New: nil error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %q, want it to contain %q", err, tt.want)
			}
			notContains(t, "error", err.Error(), secret)
		})
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	b, err := New(Options{Name: "main", URL: "https://llm.example.com/v1/?api-version=2024-10-21"})
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "main" || b.timeout != DefaultTimeout || b.idleTimeout != DefaultIdleTimeout {
		t.Errorf("name %q, timeout %v, idle %v", b.Name(), b.timeout, b.idleTimeout)
	}
	if b.chatURL != "https://llm.example.com/v1/chat/completions?api-version=2024-10-21" ||
		b.embeddingsURL != "https://llm.example.com/v1/embeddings?api-version=2024-10-21" {
		t.Errorf("urls %q, %q", b.chatURL, b.embeddingsURL)
	}
	tr := b.transport
	if tr == nil || tr.MaxIdleConnsPerHost != maxIdleConnsPerHost || !tr.ForceAttemptHTTP2 ||
		tr.ResponseHeaderTimeout != DefaultTimeout || tr.Proxy != nil || tr.DisableCompression {
		t.Errorf("transport %+v", tr)
	}
}

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type testPKI struct {
	caFile, clientCert, clientKey string
	caPool                        *x509.CertPool
	server                        tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	writePEM := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "flexway test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		key := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	p := &testPKI{caPool: x509.NewCertPool()}
	p.caPool.AddCert(ca)
	p.caFile = writePEM("ca.pem", "CERTIFICATE", caDER)
	serverDER, serverKey := issue(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	p.server = tls.Certificate{Certificate: [][]byte{serverDER}, PrivateKey: serverKey}
	clientDER, clientKey := issue(3, "flexway-client", x509.ExtKeyUsageClientAuth, nil)
	p.clientCert = writePEM("client.pem", "CERTIFICATE", clientDER)
	keyDER, err := x509.MarshalPKCS8PrivateKey(clientKey)
	if err != nil {
		t.Fatal(err)
	}
	p.clientKey = writePEM("client-key.pem", "PRIVATE KEY", keyDER)
	return p
}

// newTLSUpstream starts an https upstream (HTTP/2 enabled) with the PKI's
// server certificate, requiring a client certificate when mutual.
func newTLSUpstream(t *testing.T, p *testPKI, mutual bool) *upstream {
	t.Helper()
	u := newUnstartedUpstream(t, serveCompletion)
	u.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}}
	if mutual {
		u.TLS.ClientAuth = tls.RequireAndVerifyClientCert
		u.TLS.ClientCAs = p.caPool
	}
	u.EnableHTTP2 = true
	u.StartTLS()
	return u
}

func TestTLSWithCAFile(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	u := newTLSUpstream(t, p, false)

	b := newBackend(t, u, Options{TLS: TLS{CAFile: p.caFile}})
	for range 3 {
		if _, _, err := b.CreateChatCompletion(context.Background(), chatRequest("m")); err != nil {
			t.Fatal(err)
		}
	}
	if got := u.last(t); got.Proto != 2 {
		t.Errorf("upstream saw HTTP/%d, want HTTP/2", got.Proto)
	}
	if n := u.newConns.Load(); n != 1 {
		t.Errorf("%d connections for 3 calls, want 1", n)
	}

	// Without the CA, the server is not trusted.
	untrusting := newBackend(t, u, Options{})
	_, _, err := untrusting.CreateChatCompletion(context.Background(), chatRequest("m"))
	wantFault(t, err, faults.UpstreamError)
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	u := newTLSUpstream(t, p, true)

	b := newBackend(t, u, Options{TLS: TLS{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey}})
	if _, _, err := b.CreateChatCompletion(context.Background(), chatRequest("m")); err != nil {
		t.Fatal(err)
	}
	if got := u.last(t); got.Client != "flexway-client" {
		t.Errorf("upstream saw client certificate %q, want flexway-client", got.Client)
	}

	// Without a client certificate the handshake fails.
	n := len(u.requests())
	noCert := newBackend(t, u, Options{TLS: TLS{CAFile: p.caFile}})
	_, _, err := noCert.CreateChatCompletion(context.Background(), chatRequest("m"))
	wantFault(t, err, faults.UpstreamError)
	if len(u.requests()) != n {
		t.Error("a request without a client certificate reached the upstream")
	}
}

// TestTLSTransportOption: with Options.Transport the TLS files are still
// checked.
func TestTLSTransportOption(t *testing.T) {
	t.Parallel()
	_, err := New(Options{Name: "main", URL: "https://x", TLS: TLS{CAFile: filepath.Join(t.TempDir(), "nope.pem")}, Transport: http.DefaultTransport})
	if err == nil || !strings.Contains(err.Error(), "nope.pem") {
		t.Errorf("New: %v, want the CA file named", err)
	}
}
