package config

import (
	"encoding/hex"
	"strings"
)

func (id Identity) validate(col *collector) {
	names := map[string]string{}    // api key name → its path
	hashes := map[[32]byte]string{} // key hash → its path, across keys and relays
	checkHash := func(path string, sum [32]byte) {
		if sum == ([32]byte{}) {
			return
		}
		if first, dup := hashes[sum]; dup {
			col.errorf(path, "same key as %s", first)
			return
		}
		hashes[sum] = path
	}
	for i, k := range id.APIKeys {
		path := indexPath("identity.api_keys", i)
		checkName(col, path, k.Name, names)
		checkKey(col, path, k.KeySHA256, k.Key)
		if k.Tenant == "" {
			col.errorf(path+".tenant", "required: the tenant this key's calls are billed to")
		}
		checkHash(path, k.Hash())
	}
	relayNames := map[string]string{}
	for i, r := range id.Relays {
		path := indexPath("identity.relays", i)
		checkName(col, path, r.Name, relayNames)
		checkKey(col, path, r.KeySHA256, r.Key)
		checkHeaders(col, path+".identity_headers", r.IdentityHeaders)
		if r.IdentityHeaders.Tenant == "" {
			col.errorf(path+".identity_headers.tenant", "required: the header carrying the caller's tenant")
		}
		checkHash(path, r.Hash())
	}
}

func checkName(col *collector, path, name string, seen map[string]string) {
	if name == "" {
		col.errorf(path+".name", "required")
		return
	}
	if first, dup := seen[name]; dup {
		col.errorf(path+".name", "duplicate name %q (also %s)", name, first)
		return
	}
	seen[name] = path
}

func checkKey(col *collector, path, sum string, key Secret) {
	switch {
	case sum != "" && !key.IsZero():
		col.errorf(path, "set key_sha256 or key, not both")
	case sum == "" && key.IsZero():
		col.errorf(path, "one of key_sha256 or key is required")
	case sum != "":
		if b, err := hex.DecodeString(sum); err != nil || len(b) != 32 {
			col.errorf(path+".key_sha256", "want 64 hex digits (a SHA-256), got %d characters", len(sum))
		}
	}
}

// checkHeaders checks that every header name given is an HTTP token.
func checkHeaders(col *collector, path string, h IdentityHeaders) {
	checkHeader(col, path+".tenant", h.Tenant)
	checkHeader(col, path+".agent", h.Agent)
	checkHeader(col, path+".sensitive", h.Sensitive)
}

func checkHeader(col *collector, path, name string) {
	if name != "" && !isToken(name) {
		col.errorf(path, "%q is not a valid header name", name)
	}
}

// isToken reports whether s is an RFC 9110 token, as header names are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	return true
}
