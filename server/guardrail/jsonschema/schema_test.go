package jsonschema

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// personYAML is a rule's inline schema as an operator writes it.
const personYAML = `
type: object
required: [name, age]
properties:
  name: {type: string, pattern: '^[A-Z][a-z]+$'}
  age: {type: integer, minimum: 0}
  tags: {type: array, items: {type: string}}
additionalProperties: false
`

func compileYAML(t *testing.T, src string) *Schema {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		t.Fatal(err)
	}
	s, err := Compile(v)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return s
}

func TestValidateInline(t *testing.T) {
	t.Parallel()
	s := compileYAML(t, personYAML)
	tests := []struct {
		text              string
		wantLoc, wantKw   string
		wantDetail        string
		notJSON, wantPass bool
	}{
		{text: `{"name": "Ada", "age": 36}`, wantPass: true},
		{text: " \n{\"name\": \"Ada\", \"age\": 36, \"tags\": [\"x\"]}\n", wantPass: true},
		{text: `{"name": "Ada"}`, wantKw: "required", wantDetail: `missing "age"`},
		{text: `{"name": "Ada", "age": "36"}`, wantLoc: "/age", wantKw: "type", wantDetail: "got string, want integer"},
		{text: `{"name": "Ada", "age": 36, "tags": ["x", 7]}`, wantLoc: "/tags/1", wantKw: "type", wantDetail: "got number, want string"},
		{text: `{"name": "Ada", "age": -1}`, wantLoc: "/age", wantKw: "minimum"},
		{text: `{"name": "Ada", "age": 1.5}`, wantLoc: "/age", wantKw: "type", wantDetail: "got number, want integer"},
		{text: `[1]`, wantKw: "type", wantDetail: "got array, want object"},
		{text: `{"name": "Ada", "age": 36} {}`, notJSON: true},
		{text: `{"name": "Ada", "age": 36`, notJSON: true},
		{text: ``, notJSON: true},
		{text: "```json\n{\"name\": \"Ada\", \"age\": 36}\n```", notJSON: true},
	}
	for _, tt := range tests {
		err := s.Validate(tt.text)
		switch {
		case tt.wantPass:
			if err != nil {
				t.Errorf("Validate(%q) = %v, want nil", tt.text, err)
			}
		case tt.notJSON:
			if !errors.Is(err, ErrNotJSON) {
				t.Errorf("Validate(%q) = %v, want ErrNotJSON", tt.text, err)
			}
		default:
			v, ok := errors.AsType[*Violation](err)
			if !ok {
				t.Errorf("Validate(%q) = %v, want a *Violation", tt.text, err)
				continue
			}
			if v.Location != tt.wantLoc || v.Keyword != tt.wantKw || v.Detail != tt.wantDetail {
				t.Errorf("Validate(%q) = %+v, want location %q keyword %q detail %q", tt.text, *v, tt.wantLoc, tt.wantKw, tt.wantDetail)
			}
		}
	}
}

// TestErrorsNeverQuoteTheText: a value that fails a pattern, an enum, a
// format-like check or an extra property is never in the error (the
// library's own messages quote it).
func TestErrorsNeverQuoteTheText(t *testing.T) {
	t.Parallel()
	s := compileYAML(t, personYAML)
	const secret = "sk-proj-SECRETSECRET"
	for _, text := range []string{
		`{"name": "` + secret + `", "age": 3}`,
		`{"name": "Ada", "age": 3, "` + secret + `": 1}`,
		`{"name": "Ada", "age": 3, "tags": "` + secret + `"}`,
		`{"name": "Ada", "age": 3` + secret,
		`"` + secret + `"`,
	} {
		err := s.Validate(text)
		if err == nil {
			t.Fatalf("Validate(%q) = nil", text)
		}
		if strings.Contains(err.Error(), "SECRET") {
			t.Errorf("Validate(%q) = %q: quotes the text", text, err)
		}
	}
	// The location is the one place the text's own property names
	// appear, and it is bounded.
	long := strings.Repeat("k", 1000)
	err := compileYAML(t, `{type: object, additionalProperties: {type: integer}}`).Validate(`{"` + long + `": "x"}`)
	if err == nil || len(err.Error()) > 300 {
		t.Errorf("error for a long key: %d bytes: %v", len(err.Error()), err)
	}
}

// TestNoReferenceIsFetched: a $ref or $schema to a URL, a relative
// document or (outside a file schema) a local file is a compile error
// wrapping ErrRemoteRef, and nothing is fetched.
func TestNoReferenceIsFetched(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("schema server hit: %s", r.URL)
		w.Write([]byte(`{"type": "string"}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	local := filepath.Join(dir, "s.json")
	if err := os.WriteFile(local, []byte(`{"type": "string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{
		`{"$ref": "` + srv.URL + `/s.json"}`,
		`{"properties": {"a": {"$ref": "` + srv.URL + `/s.json#/x"}}}`,
		`{"$schema": "` + srv.URL + `/meta.json"}`,
		`{"$ref": "other.json"}`,
		`{"$ref": "file://` + local + `"}`,
		`{"$id": "` + srv.URL + `/base/", "$ref": "s.json"}`,
	} {
		_, err := CompileJSON([]byte(schema))
		if !errors.Is(err, ErrRemoteRef) {
			t.Errorf("CompileJSON(%s) = %v, want ErrRemoteRef", schema, err)
		}
		if _, err := FromResponseFormat(`{"type":"json_schema","json_schema":{"name":"x","schema":` + schema + `}}`); !errors.Is(err, ErrRemoteRef) {
			t.Errorf("FromResponseFormat(%s) = %v, want ErrRemoteRef", schema, err)
		}
	}
	// What resolves inside the schema, and the metaschemas the library
	// embeds, compile.
	for _, schema := range []string{
		`{"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}}`,
		`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}`,
		`{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}`,
	} {
		if _, err := CompileJSON([]byte(schema)); err != nil {
			t.Errorf("CompileJSON(%s) = %v", schema, err)
		}
	}
}

func TestCompileFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("id.json", `{"type": "string", "minLength": 3}`)
	main := write("order.json", `{"type": "object", "required": ["id"], "properties": {"id": {"$ref": "id.json"}}}`)
	s, err := CompileFile(main)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(`{"id": "abc"}`); err != nil {
		t.Errorf("valid order: %v", err)
	}
	v, ok := errors.AsType[*Violation](s.Validate(`{"id": "ab"}`))
	if !ok || v.Location != "/id" || v.Keyword != "minLength" {
		t.Errorf("short id: %+v", v)
	}
	remote := write("remote.json", `{"$ref": "https://example.invalid/s.json"}`)
	if _, err := CompileFile(remote); !errors.Is(err, ErrRemoteRef) || !strings.Contains(err.Error(), remote) {
		t.Errorf("CompileFile(remote ref) = %v, want ErrRemoteRef naming the file", err)
	}
	if _, err := CompileFile(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("CompileFile(missing) = nil")
	}
	if _, err := CompileFile(write("bad.json", `{"type": 12}`)); err == nil {
		t.Error("CompileFile(type 12) = nil")
	}
}

func TestFromResponseFormat(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		``, `null`, `{"type": "text"}`, `{"type": "json_object"}`,
		`{"type": "json_schema", "json_schema": {"name": "x"}}`,
	} {
		s, err := FromResponseFormat(raw)
		if s != nil || err != nil {
			t.Errorf("FromResponseFormat(%s) = %v, %v; want nil, nil", raw, s, err)
		}
	}
	for _, raw := range []string{`[]`, `"json_schema"`, `{"type": "json_schema", "json_schema": {"schema": {"type": 3}}}`} {
		if _, err := FromResponseFormat(raw); err == nil {
			t.Errorf("FromResponseFormat(%s) = nil error", raw)
		}
	}
	const rf = `{"type": "json_schema", "json_schema": {"name": "answer", "strict": true, "schema": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}`
	s, err := FromResponseFormat(rf)
	if err != nil || s == nil {
		t.Fatalf("FromResponseFormat = %v, %v", s, err)
	}
	if err := s.Validate(`{"answer": "42"}`); err != nil {
		t.Errorf("valid answer: %v", err)
	}
	if err := s.Validate(`The answer is 42.`); !errors.Is(err, ErrNotJSON) {
		t.Errorf("prose answer: %v, want ErrNotJSON", err)
	}
	// The same schema again is the cached one.
	again, _ := FromResponseFormat(rf)
	if again != s {
		t.Error("the same response_format compiled twice: not cached")
	}
}

func TestTools(t *testing.T) {
	t.Parallel()
	const tools = `[
		{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}},
		{"type": "function", "function": {"name": "now"}},
		{"type": "custom", "custom": {"name": "free"}}
	]`
	tl, err := FromTools(tools)
	if err != nil {
		t.Fatal(err)
	}
	if err := tl.Validate("get_weather", `{"city": "Lyon"}`); err != nil {
		t.Errorf("valid arguments: %v", err)
	}
	if v, ok := errors.AsType[*Violation](tl.Validate("get_weather", `{"town": "Lyon"}`)); !ok || v.Keyword != "required" {
		t.Errorf("missing city: %v", v)
	}
	if err := tl.Validate("get_weather", `{"city": "Lyon"`); !errors.Is(err, ErrNotJSON) {
		t.Errorf("cut arguments: %v", err)
	}
	if err := tl.Validate("now", `anything`); err != nil {
		t.Errorf("tool without parameters: %v", err)
	}
	for _, name := range []string{"free", "rm_rf"} {
		if err := tl.Validate(name, `{}`); !errors.Is(err, ErrUnknownTool) {
			t.Errorf("Validate(%s) = %v, want ErrUnknownTool", name, err)
		}
	}
	var none *Tools
	if err := none.Validate("x", `{}`); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("nil Tools: %v", err)
	}
	if _, err := FromTools(`{"type": "function"}`); err == nil {
		t.Error("FromTools(object) = nil error")
	}
}

func TestLRUBounded(t *testing.T) {
	t.Parallel()
	c := newLRU(3)
	key := func(i byte) [sha256.Size]byte { return [sha256.Size]byte{i} }
	for i := byte(0); i < 3; i++ {
		c.put(key(i), entry{err: errors.New(string('a' + i))})
	}
	c.get(key(0)) // 0 is now the most recent: 1 goes first
	c.put(key(3), entry{})
	if c.len() != 3 {
		t.Fatalf("len = %d, want 3", c.len())
	}
	if _, ok := c.get(key(1)); ok {
		t.Error("the least recently used entry is still there")
	}
	for _, i := range []byte{0, 2, 3} {
		if _, ok := c.get(key(i)); !ok {
			t.Errorf("entry %d evicted", i)
		}
	}
}

// benchSchema is a response_format schema of typical size (~1 KiB).
const benchSchema = `{"type": "object", "additionalProperties": false, "required": ["id", "items", "total"], "properties": {
	"id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{6}$"},
	"customer": {"type": "object", "properties": {"name": {"type": "string"}, "email": {"type": "string", "format": "email"}}},
	"items": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["sku", "qty"], "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}, "price": {"type": "number"}}}},
	"total": {"type": "number", "minimum": 0},
	"status": {"enum": ["open", "paid", "shipped"]}}}`

func BenchmarkFromResponseFormat(b *testing.B) {
	b.Run("compile", func(b *testing.B) {
		for b.Loop() {
			if _, err := compileJSON([]byte(benchSchema), inlineURL, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		rf := `{"type": "json_schema", "json_schema": {"name": "order", "schema": ` + benchSchema + `}}`
		for b.Loop() {
			if _, err := FromResponseFormat(rf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("validate", func(b *testing.B) {
		s, _ := CompileJSON([]byte(benchSchema))
		text := `{"id": "ABC-123456", "items": [{"sku": "x", "qty": 2, "price": 3.5}, {"sku": "y", "qty": 1}], "total": 8.5, "status": "paid"}`
		for b.Loop() {
			if err := s.Validate(text); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestTooComplex: a schema nested past MaxDepth, or larger than
// MaxBytes, is refused at once with ErrTooComplex, so that a caller's
// response_format cannot spend seconds of CPU on a compile (the attack
// pass: 1,200 levels took 14.5 s); one just inside compiles.
func TestTooComplex(t *testing.T) {
	nest := func(n int) string {
		s := `{"type":"string"}`
		for range n {
			s = `{"type":"object","properties":{"a":` + s + `}}`
		}
		return s
	}
	start := time.Now()
	_, err := CompileJSON([]byte(nest(1200)))
	if !errors.Is(err, ErrTooComplex) {
		t.Fatalf("1,200 levels: %v, want ErrTooComplex", err)
	}
	if d := time.Since(start); d > time.Second { // 14.5 s before; 0.1 s on a loaded run under -race
		t.Errorf("refusing took %v", d)
	}
	if _, err := FromResponseFormat(`{"type":"json_schema","json_schema":{"name":"x","schema":` + nest(1200) + `}}`); !errors.Is(err, ErrTooComplex) {
		t.Errorf("response_format of 1,200 levels: %v", err)
	}
	if _, err := CompileJSON([]byte(nest(MaxDepth/2 - 1))); err != nil {
		t.Errorf("%d levels: %v", MaxDepth/2-1, err)
	}
	big := `{"type":"object","description":"` + strings.Repeat("x", MaxBytes) + `"}`
	if _, err := CompileJSON([]byte(big)); !errors.Is(err, ErrTooComplex) {
		t.Errorf("%d bytes: %v", len(big), err)
	}
	// Brackets inside strings are not nesting.
	if _, err := CompileJSON([]byte(`{"description":"` + strings.Repeat("{[", 100) + `\"{"}`)); err != nil {
		t.Errorf("brackets in a string: %v", err)
	}
}
