package grpcproxy_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/flexway/flexway/server/grpcproxy"
)

// pki is a test CA with a server certificate for upstream.test and a
// client certificate, all written as PEM files.
type pki struct {
	caFile, clientCert, clientKey string
	pool                          *x509.CertPool
	server                        tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage, dns ...string) (certPEM, keyPEM []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"}, DNSNames: dns,
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	sc, sk := leaf(2, x509.ExtKeyUsageServerAuth, "upstream.test")
	cc, ck := leaf(3, x509.ExtKeyUsageClientAuth)
	server, err := tls.X509KeyPair(sc, sk)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{
		caFile:     writeFile(t, "ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})),
		clientCert: writeFile(t, "client.pem", cc),
		clientKey:  writeFile(t, "client-key.pem", ck),
		pool:       x509.NewCertPool(),
		server:     server,
	}
	p.pool.AddCert(ca)
	return p
}

func TestBackendMutualTLS(t *testing.T) {
	pk := newPKI(t)
	up := newUpstream()
	addr := startUpstream(t, up, tlsCreds(&tls.Config{
		Certificates: []tls.Certificate{pk.server},
		ClientCAs:    pk.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}))
	cases := []struct {
		name string
		tls  *grpcproxy.TLS
		want codes.Code
	}{
		{"mutual TLS", &grpcproxy.TLS{CAFile: pk.caFile, CertFile: pk.clientCert, KeyFile: pk.clientKey, ServerName: "upstream.test"}, codes.OK},
		{"no client certificate", &grpcproxy.TLS{CAFile: pk.caFile, ServerName: "upstream.test"}, codes.Unavailable},
		{"server not trusted", &grpcproxy.TLS{CertFile: pk.clientCert, KeyFile: pk.clientKey, ServerName: "upstream.test"}, codes.Unavailable},
		{"wrong server name", &grpcproxy.TLS{CAFile: pk.caFile, CertFile: pk.clientCert, KeyFile: pk.clientKey, ServerName: "other.test"}, codes.Unavailable},
		{"plaintext", nil, codes.Unavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := routed(t, addr)
			o.Backends["up"] = grpcproxy.Backend{Target: addr, TLS: c.tls}
			f := startFront(t, o)
			before := up.calls.Load()
			resp, err := f.client.UnaryCall(ctxT(t), &testpb.SimpleRequest{ResponseSize: 10})
			if code := status.Code(err); code != c.want {
				t.Fatalf("code = %v (%v), want %v", code, err, c.want)
			}
			if c.want != codes.OK {
				if up.calls.Load() != before {
					t.Error("the upstream served a call over a refused connection")
				}
				return
			}
			if len(resp.GetPayload().GetBody()) != 10 || up.calls.Load() != before+1 {
				t.Errorf("response %d bytes, upstream calls %d", len(resp.GetPayload().GetBody()), up.calls.Load()-before)
			}
		})
	}
}
