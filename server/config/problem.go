package config

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ErrUnknownKey is wrapped by the [Problem] reported for a key that is not
// part of the configuration (a typo, or a key of a later release). Test with
// errors.Is.
var ErrUnknownKey = errors.New("unknown key")

// ErrNotEnforced is wrapped by the [Problem] reported for a section this
// build reads but does not enforce yet (a policy's guardrails,
// prompt_logging or cache): the file is refused rather than loaded with a
// rule silently not applied. Test with errors.Is.
var ErrNotEnforced = errors.New("not enforced by this build")

// ErrInlineSecret is wrapped by the [Problem] reported for a secret written
// inline instead of as a reference. The message never repeats the value.
var ErrInlineSecret = errors.New("secrets are references: env:NAME or file:PATH")

// ErrSecretUnavailable is wrapped by errors of [Secret.Resolve]: the
// environment variable is not set or empty, or the file cannot be read or is
// empty.
var ErrSecretUnavailable = errors.New("secret unavailable")

// Problem is one finding about a configuration: an error, or a warning when
// Warning is set. It implements error; Unwrap gives the cause, so errors.Is
// works with [ErrUnknownKey], [ErrNotEnforced] and [ErrInlineSecret].
type Problem struct {
	// File is the configuration file as given to [Load]; empty for a Config
	// validated in memory.
	File string
	// Line is the 1-based line of the key in File (or of its nearest
	// enclosing key present in the file); 0 when unknown.
	Line int
	// Path is the full key path, e.g. "ai.backends.main.timeout" or
	// "identity.api_keys[1].key"; a map key that is not a plain word is
	// quoted: `ai.grpc.services["acme.ocr.v1.OcrService"]`. Empty for the
	// file as a whole.
	Path string
	// Err says what is wrong; it never contains a secret's value.
	Err error
	// Warning marks a finding that does not stop the configuration from
	// loading.
	Warning bool
}

// Error formats the problem as "file:line: path: message", e.g.
// `flexway.yaml:12: unknown key ai.backends.main.timeuot` or
// `flexway.yaml:21: identity.api_keys[1].key: env GLOBEX_KEY is not set`.
// A warning reads "file:line: warning: path: message".
func (p Problem) Error() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
	}
	if p.Warning {
		b.WriteString("warning: ")
	}
	var uk *unknownKeyError
	switch {
	case errors.As(p.Err, &uk):
		b.WriteString("unknown key ")
		b.WriteString(p.Path)
		if uk.suggest != "" {
			fmt.Fprintf(&b, " (did you mean %s?)", uk.suggest)
		}
	case p.Path != "":
		b.WriteString(p.Path)
		b.WriteString(": ")
		b.WriteString(errString(p.Err))
	default:
		b.WriteString(errString(p.Err))
	}
	return b.String()
}

// Unwrap returns the cause, p.Err.
func (p Problem) Unwrap() error { return p.Err }

func errString(err error) string {
	if err == nil {
		return "invalid"
	}
	return err.Error()
}

// Problems is a list of [Problem] in file order. As an error (what [Load] and
// [Config.Validate] return) it holds errors only, one per line of Error();
// Unwrap exposes each, so errors.Is and errors.As search all of them.
type Problems []Problem

// Error joins the problems, one per line.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns every problem as an error.
func (ps Problems) Unwrap() []error {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return errs
}

// unknownKeyError is the cause of an unknown-key Problem; suggest is the
// closest known key, if any is close.
type unknownKeyError struct{ suggest string }

func (e *unknownKeyError) Error() string {
	if e.suggest != "" {
		return fmt.Sprintf("unknown key (did you mean %s?)", e.suggest)
	}
	return "unknown key"
}

func (e *unknownKeyError) Is(target error) bool { return target == ErrUnknownKey }

// notEnforcedError is the cause of a Problem for a section a later release
// enforces; section names it ("guardrails").
type notEnforcedError struct{ section string }

func (e *notEnforcedError) Error() string {
	return fmt.Sprintf("this build does not enforce a policy's %s yet (a later version will): remove the section, it would not be applied", e.section)
}

func (e *notEnforcedError) Is(target error) bool { return target == ErrNotEnforced }

// collector gathers problems with their key paths.
type collector struct{ problems Problems }

func (c *collector) errorf(path, format string, args ...any) {
	c.problems = append(c.problems, Problem{Path: path, Err: fmt.Errorf(format, args...)})
}

func (c *collector) warnf(path, format string, args ...any) {
	c.problems = append(c.problems, Problem{Path: path, Err: fmt.Errorf(format, args...), Warning: true})
}

func (c *collector) add(path string, err error) {
	c.problems = append(c.problems, Problem{Path: path, Err: err})
}

// split returns the warnings, and the errors as an error (nil when none).
func (ps Problems) split() (warnings Problems, err error) {
	var errs Problems
	for _, p := range ps {
		if p.Warning {
			warnings = append(warnings, p)
		} else {
			errs = append(errs, p)
		}
	}
	if len(errs) > 0 {
		return warnings, errs
	}
	return warnings, nil
}

// sortByLine orders problems by line, keeping the order of equal lines.
// Problems without a line (the whole file) come first.
func (ps Problems) sortByLine() {
	slices.SortStableFunc(ps, func(a, b Problem) int { return cmp.Compare(a.Line, b.Line) })
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// keyPath appends a key to a key path: "ai" + "backends" = "ai.backends". A
// key that is not a plain word is quoted: `services["acme.ocr.v1.Ocr"]`.
func keyPath(parent, key string) string {
	if !plainKey.MatchString(key) {
		return parent + "[" + strconv.Quote(key) + "]"
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// indexPath appends a list index to a key path: "identity.api_keys[1]".
func indexPath(parent string, i int) string {
	return parent + "[" + strconv.Itoa(i) + "]"
}

// parentPath returns the key path enclosing p: "a.b[2]" → "a.b",
// `a["x.y"]` → "a", "a.b" → "a", "a" → "".
func parentPath(p string) string {
	if strings.HasSuffix(p, `"]`) {
		// strconv.Quote escapes every '"', so `["` only opens a quoted key.
		if i := strings.LastIndex(p, `["`); i >= 0 {
			return p[:i]
		}
	}
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndex(p, "["); i >= 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndex(p, "."); i >= 0 {
		return p[:i]
	}
	return ""
}

// within reports whether key path p is base or lies under it.
func within(p, base string) bool {
	if p == base {
		return true
	}
	if base == "" {
		return true
	}
	return strings.HasPrefix(p, base) && (p[len(base)] == '.' || p[len(base)] == '[')
}
