package grpcproxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	"github.com/flexway/flexway/server/backends/clienttls"
)

// Options configures a [Proxy]; the gateway converts ai.grpc and the kind:
// grpc entries of ai.backends into it.
type Options struct {
	// DescriptorSets are paths of FileDescriptorSet files (`buf build -o
	// x.binpb`, or protoc --descriptor_set_out, imports included or not),
	// read by [New]. Errors about the i-th name ai.grpc.descriptor_sets[i].
	DescriptorSets []string
	// Services maps a full service name ("acme.ocr.v1.OcrService") to the
	// name of the backend in Backends that serves it.
	Services map[string]string
	// Backends are the gRPC backends by name; only those that Services
	// names are checked and dialled.
	Backends map[string]Backend
	// MaxMessageBytes bounds each relayed message in both directions, in
	// bytes; 0 means 4 MiB (gRPC's default). A larger message fails the
	// call with RESOURCE_EXHAUSTED.
	MaxMessageBytes int
}

// Backend is one upstream gRPC server.
type Backend struct {
	// Name is the backend's name in errors and in the call's outcome; empty
	// means its key in [Options.Backends], and if set it must equal the key.
	Name string
	// Target is the gRPC target, "dns:///host:port" or "host:port" (the
	// dns resolver is the default scheme). Required.
	Target string
	// External says the backend is outside the organisation: a sensitive
	// call to one of its services is refused (PERMISSION_DENIED,
	// sensitive_no_internal_backend) without reaching it.
	External bool
	// TLS, when set, makes the connection TLS (mutual when it carries a
	// client certificate); nil means plaintext.
	TLS *TLS
	// AuthHeader and AuthValue are the metadata pair that authenticates the
	// gateway to the backend, e.g. "authorization" and "Bearer <secret>"
	// (the secret already resolved). Both empty: no credential. The header
	// name is case-insensitive.
	AuthHeader, AuthValue string
	// TokenFile, when set, is a file holding a bearer token, re-read at
	// every call and sent as "Bearer <token>" (spaces trimmed) under
	// AuthHeader, "authorization" when AuthHeader is empty. It excludes
	// AuthValue. A call whose token cannot be read fails with UNAVAILABLE
	// (upstream_error) before reaching the backend.
	TokenFile string
	// IdentityHeaders are the metadata keys under which the caller's
	// identity is sent to the backend.
	IdentityHeaders IdentityHeaders
}

// IdentityHeaders names the metadata keys (case-insensitive) that carry the
// caller's identity to a backend; an empty name means that part is not sent.
// Nothing else of the caller's metadata is ever sent upstream.
type IdentityHeaders struct {
	// Tenant carries the caller's tenant, when known.
	Tenant string
	// Agent carries the caller's agent, when known (it may be empty).
	Agent string
	// Sensitive carries "true" for a sensitive call and "false" otherwise.
	Sensitive string
}

// TLS is the client TLS of a backend: PEM file paths, read by [New].
type TLS struct {
	// CAFile, optional, is a PEM bundle trusted instead of the system
	// roots.
	CAFile string
	// CertFile, with KeyFile, is the client certificate presented to the
	// backend (mutual TLS); both or neither.
	CertFile string
	// KeyFile is the PEM private key of CertFile.
	KeyFile string
	// ServerName, optional, overrides the name verified in the backend's
	// certificate (default: the target's host).
	ServerName string
}

// defaultMaxMessageBytes is gRPC's default receive limit.
const defaultMaxMessageBytes = 4 << 20

// config builds the client tls.Config; errors name the file.
func (t *TLS) config() (*tls.Config, error) {
	return clienttls.Files{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}.Config()
}

// metadataKey returns name as a metadata key, lowercased, or an error when
// it is not one a backend may receive: gRPC's reserved keys, pseudo
// headers, binary keys, and characters outside [0-9a-z-_.].
func metadataKey(name string) (string, error) {
	k := strings.ToLower(name)
	if k == "" {
		return "", errors.New("empty header name")
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", fmt.Errorf("header name %q: invalid character %q", name, c)
		}
	}
	switch {
	case strings.HasPrefix(k, "grpc-"), k == "content-type", k == "te", k == "user-agent":
		return "", fmt.Errorf("header name %q is reserved by gRPC", name)
	case strings.HasSuffix(k, "-bin"):
		return "", fmt.Errorf("header name %q is a binary header", name)
	}
	return k, nil
}
