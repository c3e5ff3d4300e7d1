package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/flexway/flexway/server/backends/credentials"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/tokenfile"
)

// Credentials is a backend's pool of credentials
// (ai.backends.<name>.credentials), used instead of [Options.Auth].
type Credentials struct {
	// Strategy is [credentials.RoundRobin] (or empty) or
	// [credentials.Weighted].
	Strategy string
	// Keys are the pool's keys, 1 to [credentials.MaxKeys], names unique.
	Keys []CredentialKey
}

// CredentialKey is one key of a [Credentials] pool.
type CredentialKey struct {
	// Name is the key's name, shown by the admin API, logs and metrics
	// instead of its value. Required, unique in the pool.
	Name string
	// Auth is the key's credential, as [Options.Auth]; type none is
	// refused (a pool of no credentials means nothing). A token_file key is
	// re-read at every call.
	Auth Auth
	// Weight is the key's share under [credentials.Weighted], at least 1;
	// ignored by round robin.
	Weight int
}

// The outcomes [Options.CredentialUse] is told, per attempt on a pool's
// key.
const (
	// CredentialServed: the upstream answered a 2xx.
	CredentialServed = "served"
	// CredentialRateLimited: the upstream answered 429; the key rests.
	CredentialRateLimited = "rate_limited"
	// CredentialRefused: the upstream answered 401, 402 or 403; the key is
	// set aside.
	CredentialRefused = "refused"
	// CredentialFailed: any other failure, which ends the attempt as with
	// plain auth: a connection error, a timeout, an unreadable token file,
	// a 5xx or another 4xx, a cancellation.
	CredentialFailed = "failed"
)

// credential is one resolved credential: the fixed header of bearer and
// header, or a token file read at every call.
type credential struct {
	name, value string
	tokenFile   string
}

// header returns the auth header of one call; a token file is read here,
// at every call.
func (c credential) header(backend string) (name, value string, err error) {
	if c.tokenFile == "" {
		return c.name, c.value, nil
	}
	token, err := tokenfile.Read(c.tokenFile)
	if err != nil {
		// The cause names the path, for logs; the message says nothing of
		// the file.
		return "", "", faults.Wrap(faults.UpstreamError, fmt.Errorf("%w: %w", errTokenFile, err), "upstream "+backend+": its token file cannot be used")
	}
	return "Authorization", "Bearer " + token, nil
}

// setCredentials validates o.Auth or o.Credentials (never both) and stores
// the backend's credential or its pool.
func (b *Backend) setCredentials(o Options) error {
	if o.Credentials == nil {
		c, err := parseAuth(o.Auth)
		if err != nil {
			return fmt.Errorf("auth: %w", err)
		}
		b.auth = c
		return nil
	}
	if o.Auth != (Auth{}) && o.Auth.Type != AuthNone {
		return errors.New("auth and credentials are both set: use one or the other")
	}
	keys := make([]credentials.Key, len(o.Credentials.Keys))
	b.keys = make([]credential, len(o.Credentials.Keys))
	for i, k := range o.Credentials.Keys {
		if k.Auth.Type == "" || k.Auth.Type == AuthNone {
			return fmt.Errorf("credentials: keys[%d] (%s): auth type none: a pool's key must be a credential", i, k.Name)
		}
		c, err := parseAuth(k.Auth)
		if err != nil {
			return fmt.Errorf("credentials: keys[%d] (%s): auth: %w", i, k.Name, err)
		}
		b.keys[i] = c
		keys[i] = credentials.Key{Name: k.Name, Weight: k.Weight}
	}
	pool, err := credentials.New(credentials.Options{Backend: o.Name, Strategy: o.Credentials.Strategy, Keys: keys, Log: o.Log})
	if err != nil {
		return err
	}
	b.pool = pool
	b.keyUsed = o.CredentialUse
	return nil
}

// parseAuth validates a and returns its credential.
func parseAuth(a Auth) (credential, error) {
	switch a.Type {
	case "", AuthNone:
	case AuthBearer:
		if a.Secret == "" {
			return credential{}, errors.New("bearer needs a secret")
		}
		if !validHeaderValue(a.Secret) {
			return credential{}, errors.New("the secret contains a character not allowed in a header")
		}
		return credential{name: "Authorization", value: "Bearer " + a.Secret}, nil
	case AuthHeader:
		name := http.CanonicalHeaderKey(a.Header)
		switch {
		case a.Header == "":
			return credential{}, errors.New("header needs a header name")
		case !validHeaderName(a.Header):
			return credential{}, fmt.Errorf("header name %q is not a valid header name", a.Header)
		case reservedHeaders[name]:
			return credential{}, fmt.Errorf("header name %q is set by the backend itself", a.Header)
		case a.Secret == "":
			return credential{}, errors.New("header needs a secret")
		case !validHeaderValue(a.Secret):
			return credential{}, errors.New("the secret contains a character not allowed in a header")
		}
		return credential{name: name, value: a.Secret}, nil
	case AuthTokenFile:
		if a.TokenFile == "" {
			return credential{}, errors.New("token_file needs a path")
		}
		return credential{tokenFile: a.TokenFile}, nil
	default:
		return credential{}, fmt.Errorf("unknown type %q (want none, bearer, header or token_file)", a.Type)
	}
	return credential{}, nil
}

// authHeader reports whether name (canonical) is a header the backend's
// credentials are sent under, the pool's keys included.
func (b *Backend) authHeader(name string) bool {
	if b.auth.name != "" && name == b.auth.name {
		return true
	}
	for _, k := range b.keys {
		if k.name != "" && name == k.name {
			return true
		}
	}
	return false
}

// poolStatus reports whether a pool handles an upstream status itself
// rather than as plain auth would: 429 (the key rests), 401, 402 and 403
// (the key is set aside) — but not a relay's 403, which is its peer
// Flexway's policy refusal of the call, not of the key.
func (b *Backend) poolStatus(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusPaymentRequired:
		return true
	case http.StatusForbidden:
		return b.identity.isZero()
	}
	return false
}

// sendPooled is send over the pool: it picks a key, and on a 429 rests it
// until its Retry-After (seconds or an HTTP date, else
// [credentials.DefaultRest]), on a 401, 402 or 403 sets it aside, and
// sends the same bytes again at once with the next usable key, each key
// at most once per call. Any other answer or failure is plain auth's. No
// usable key left: [faults.RateLimited] with the earliest return as
// Retry-After when one rests, else [faults.UpstreamCredentialsExhausted];
// neither is fallen back from nor counted against the circuit.
func (b *Backend) sendPooled(ctx context.Context, url string, body []byte, accept string) (*exchange, error) {
	var tried uint64
	var unreadable error // the last key skipped for its token file
	for {
		now := time.Now()
		i, ok := b.pool.Pick(now, tried)
		if !ok {
			if unreadable != nil {
				return nil, unreadable
			}
			return nil, b.poolRefusal(now)
		}
		tried |= 1 << i
		ex, resp, err := b.sendWith(ctx, url, body, accept, b.keys[i], true)
		switch {
		case err != nil && errors.Is(err, errTokenFile):
			// This key's file cannot be read here and now: nothing was
			// sent, so the next key is tried (the file is read again on
			// the next call).
			b.used(i, CredentialFailed)
			unreadable = err
		case err != nil:
			b.used(i, CredentialFailed)
			return nil, err
		case ex != nil:
			b.used(i, CredentialServed)
			return ex, nil
		case resp.StatusCode == http.StatusTooManyRequests:
			b.used(i, CredentialRateLimited)
			b.pool.Rest(i, credentials.RestUntil(now, retryAfter(resp.Header.Get("Retry-After"), now)))
		default:
			b.used(i, CredentialRefused)
			b.pool.SetAside(i, resp.StatusCode)
		}
	}
}

// errTokenFile marks a key whose token file could not be read: nothing
// was sent with it.
var errTokenFile = errors.New("token file unreadable")

// used reports one attempt on key i to Options.CredentialUse.
func (b *Backend) used(i int, outcome string) {
	if b.keyUsed != nil {
		b.keyUsed(b.pool.Name(i), outcome)
	}
}

// poolRefusal is the error of a call no key of the pool can serve at now.
func (b *Backend) poolRefusal(now time.Time) *faults.Error {
	if secs, resting := b.pool.Unusable(now); resting {
		return &faults.Error{
			Reason:            faults.RateLimited,
			Message:           "upstream " + b.name + " is rate limiting every credential of the gateway; retry after the Retry-After",
			RetryAfterSeconds: secs,
			Err:               fmt.Errorf("upstream %s: every key of ai.backends.%s.credentials rests after a 429", b.name, b.name),
		}
	}
	return &faults.Error{
		Reason:  faults.UpstreamCredentialsExhausted,
		Message: "the backend refused every credential of the gateway",
		Err:     fmt.Errorf("upstream %s: every key of ai.backends.%s.credentials is set aside after a 401, 402 or 403", b.name, b.name),
	}
}

// Credentials is a snapshot of the pool's keys at now, names and states
// (never values), in configuration order; nil for a backend with plain
// auth.
func (b *Backend) Credentials(now time.Time) []credentials.State {
	if b.pool == nil {
		return nil
	}
	return b.pool.States(now)
}
