package config

import "path/filepath"

// Credentials is a backend's pool of credentials
// (ai.backends.<name>.credentials), written instead of auth on kinds openai,
// anthropic, gemini and relay: each call picks one key; a key its upstream
// answers 429 rests until its Retry-After (else 60 s), one answered 401,
// 402 or 403 is set aside until restart or reload, and the call moves to
// the next key at once.
type Credentials struct {
	// Strategy is round_robin (the default: N calls over K keys, each
	// within one of N/K) or weighted (in proportion to each key's weight).
	Strategy CredentialStrategy `yaml:"strategy"`
	// Keys are the pool's credentials, 1 to 64, names unique.
	Keys []CredentialKey `yaml:"keys"`

	// authWritten records that the file also wrote the backend's auth key,
	// which a pool replaces.
	authWritten bool
}

// CredentialKey is one key of a [Credentials] pool
// (ai.backends.<name>.credentials.keys[i]).
type CredentialKey struct {
	// Name names the key in the admin API, logs and metrics (label
	// credential), never its value. Required, unique in the pool.
	Name string `yaml:"name"`
	// Auth is the key's credential, the same block as a backend's auth:
	// bearer, header or token_file (re-read at every call); none is
	// refused.
	Auth Auth `yaml:"auth"`
	// Weight is the key's share under strategy weighted: at least 1,
	// default 1 when the key is absent. Ignored (with a warning when not
	// 1) under round_robin.
	Weight int `yaml:"weight"`
}

// CredentialStrategy is how a pool spreads calls over its keys
// (ai.backends.*.credentials.strategy).
type CredentialStrategy string

// The credential strategies.
const (
	// StrategyRoundRobin spreads calls evenly.
	StrategyRoundRobin CredentialStrategy = "round_robin"
	// StrategyWeighted spreads calls by weight.
	StrategyWeighted CredentialStrategy = "weighted"
)

// Valid reports whether s is a known strategy.
func (s CredentialStrategy) Valid() bool { return s == StrategyRoundRobin || s == StrategyWeighted }

// maxCredentialKeys is the most keys a pool holds (server/backends/credentials.MaxKeys).
const maxCredentialKeys = 64

// maxCredentialWheel bounds the sum of a weighted pool's weights after
// division by their common divisor (server/backends/credentials.MaxWheel).
const maxCredentialWheel = 10000

// deriveCredentials sets the pool's defaults of backend b at bpath:
// strategy round_robin, each absent weight 1 (a written weight: 0 stays,
// for validation to refuse); and records whether auth was written too.
func (b *Backend) deriveCredentials(bpath string, written func(path string) bool) {
	c := b.Credentials
	if c == nil {
		return
	}
	setZero(&c.Strategy, StrategyRoundRobin)
	c.authWritten = written(bpath + ".auth")
	for i := range c.Keys {
		k := &c.Keys[i]
		setZero(&k.Auth.Type, AuthNone)
		if k.Weight == 0 && !written(indexPath(bpath+".credentials.keys", i)+".weight") {
			k.Weight = 1
		}
	}
}

// resolveCredentialPaths makes the pool's token files and "file:" secret
// references absolute under dir.
func (b *Backend) resolveCredentialPaths(dir string) {
	if b.Credentials == nil {
		return
	}
	for i := range b.Credentials.Keys {
		a := &b.Credentials.Keys[i].Auth
		if a.Path != "" && !filepath.IsAbs(a.Path) {
			a.Path = filepath.Join(dir, a.Path)
		}
		a.Secret.resolvePath(dir)
	}
}

// loadCredentialSecrets resolves the secret of every key of the pool of
// backend bpath, each problem at its key path.
func (b *Backend) loadCredentialSecrets(col *collector, bpath string) {
	if b.Credentials == nil {
		return
	}
	for i := range b.Credentials.Keys {
		s := &b.Credentials.Keys[i].Auth.Secret
		if err := s.load(); err != nil {
			col.add(indexPath(bpath+".credentials.keys", i)+".auth.secret", err)
		}
	}
}

// checkCredentialTokenFiles warns, as for auth, about each key's token
// file that canOpen refuses.
func (b *Backend) checkCredentialTokenFiles(col *collector, bpath string, canOpen func(path string) error) {
	if b.Credentials == nil {
		return
	}
	for i, k := range b.Credentials.Keys {
		if k.Auth.Type != AuthTokenFile || k.Auth.Path == "" {
			continue
		}
		if err := canOpen(k.Auth.Path); err != nil {
			col.warnf(indexPath(bpath+".credentials.keys", i)+".auth.path",
				"the token file cannot be read now (%w): this key fails every call it is picked for until it can; ignore this if it is mounted later", err)
		}
	}
}
