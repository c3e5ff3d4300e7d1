// Package clienttls builds the client TLS configuration a backend (an
// OpenAI-compatible upstream, a relay, a gRPC specialised model) dials with,
// from the PEM files its configuration names.
package clienttls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files are a backend's TLS files; every field is optional.
type Files struct {
	// CAFile is a PEM bundle trusted instead of the system roots.
	CAFile string
	// CertFile, with KeyFile, is the client certificate chain for mutual
	// TLS; both or neither.
	CertFile string
	// KeyFile is the PEM private key of CertFile.
	KeyFile string
	// ServerName overrides the name verified in the backend's certificate
	// (default: the host dialled).
	ServerName string
}

// Config reads the files and returns the client configuration: TLS 1.2 or
// later, the CA bundle as roots, the key pair as client certificate. Each
// file is read on its own, so that an error names the one that is missing,
// unreadable or not PEM, with the configuration's key (ca_file, cert_file,
// key_file).
func (f Files) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s: no PEM certificate in it", f.CAFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.CertFile == "" && f.KeyFile == "":
	case f.CertFile == "":
		return nil, errors.New("key_file is set without cert_file")
	case f.KeyFile == "":
		return nil, errors.New("cert_file is set without key_file")
	default:
		certPEM, err := os.ReadFile(f.CertFile)
		if err != nil {
			return nil, fmt.Errorf("cert_file: %w", err)
		}
		keyPEM, err := os.ReadFile(f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("key_file: %w", err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("cert_file %s with key_file %s: %w", f.CertFile, f.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
