package jsonschema

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	js "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// ErrRemoteRef is wrapped by a compile error when the schema references a
// document that would have to be fetched: another URL, or (for schemas not
// read from a file) a local file. Nothing is ever fetched.
var ErrRemoteRef = errors.New("references a document that is not fetched")

// ErrNotJSON is wrapped by [Schema.Validate]'s error when the text is not
// exactly one JSON value (garbage, two values, nothing).
var ErrNotJSON = errors.New("not JSON")

// Schema is a compiled JSON Schema. It is safe for concurrent use.
type Schema struct {
	s *js.Schema
}

// inlineURL is the base URL of a schema given as a value: a relative $ref
// resolves under it, to a URL that is refused (never fetched).
const inlineURL = "https://flexway.invalid/schema.json"

// Compile compiles a schema given as a decoded YAML or JSON value
// (map[string]any, []any, string, bool, numbers: what yaml.v3 or
// encoding/json decode into an any). A boolean schema is valid (true
// accepts everything, false nothing). Its error says why the schema does
// not compile, wrapping [ErrRemoteRef] for a reference that would have to
// be fetched.
func Compile(v any) (*Schema, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("schema is not a JSON value: %w", err)
	}
	return compileJSON(raw, inlineURL, false)
}

// CompileFile compiles the schema in the JSON file at path (a rule's
// `schema: file:…`, without the prefix). Its $refs may name other local
// files, relative to it; never a URL ([ErrRemoteRef]). Its error names the
// path.
func CompileFile(path string) (*Schema, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("schema file %s: %w", path, err)
	}
	raw, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("schema file %s: %w", path, err)
	}
	u := (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
	s, err := compileJSON(raw, u, true)
	if err != nil {
		return nil, fmt.Errorf("schema file %s: %w", path, err)
	}
	return s, nil
}

// CompileJSON compiles the schema whose JSON text is raw, through the
// cache: the same bytes compiled again return the same *Schema (or the
// same error) without compiling. raw is not retained.
func CompileJSON(raw []byte) (*Schema, error) {
	if len(raw) > maxCachedBytes {
		return compileJSON(raw, inlineURL, false)
	}
	key := sha256.Sum256(raw)
	if e, ok := cache.get(key); ok {
		return e.s, e.err
	}
	s, err := compileJSON(raw, inlineURL, false)
	cache.put(key, entry{s: s, err: err})
	return s, err
}

// compileJSON compiles raw as the resource at base; files says whether
// file: references may be loaded.
func compileJSON(raw []byte, base string, files bool) (*Schema, error) {
	if err := checkBounds(raw); err != nil {
		return nil, err
	}
	doc, err := js.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	c := js.NewCompiler()
	c.UseLoader(loader{files: files})
	if err := c.AddResource(base, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(base)
	if err != nil {
		return nil, compileError(err)
	}
	return &Schema{s: s}, nil
}

// compileError shortens the library's error for a refused load.
func compileError(err error) error {
	if le, ok := errors.AsType[*js.LoadURLError](err); ok {
		if errors.Is(le.Err, ErrRemoteRef) {
			return fmt.Errorf("schema %w: %s", ErrRemoteRef, redact(le.URL))
		}
	}
	return fmt.Errorf("schema does not compile: %w", err)
}

// redact is a URL without user info and query.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, Opaque: u.Opaque}).String()
}

// loader is the compiler's [js.URLLoader]: it fetches nothing; with files
// set it reads file: URLs.
type loader struct{ files bool }

// Load implements [js.URLLoader].
func (l loader) Load(u string) (any, error) {
	if l.files && strings.HasPrefix(u, "file:") {
		return js.FileLoader{}.Load(u)
	}
	return nil, ErrRemoteRef
}

// Violation is [Schema.Validate]'s error for JSON that does not validate:
// where (Location, a JSON pointer into the text, "" for the whole value)
// and which keyword failed (Keyword, a path into the schema's keywords
// such as "required" or "properties/age/type", from the failing
// subschema), with Detail a short explanation taken from the schema only
// ("missing property \"id\"", "got string, want integer"), or "".
type Violation struct {
	Location string
	Keyword  string
	Detail   string
}

// Error is "at <location>: <keyword>[: <detail>]", at most ~300 bytes.
func (v *Violation) Error() string {
	loc := v.Location
	if loc == "" {
		loc = "(root)"
	}
	s := "at " + clip(loc, maxLocation) + ": " + v.Keyword
	if v.Detail != "" {
		s += ": " + v.Detail
	}
	return s
}

// maxLocation bounds the location written in an error, in bytes.
const maxLocation = 120

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Validate reports whether text is exactly one JSON value (surrounding
// whitespace allowed) valid against s: nil when it is; an error wrapping
// [ErrNotJSON] (with the byte offset where parsing failed) when it is not
// JSON; a [*Violation] when it does not validate. Neither quotes the text.
// Numbers are compared exactly (json.Number). Time linear in len(text)
// for schemas without nested applicators.
func (s *Schema) Validate(text string) error {
	v, err := decode(text)
	if err != nil {
		return err
	}
	err = s.s.Validate(v)
	if err == nil {
		return nil
	}
	ve, ok := errors.AsType[*js.ValidationError](err)
	if !ok {
		return fmt.Errorf("validation failed")
	}
	return violation(ve)
}

// decode parses text as exactly one JSON value with exact numbers.
func decode(text string) (any, error) {
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		if se, ok := errors.AsType[*json.SyntaxError](err); ok {
			return nil, fmt.Errorf("%w (byte %d)", ErrNotJSON, se.Offset)
		}
		if err == io.EOF {
			return nil, fmt.Errorf("%w (empty)", ErrNotJSON)
		}
		return nil, fmt.Errorf("%w (byte %d)", ErrNotJSON, d.InputOffset())
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w (more than one value, byte %d)", ErrNotJSON, d.InputOffset())
	}
	return v, nil
}

// violation describes the first leaf of the library's error tree: the
// most specific failure.
func violation(ve *js.ValidationError) *Violation {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	v := &Violation{Location: pointer(ve.InstanceLocation), Keyword: strings.Join(ve.ErrorKind.KeywordPath(), "/")}
	if v.Keyword == "" {
		v.Keyword = "schema"
	}
	// Details from the schema only: never an instance value.
	switch k := ve.ErrorKind.(type) {
	case *kind.Type:
		v.Detail = "got " + k.Got + ", want " + strings.Join(k.Want, " or ")
	case *kind.Required:
		v.Detail = clip("missing "+quoteAll(k.Missing), 160)
	case *kind.FalseSchema:
		v.Detail = "not allowed"
	}
	return v
}

// quoteAll is the names quoted, comma separated.
func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// pointer is the JSON pointer (RFC 6901) of tokens.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		b.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return b.String()
}

// The bounds of a schema compiled: a request's schema is the caller's, and
// the library's compile time grows faster than its nesting (the attack
// pass: 800 levels of properties, 30 KB, took 4.6 s of CPU; 1,200 levels
// 14.5 s). OpenAI's structured outputs allow 10 levels of schema nesting,
// about 20 to 30 levels of JSON.
const (
	// MaxDepth is the deepest nesting of objects and arrays a schema may
	// have, in JSON levels.
	MaxDepth = 64
	// MaxBytes is the largest schema compiled, in bytes.
	MaxBytes = 256 << 10
)

// ErrTooComplex is the error for a schema past MaxDepth or MaxBytes.
var ErrTooComplex = errors.New("schema too large or too deeply nested")

// checkBounds refuses raw past MaxBytes or MaxDepth (counted outside
// strings), in one pass.
func checkBounds(raw []byte) error {
	if len(raw) > MaxBytes {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooComplex, len(raw), MaxBytes)
	}
	depth, inString, escaped := 0, false, false
	for _, c := range raw {
		switch {
		case inString:
			if escaped {
				escaped = false
			} else if c == '\\' {
				escaped = true
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > MaxDepth {
				return fmt.Errorf("%w: nested deeper than %d levels", ErrTooComplex, MaxDepth)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}
