package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Secret is a reference to a secret value, never the value itself:
// "env:NAME" (an environment variable) or "file:PATH" (a file's content
// without its trailing newline; a relative PATH is resolved against the
// configuration file's directory by [Load]). An inline value is refused at
// decode with [ErrInlineSecret].
//
// [Load] resolves the server admin key, the audit hash key and backend auth
// secrets once and keeps the value inside the Secret, so a later
// [Secret.Resolve] returns what was checked at load. API and relay keys are
// resolved at load too, but only their SHA-256 is kept ([APIKey.Hash]).
//
// String, GoString, MarshalYAML and MarshalText give the reference only: a
// Secret never prints its value. The zero Secret is "not configured".
type Secret struct {
	ref    string
	value  string
	loaded bool
}

// ParseSecret checks a reference ("env:NAME" or "file:PATH") and returns it
// as an unresolved Secret. An empty string gives the zero Secret. Any other
// string fails with [ErrInlineSecret]; the error does not repeat it.
func ParseSecret(ref string) (Secret, error) {
	if ref == "" {
		return Secret{}, nil
	}
	if name, ok := strings.CutPrefix(ref, "env:"); ok {
		if !validEnvName(name) {
			// The text after env: is not echoed: it may be a value.
			return Secret{}, fmt.Errorf("%w (after env: comes a variable name: letters, digits and _)", ErrInlineSecret)
		}
		return Secret{ref: ref}, nil
	}
	if path, ok := strings.CutPrefix(ref, "file:"); ok && path != "" {
		return Secret{ref: ref}, nil
	}
	return Secret{}, ErrInlineSecret
}

func validEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// Ref returns the reference, e.g. "env:MAIN_TOKEN"; "" for the zero Secret.
func (s Secret) Ref() string { return s.ref }

// IsZero reports whether no secret is configured.
func (s Secret) IsZero() bool { return s.ref == "" }

// Resolve returns the secret's value: the value read at load when [Load]
// resolved it, else the environment variable or the file read now (trailing
// "\n" and "\r\n" removed). It fails, wrapping [ErrSecretUnavailable], when
// the variable is not set or empty, or the file cannot be read or is empty;
// the error names the variable or file, never a value. The zero Secret
// resolves to an error too.
func (s Secret) Resolve() (string, error) {
	if s.loaded {
		return s.value, nil
	}
	if name, ok := strings.CutPrefix(s.ref, "env:"); ok {
		v, set := os.LookupEnv(name)
		switch {
		case !set:
			return "", &unavailableError{msg: "env " + name + " is not set"}
		case v == "":
			return "", &unavailableError{msg: "env " + name + " is empty"}
		}
		return v, nil
	}
	if path, ok := strings.CutPrefix(s.ref, "file:"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return "", &unavailableError{msg: "file " + path + ": " + err.Error(), cause: err}
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", &unavailableError{msg: "file " + path + " is empty"}
		}
		return v, nil
	}
	return "", &unavailableError{msg: "no secret configured"}
}

// unavailableError is a [Secret.Resolve] failure: errors.Is matches
// [ErrSecretUnavailable] and the cause, if any.
type unavailableError struct {
	msg   string
	cause error
}

func (e *unavailableError) Error() string        { return e.msg }
func (e *unavailableError) Unwrap() error        { return e.cause }
func (e *unavailableError) Is(target error) bool { return target == ErrSecretUnavailable }

// load resolves s and keeps the value, so that Resolve returns it later.
func (s *Secret) load() error {
	if s.IsZero() || s.loaded {
		return nil
	}
	v, err := s.Resolve()
	if err != nil {
		return err
	}
	s.value, s.loaded = v, true
	return nil
}

// resolvePath makes a relative "file:" reference absolute under dir.
func (s *Secret) resolvePath(dir string) {
	if path, ok := strings.CutPrefix(s.ref, "file:"); ok && !filepath.IsAbs(path) {
		s.ref = "file:" + filepath.Join(dir, path)
	}
}

// String returns the reference, never the value.
func (s Secret) String() string { return s.ref }

// GoString returns config.Secret("<reference>"), never the value.
func (s Secret) GoString() string { return fmt.Sprintf("config.Secret(%q)", s.ref) }

// MarshalText returns the reference, never the value.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.ref), nil }

// MarshalYAML implements [yaml.Marshaler]: the reference, never the value.
func (s Secret) MarshalYAML() (any, error) { return s.ref, nil }

// UnmarshalYAML implements [yaml.Unmarshaler] with [ParseSecret].
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a reference such as env:NAME, got %s", nodeKind(n))
	}
	if n.ShortTag() != "!!str" {
		return ErrInlineSecret
	}
	v, err := ParseSecret(n.Value)
	if err != nil {
		return err
	}
	*s = v
	return nil
}
