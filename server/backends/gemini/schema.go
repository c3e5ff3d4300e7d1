package gemini

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/flexway/flexway/server/backends/jsonscan"
)

// maxSchemaDepth bounds the nesting of a reduced schema, $ref expansion
// included.
const maxSchemaDepth = 64

// ReduceSchema returns a JSON Schema (a tool's parameters, a
// response_format schema) reduced to the OpenAPI subset Gemini's Schema
// accepts (https://ai.google.dev/api/caching#Schema): `$schema`, `$id`,
// `$comment`, `additionalProperties`, `$defs` and `definitions` removed;
// every local `$ref` ("#/$defs/X", "#/definitions/X") replaced by what it
// names; `type: [X, "null"]` turned into `type: X, nullable: true`. Keys
// come out sorted (a key given twice: the last wins); numbers are kept as
// written; strings are written as json.Marshal writes them.
//
// Errors: the schema is not a JSON object, a `$ref` is not local or names
// nothing, `$ref`s form a cycle or the schema nests deeper than 64, or a
// type array holds more than one non-null type.
func ReduceSchema(raw []byte) (json.RawMessage, error) {
	w := schemaWorks.Get().(*schemaWork)
	defer w.put()
	t, r := &w.t, &w.r
	t.s.Reset(raw)
	root := t.value(span{}, 0)
	if t.s.Bad() {
		return nil, errors.New("the schema is not JSON")
	}
	if t.nodes[root].kind != '{' {
		return nil, errors.New("the schema must be a JSON object")
	}
	*r = reducer{t: t, out: r.out[:0], refs: r.refs[:0], ents: r.ents[:0]}
	if err := r.reduce(root, 0); err != nil {
		return nil, err
	}
	return bytes.Clone(r.out), nil
}

// schemaWork is a reduction's buffers, kept between reductions.
type schemaWork struct {
	t schemaTree
	r reducer
}

var schemaWorks = sync.Pool{New: func() any { return new(schemaWork) }}

// put empties w and returns it to schemaWorks unless a schema grew it past
// 64 KiB.
func (w *schemaWork) put() {
	t := &w.t
	if cap(t.strs) > 64<<10 || cap(w.r.out) > 64<<10 || cap(t.nodes) > 4096 {
		return
	}
	t.s.Reset(nil)
	t.nodes, t.kids, t.stack, t.strs = t.nodes[:0], t.kids[:0], t.stack[:0], t.strs[:0]
	schemaWorks.Put(w)
}

// span is a string of schemaTree.strs, by offset and length.
type span struct{ off, n int32 }

// schemaNode is one value of the schema.
type schemaNode struct {
	kind  byte  // '{', '[', '"', '0' (a number), 't', 'f' or 'n'
	key   span  // the member name, in an object
	text  span  // a string, decoded; a number as written
	first int32 // the members or elements: schemaTree.kids[first : first+count]
	count int32
}

// schemaTree is a schema read once, its nodes in one slice and its strings
// in one buffer.
type schemaTree struct {
	s     jsonscan.Scanner
	nodes []schemaNode
	kids  []int32
	stack []int32
	strs  []byte
}

func (t *schemaTree) str(sp span) []byte { return t.strs[sp.off : sp.off+sp.n] }

// keep appends b to strs.
func (t *schemaTree) keep(b []byte) span {
	off := len(t.strs)
	t.strs = append(t.strs, b...)
	return span{int32(off), int32(len(b))}
}

// value reads one value, a member named key, and returns its node.
func (t *schemaTree) value(key span, depth int) int32 {
	i := int32(len(t.nodes))
	t.nodes = append(t.nodes, schemaNode{key: key})
	if depth > jsonscan.MaxDepth {
		t.s.Fail()
		return i
	}
	kind := t.s.Peek()
	switch kind {
	case '{':
		mark := len(t.stack)
		t.s.Object(func(k []byte) {
			c := t.value(t.keep(k), depth+1)
			t.stack = append(t.stack, c)
		})
		t.close(i, mark)
	case '[':
		mark := len(t.stack)
		t.s.Array(func() {
			c := t.value(span{}, depth+1)
			t.stack = append(t.stack, c)
		})
		t.close(i, mark)
	case '"':
		raw, escaped := t.s.Raw()
		off := len(t.strs)
		if !escaped && utf8.Valid(raw) {
			t.strs = append(t.strs, raw...)
		} else {
			t.strs = jsonscan.Unescape(t.strs, raw)
		}
		t.nodes[i].text = span{int32(off), int32(len(t.strs) - off)}
	case 't', 'f', 'n':
		if !t.s.Lit("true") && !t.s.Lit("false") && !t.s.Lit("null") {
			t.s.Fail()
		}
	default:
		kind = '0'
		t.nodes[i].text = t.keep(t.s.Number())
	}
	t.nodes[i].kind = kind
	return i
}

// close gives node i the children stacked from mark.
func (t *schemaTree) close(i int32, mark int) {
	t.nodes[i].first, t.nodes[i].count = int32(len(t.kids)), int32(len(t.stack)-mark)
	t.kids = append(t.kids, t.stack[mark:]...)
	t.stack = t.stack[:mark]
}

func (t *schemaTree) children(i int32) []int32 {
	n := &t.nodes[i]
	return t.kids[n.first : n.first+n.count]
}

// member is the node of object i's member key (the last one of that
// name), or -1.
func (t *schemaTree) member(i int32, key string) int32 {
	kids := t.children(i)
	for k := len(kids) - 1; k >= 0; k-- {
		if string(t.str(t.nodes[kids[k]].key)) == key {
			return kids[k]
		}
	}
	return -1
}

// The ways an output member is written.
const (
	modeReduce   = iota // the value reduced
	modePlain           // the value as it is, keys sorted
	modeProps           // a properties object: each value reduced
	modeNullable        // true
)

type entry struct {
	key  []byte
	node int32
	mode int
}

type reducer struct {
	t    *schemaTree
	out  []byte
	refs []int32 // the $ref strings being expanded, outermost first
	ents []entry // the entries of the objects being written, a stack
}

// reduce writes node i, depth deep, reduced.
func (r *reducer) reduce(i int32, depth int) error { return r.write(i, depth, false) }

// write writes node i, depth deep: reduced, or as it is (its objects' keys
// sorted) when plain.
func (r *reducer) write(i int32, depth int, plain bool) error {
	if depth > maxSchemaDepth && !plain {
		return errors.New("the schema nests too deep")
	}
	t := r.t
	switch t.nodes[i].kind {
	case '[':
		r.out = append(r.out, '[')
		for k, c := range t.children(i) {
			if k > 0 {
				r.out = append(r.out, ',')
			}
			if err := r.write(c, depth+1, plain); err != nil {
				return err
			}
		}
		r.out = append(r.out, ']')
		return nil
	case '{':
	default:
		r.scalar(i)
		return nil
	}
	if plain {
		mark := len(r.ents)
		for _, c := range t.children(i) {
			r.ents = append(r.ents, entry{t.str(t.nodes[c].key), c, modePlain})
		}
		err := r.object(mark, depth)
		r.ents = r.ents[:mark]
		return err
	}
	if ref := t.member(i, "$ref"); ref >= 0 && t.nodes[ref].kind == '"' {
		name := t.str(t.nodes[ref].text)
		for _, seen := range r.refs {
			if bytes.Equal(t.str(t.nodes[seen].text), name) {
				return errors.New("the schema's $ref " + string(name) + " is cyclic; Gemini takes no $ref")
			}
		}
		target, err := r.resolve(name)
		if err != nil {
			return err
		}
		r.refs = append(r.refs, ref)
		err = r.reduce(target, depth+1)
		r.refs = r.refs[:len(r.refs)-1]
		return err
	}
	mark := len(r.ents)
	for _, c := range t.children(i) {
		n := &t.nodes[c]
		key := t.str(n.key)
		switch string(key) {
		case "$schema", "$id", "$comment", "additionalProperties", "$defs", "definitions":
			continue
		case "type":
			if n.kind == '[' {
				kept, nullable := int32(-1), false
				for _, ty := range t.children(c) {
					if t.nodes[ty].kind == '"' && string(t.str(t.nodes[ty].text)) == "null" {
						nullable = true
						continue
					}
					if kept >= 0 {
						r.ents = r.ents[:mark]
						return errors.New("the schema has a type array with several non-null types")
					}
					kept = ty
				}
				if kept >= 0 {
					r.ents = append(r.ents, entry{key, kept, modePlain})
				}
				if nullable {
					r.ents = append(r.ents, entry{[]byte("nullable"), -1, modeNullable})
				}
				continue
			}
		case "properties":
			if n.kind == '{' {
				r.ents = append(r.ents, entry{key, c, modeProps})
				continue
			}
		}
		r.ents = append(r.ents, entry{key, c, modeReduce})
	}
	err := r.object(mark, depth)
	r.ents = r.ents[:mark]
	return err
}

// object writes the entries stacked from mark as an object: sorted, the
// last of each key (a type array's nullable before a nullable member).
func (r *reducer) object(mark, depth int) error {
	ents := r.ents[mark:]
	slices.SortStableFunc(ents, func(a, b entry) int {
		if c := bytes.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(nullableLast(a), nullableLast(b))
	})
	r.out = append(r.out, '{')
	first := true
	for k := mark; k < len(r.ents); k++ {
		e := r.ents[k]
		if k+1 < len(r.ents) && bytes.Equal(r.ents[k+1].key, e.key) {
			continue
		}
		if !first {
			r.out = append(r.out, ',')
		}
		first = false
		r.out = jsonscan.AppendString(r.out, string(e.key))
		r.out = append(r.out, ':')
		var err error
		switch e.mode {
		case modeReduce:
			err = r.reduce(e.node, depth+1)
		case modePlain:
			err = r.write(e.node, depth+1, true)
		case modeNullable:
			r.out = append(r.out, "true"...)
		case modeProps:
			m := len(r.ents)
			for _, c := range r.t.children(e.node) {
				r.ents = append(r.ents, entry{r.t.str(r.t.nodes[c].key), c, modeReduce})
			}
			err = r.object(m, depth)
			r.ents = r.ents[:m]
		}
		if err != nil {
			return err
		}
	}
	r.out = append(r.out, '}')
	return nil
}

func nullableLast(e entry) int {
	if e.mode == modeNullable {
		return 1
	}
	return 0
}

func (r *reducer) scalar(i int32) {
	n := &r.t.nodes[i]
	switch n.kind {
	case '"':
		r.out = jsonscan.AppendString(r.out, string(r.t.str(n.text)))
	case '0':
		r.out = append(r.out, r.t.str(n.text)...)
	case 't':
		r.out = append(r.out, "true"...)
	case 'f':
		r.out = append(r.out, "false"...)
	default:
		r.out = append(r.out, "null"...)
	}
}

// resolve is the node a local $ref names.
func (r *reducer) resolve(ref []byte) (int32, error) {
	for _, defs := range [...]string{"$defs", "definitions"} {
		rest, ok := bytes.CutPrefix(ref, []byte("#/"+defs+"/"))
		if !ok {
			continue
		}
		if d := r.t.member(0, defs); d >= 0 && r.t.nodes[d].kind == '{' {
			if target := r.t.member(d, string(rest)); target >= 0 {
				return target, nil
			}
		}
	}
	return -1, errors.New("the schema's $ref " + string(ref) + " names no local definition")
}
