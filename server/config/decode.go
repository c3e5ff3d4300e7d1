package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/flexway/flexway/server/tokenfile"
)

// Load reads, decodes, defaults, checks and resolves the configuration file
// at path (see the package documentation for the order).
//
// It returns the configuration and its warnings, or nil, the warnings, and
// an error. The error is [Problems] holding every error found (decode,
// validation and secret resolution, in file order, each with file, line and
// key path), or a plain error when the file cannot be read. Relative paths
// of the result are absolute, resolved against the file's directory.
func Load(path string) (*Config, Problems, error) {
	return loadFile(path, tokenfile.Check)
}

// loadFile is Load, token files being checked by canOpen.
func loadFile(path string, canOpen func(path string) error) (*Config, Problems, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	return load(path, dir, data, canOpen)
}

// load is Load on the file's content; name labels problems.
func load(name, dir string, data []byte, canOpen func(path string) error) (*Config, Problems, error) {
	c := new(Config)
	c.setDefaults()
	d := decoder{lines: map[string]int{}, nulls: map[string]bool{}}
	if err := d.decodeDocument(data, c); err != nil {
		line, err := yamlSyntaxError(err)
		return nil, nil, Problems{{File: name, Line: line, Err: err}}
	}
	c.deriveDefaults(d.written)
	c.resolvePaths(dir)

	var col collector
	c.loadSecrets(&col)
	c.checkTokenFiles(&col, canOpen)
	c.validate(&col)
	problems := d.problems
	// A key that failed to decode kept its default or zero: validating it
	// would only repeat the decode error less clearly.
	// Nor is a warning that a value sets nothing useful when it set a
	// section this build refuses (a policy with only prompt_logging).
	for _, p := range col.problems {
		if !d.failedUnder(p.Path) && !(p.Warning && slices.Contains(d.later, p.Path)) {
			problems = append(problems, p)
		}
	}
	for i := range problems {
		problems[i].File = name
		if problems[i].Line == 0 {
			problems[i].Line = d.lineOf(problems[i].Path)
		}
	}
	problems.sortByLine()
	warnings, err := problems.split()
	if err != nil {
		return nil, warnings, err
	}
	return c, warnings, nil
}

// loadSecrets resolves every secret read at load; token files are not.
func (c *Config) loadSecrets(col *collector) {
	load := func(path string, s *Secret) {
		if err := s.load(); err != nil {
			col.add(path, err)
		}
	}
	load("server.admin_key", &c.Server.AdminKey)
	for i := range c.Identity.APIKeys {
		k := &c.Identity.APIKeys[i]
		if !k.Key.IsZero() {
			v, err := k.Key.Resolve()
			if err != nil {
				col.add(indexPath("identity.api_keys", i)+".key", err)
				continue
			}
			k.hash = hashKey(v)
		}
	}
	for i := range c.Identity.Relays {
		r := &c.Identity.Relays[i]
		if !r.Key.IsZero() {
			v, err := r.Key.Resolve()
			if err != nil {
				col.add(indexPath("identity.relays", i)+".key", err)
				continue
			}
			r.hash = hashKey(v)
		}
	}
	for _, name := range sortedKeys(c.AI.Backends) {
		b := c.AI.Backends[name]
		load(keyPath(keyPath("ai.backends", name), "auth")+".secret", &b.Auth.Secret)
		b.loadCredentialSecrets(col, keyPath("ai.backends", name))
		c.AI.Backends[name] = b
	}
	load("audit.hash_key", &c.Audit.HashKey)
}

// checkTokenFiles warns about every token_file that canOpen refuses: the
// backend would fail every call until the file appears. It is a warning,
// not an error, as the file may be mounted after the configuration is
// checked (a Kubernetes projected token, a secret volume).
func (c *Config) checkTokenFiles(col *collector, canOpen func(path string) error) {
	for _, name := range sortedKeys(c.AI.Backends) {
		b := c.AI.Backends[name]
		b.checkCredentialTokenFiles(col, keyPath("ai.backends", name), canOpen)
		a := b.Auth
		if a.Type != AuthTokenFile || a.Path == "" {
			continue
		}
		if err := canOpen(a.Path); err != nil {
			col.warnf(keyPath(keyPath("ai.backends", name), "auth")+".path",
				"the token file cannot be read now (%w): every call to this backend fails until it can; ignore this if it is mounted later", err)
		}
	}
}

// decoder decodes a yaml.Node tree into Go values strictly: every key must
// be a field (by its yaml tag), every value must fit its field. It records
// the line of every key path it meets and keeps going after an error, so
// that one pass reports all of them.
//
// The YAML library parses (syntax errors, anchors, tags) and decodes each
// scalar; the walk over the tree stays here because the library's own
// strict decoding (KnownFields) reports "line 12: field timeuot not found
// in type config.Backend", with neither the key path nor a near key,
// truncates 30.7 into an integer, and names no key path for a value that
// does not fit.
type decoder struct {
	lines    map[string]int // key path → line of the key (or list item)
	problems Problems
	failed   []string        // key paths whose value did not decode
	nulls    map[string]bool // key paths written as null ("key:"): left at their default
	later    []string        // key paths of values that set a section a later release enforces
}

func (d *decoder) decodeDocument(data []byte, c *Config) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file: all defaults
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return fmt.Errorf("line %d: a second YAML document; the configuration is one document", extra.Line)
	}
	d.decode(&doc, reflect.ValueOf(c).Elem(), "")
	return nil
}

// yamlSyntaxError splits a yaml.v3 syntax error ("yaml: line 3: did not
// find expected key") into its line (0 when none) and the rest.
func yamlSyntaxError(err error) (int, error) {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, err
	}
	n, _ := strconv.Atoi(m[1])
	return n, errors.New(m[2])
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

func (d *decoder) fail(line int, path string, err error) {
	d.problems = append(d.problems, Problem{Line: line, Path: path, Err: err})
	d.failed = append(d.failed, path)
}

// failedUnder reports whether path lies within a key path that failed to
// decode.
func (d *decoder) failedUnder(path string) bool {
	for _, f := range d.failed {
		if within(path, f) {
			return true
		}
	}
	return false
}

// written reports whether the file wrote a value (not null) at key path.
func (d *decoder) written(path string) bool {
	_, ok := d.lines[path]
	return ok && !d.nulls[path]
}

// lineOf returns the line of path, or of its nearest enclosing key that
// the file has; 0 when none.
func (d *decoder) lineOf(path string) int {
	for p := path; p != ""; p = parentPath(p) {
		if n, ok := d.lines[p]; ok {
			return n
		}
	}
	return 0
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// decode decodes n into v, the value at key path.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return
		}
		n = n.Content[0]
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		// "key:" or "key: null" unsets pointers, maps and lists, and leaves
		// any other field at its default.
		d.nulls[path] = true
		switch v.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Slice:
			v.SetZero()
		}
		return
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		if err := v.Addr().Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			d.fail(n.Line, path, err)
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		p := newValue(v.Type().Elem())
		d.decode(n, p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.Slice:
		d.decodeSlice(n, v, path)
	default:
		d.decodeScalar(n, v, path)
	}
}

// newValue returns a pointer to a new T with its defaults set.
func newValue(t reflect.Type) reflect.Value {
	p := reflect.New(t)
	if df, ok := p.Interface().(defaulter); ok {
		df.setDefaults()
	}
	return p
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n.Line, path, fmt.Errorf("expected a mapping, got %s", nodeKind(n)))
		return
	}
	fields := yamlFields(v.Type())
	later, _ := v.Interface().(laterSectioner)
	for _, kv := range d.pairs(n, path) {
		child := keyPath(path, kv.key.Value)
		index, ok := fields[kv.key.Value]
		if !ok {
			if what, ok := laterSection(later, kv.key.Value); ok {
				d.problems = append(d.problems, Problem{Line: kv.key.Line, Path: child,
					Err: &notEnforcedError{section: what}})
				d.later = append(d.later, path)
				continue
			}
			d.problems = append(d.problems, Problem{Line: kv.key.Line, Path: child,
				Err: &unknownKeyError{suggest: closest(kv.key.Value, fields)}})
			continue
		}
		d.lines[child] = kv.key.Line
		d.decode(kv.value, v.FieldByIndex(index), child)
	}
}

// laterSectioner is a struct type with sections a later release enforces
// (a policy's guardrails, prompt_logging, cache): writing one is an error
// saying so, rather than an unknown key, and rather than a section loaded
// and silently not applied.
type laterSectioner interface {
	// laterSection returns what the section at key is called in messages
	// ("guardrails") and true, or false when key is no such section.
	laterSection(key string) (what string, ok bool)
}

func laterSection(l laterSectioner, key string) (string, bool) {
	if l == nil {
		return "", false
	}
	return l.laterSection(key)
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n.Line, path, fmt.Errorf("expected a mapping, got %s", nodeKind(n)))
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	for _, kv := range d.pairs(n, path) {
		child := keyPath(path, kv.key.Value)
		d.lines[child] = kv.key.Line
		e := newValue(v.Type().Elem())
		d.decode(kv.value, e.Elem(), child)
		v.SetMapIndex(reflect.ValueOf(kv.key.Value).Convert(v.Type().Key()), e.Elem())
	}
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n.Line, path, fmt.Errorf("expected a list, got %s", nodeKind(n)))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		child := indexPath(path, i)
		d.lines[child] = item.Line
		e := newValue(v.Type().Elem())
		d.decode(item, e.Elem(), child)
		s.Index(i).Set(e.Elem())
	}
	v.Set(s)
}

func (d *decoder) decodeScalar(n *yaml.Node, v reflect.Value, path string) {
	want := map[reflect.Kind]string{
		reflect.String: "a string", reflect.Bool: "true or false",
		reflect.Int: "an integer", reflect.Int64: "an integer", reflect.Float64: "a number",
	}[v.Kind()]
	if want == "" {
		panic("config: no decoding for " + v.Type().String()) // a field type this decoder does not know
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(n.Line, path, fmt.Errorf("expected %s, got %s", want, nodeKind(n)))
		return
	}
	if v.Kind() == reflect.String {
		v.SetString(n.Value)
		return
	}
	if (v.Kind() == reflect.Int || v.Kind() == reflect.Int64) && n.ShortTag() != "!!int" {
		// yaml.v3 would truncate 30.7 (and read 1e3) into an integer.
		d.fail(n.Line, path, fmt.Errorf("expected %s, got %q", want, n.Value))
		return
	}
	p := reflect.New(v.Type())
	if err := n.Decode(p.Interface()); err != nil {
		d.fail(n.Line, path, fmt.Errorf("expected %s, got %s", want, nodeKind(n)))
		return
	}
	v.Set(p.Elem())
}

type pair struct{ key, value *yaml.Node }

// pairs returns the key-value pairs of mapping n, with YAML merge keys
// ("<<: *anchor") expanded: a key written in n wins over a merged one. A
// key written twice, or not a plain scalar, is reported.
func (d *decoder) pairs(n *yaml.Node, path string) []pair {
	var own, merged []pair
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" {
			merged = append(merged, d.mergePairs(val, path)...)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k.Line, path, fmt.Errorf("a key must be a plain string, got %s", nodeKind(k)))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.fail(k.Line, keyPath(path, k.Value), fmt.Errorf("duplicate key (first at line %d)", first))
			continue
		}
		seen[k.Value] = k.Line
		own = append(own, pair{k, val})
	}
	for _, p := range merged {
		if _, dup := seen[p.key.Value]; !dup {
			seen[p.key.Value] = p.key.Line
			own = append(own, p)
		}
	}
	return own
}

// mergePairs returns the pairs a merge key's value brings: a mapping, or a
// list of mappings (earlier ones win).
func (d *decoder) mergePairs(n *yaml.Node, path string) []pair {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.MappingNode:
		return d.pairs(n, path)
	case yaml.SequenceNode:
		var all []pair
		for _, m := range n.Content {
			all = append(all, d.mergePairs(m, path)...)
		}
		return all
	}
	d.fail(n.Line, path, fmt.Errorf("a merge key (<<) needs a mapping, got %s", nodeKind(n)))
	return nil
}

// yamlFields maps the yaml names of t's exported fields to their index
// (for reflect.Value.FieldByIndex); the fields of a struct embedded with
// `yaml:",inline"` count as t's own.
func yamlFields(t reflect.Type) map[string][]int {
	fields := map[string][]int{}
	addYAMLFields(fields, t, nil)
	return fields
}

func addYAMLFields(fields map[string][]int, t reflect.Type, index []int) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		at := append(slices.Clip(index), i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" && slices.Contains(strings.Split(opts, ","), "inline") && f.Type.Kind() == reflect.Struct {
			addYAMLFields(fields, f.Type, at)
			continue
		}
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name)
		}
		fields[name] = at
	}
}

// closest returns the known key nearest to key if it is within two edits,
// for "did you mean".
func closest[V any](key string, fields map[string]V) string {
	best, bestDist := "", 3
	for name := range fields {
		if dist := editDistance(key, name); dist < bestDist || dist == bestDist && name < best {
			best, bestDist = name, dist
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein (optimal string alignment)
// distance of a and b, counted in bytes.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
