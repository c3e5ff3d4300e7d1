package openaiwire

import (
	"fmt"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// maxDepth is the deepest nesting of arrays and objects a raw value may
// have, encoding/json's limit.
const maxDepth = 10000

// decoder is a JSON scanner over one input. It is positioned on the next
// byte to read; methods that read a value expect whitespace to be skipped
// already (see peek).
type decoder struct {
	data []byte
	pos  int
	// arena holds the copies of small raw values, so that one parse makes
	// a few allocations for them rather than one each. Each value is a
	// substring of arena.String(): the builder only appends, so the bytes
	// under a returned string are never written again. A decoder must not
	// be copied once it has cloned a value.
	arena strings.Builder
}

// Arena sizes: values up to maxArenaValue bytes are copied into blocks of
// arenaBlock bytes.
const (
	arenaBlock    = 1024
	maxArenaValue = 256
)

// clone returns b, a value just read (it ends at d.pos), as a string: one
// copy, sharing no memory with the input. The literals null, true and
// false are constants; other small values share arena blocks.
func (d *decoder) clone(b []byte) string {
	switch string(b) {
	case "null":
		return "null"
	case "true":
		return "true"
	case "false":
		return "false"
	}
	if len(b) > maxArenaValue {
		return string(b)
	}
	if d.arena.Cap()-d.arena.Len() < len(b) {
		// b was just read, so b and every value still to copy fit in
		// len(b) plus the rest of the input. A new block leaves the
		// strings cut from the old one in place.
		d.arena = strings.Builder{}
		d.arena.Grow(min(arenaBlock, len(b)+len(d.data)-d.pos))
	}
	start := d.arena.Len()
	d.arena.Write(b)
	return d.arena.String()[start:]
}

// syntaxErr returns a *syntaxError at off.
func (d *decoder) syntaxErr(off int, format string, args ...any) error {
	return &syntaxError{off: off, msg: fmt.Sprintf(format, args...)}
}

// ws skips JSON whitespace.
func (d *decoder) ws() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// peek skips whitespace and returns the next byte, 0 at the end of input.
func (d *decoder) peek() byte {
	d.ws()
	if d.pos < len(d.data) {
		return d.data[d.pos]
	}
	return 0
}

// unexpected is the syntax error for the byte at d.pos.
func (d *decoder) unexpected(context string) error {
	if d.pos >= len(d.data) {
		return d.syntaxErr(d.pos, "unexpected end of input %s", context)
	}
	c := d.data[d.pos]
	if c < utf8.RuneSelf {
		return d.syntaxErr(d.pos, "invalid character %q %s", c, context)
	}
	r, _ := utf8.DecodeRune(d.data[d.pos:])
	return d.syntaxErr(d.pos, "invalid character %q %s", r, context)
}

// end checks that only whitespace follows the top-level value.
func (d *decoder) end() error {
	d.ws()
	if d.pos != len(d.data) {
		return d.unexpected("after top-level value")
	}
	return nil
}

// kind names the JSON type of a value starting with c, for messages; ok is
// false when c starts no value at all.
func kind(c byte) (name string, ok bool) {
	switch c {
	case '{':
		return "an object", true
	case '[':
		return "an array", true
	case '"':
		return "a string", true
	case 't', 'f':
		return "a boolean", true
	case 'n':
		return "null", true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "a number", true
	}
	return "", false
}

// typeErr returns the error for a value at d.pos that is not of the wanted
// type: a syntax error if it starts no value, a *fieldError with an empty
// param otherwise.
func (d *decoder) typeErr(want string) error {
	c := d.peek()
	got, ok := kind(c)
	if !ok {
		return d.unexpected("looking for beginning of value")
	}
	if c == 'n' || c == 't' || c == 'f' {
		// Check the literal, so that a malformed one is a syntax error.
		if err := d.skip(0); err != nil {
			return err
		}
	}
	return fieldErr("", "expected %s, got %s", want, got)
}

// isNull consumes a null literal at d.pos and reports whether there was one.
func (d *decoder) isNull() (bool, error) {
	if d.peek() != 'n' {
		return false, nil
	}
	return true, d.literal("null")
}

// literal consumes lit at d.pos.
func (d *decoder) literal(lit string) error {
	if len(d.data)-d.pos < len(lit) || string(d.data[d.pos:d.pos+len(lit)]) != lit {
		for i := 0; i < len(lit); i++ {
			if d.pos+i >= len(d.data) || d.data[d.pos+i] != lit[i] {
				d.pos += i
				return d.unexpected("in literal " + lit)
			}
		}
	}
	d.pos += len(lit)
	return nil
}

// openObject consumes the '{' of an object; it returns a type error if the
// value at d.pos is not an object.
func (d *decoder) openObject() error {
	if d.peek() != '{' {
		return d.typeErr("an object")
	}
	d.pos++
	return nil
}

// member reads the next key of an object opened by openObject and the
// colon after it, leaving d.pos on the value. first is true for the first
// call. It returns ok false once the closing '}' is consumed. The key is
// decoded; it aliases the input when it has no escapes, so it is only valid
// until the next call.
func (d *decoder) member(first bool) (key []byte, ok bool, err error) {
	c := d.peek()
	if first {
		if c == '}' {
			d.pos++
			return nil, false, nil
		}
	} else {
		switch c {
		case ',':
			d.pos++
			c = d.peek()
		case '}':
			d.pos++
			return nil, false, nil
		default:
			return nil, false, d.unexpected("after object member value")
		}
	}
	if c != '"' {
		return nil, false, d.unexpected("looking for beginning of object key string")
	}
	key, err = d.strView()
	if err != nil {
		return nil, false, err
	}
	if d.peek() != ':' {
		return nil, false, d.unexpected("after object key")
	}
	d.pos++
	d.ws()
	return key, true, nil
}

// members parses the object at d.pos, calling each with d.pos on the value
// of every member, in order; it returns a type error if the value is not an
// object. each must read the whole value. key is the decoded key, valid
// only during the call (see member). An error of each is returned nested
// under key (see nestKey), so each reports errors relative to the value.
func (d *decoder) members(each func(key []byte) error) error {
	if err := d.openObject(); err != nil {
		return err
	}
	for first := true; ; first = false {
		key, ok, err := d.member(first)
		if err != nil || !ok {
			return err
		}
		if err := each(key); err != nil {
			return nestKey(err, string(key))
		}
	}
}

// openArray consumes the '[' of an array; it returns a type error if the
// value at d.pos is not an array.
func (d *decoder) openArray() error {
	if d.peek() != '[' {
		return d.typeErr("an array")
	}
	d.pos++
	return nil
}

// element moves to the next element of an array opened by openArray,
// leaving d.pos on it. first is true for the first call. It returns ok
// false once the closing ']' is consumed.
func (d *decoder) element(first bool) (ok bool, err error) {
	c := d.peek()
	if first {
		if c == ']' {
			d.pos++
			return false, nil
		}
		return true, nil
	}
	switch c {
	case ',':
		d.pos++
		d.ws()
		return true, nil
	case ']':
		d.pos++
		return false, nil
	}
	return false, d.unexpected("after array element")
}

// elements parses the array at d.pos, calling elem with d.pos on each
// element; it returns a type error if the value is not an array. Errors
// of elem are nested under the index.
func (d *decoder) elements(elem func(i int) error) error {
	if err := d.openArray(); err != nil {
		return err
	}
	for i := 0; ; i++ {
		ok, err := d.element(i == 0)
		if err != nil || !ok {
			return err
		}
		if err := elem(i); err != nil {
			return nestIndex(err, i)
		}
	}
}

// array is elements where null reads as an empty array.
func (d *decoder) array(elem func(i int) error) error {
	if null, err := d.isNull(); err != nil || null {
		return err
	}
	return d.elements(elem)
}

// bool reads a boolean at d.pos.
func (d *decoder) bool() (bool, error) {
	switch d.peek() {
	case 't':
		return true, d.literal("true")
	case 'f':
		return false, d.literal("false")
	}
	return false, d.typeErr("a boolean")
}

// skip validates the value at d.pos and moves past it. depth is the nesting
// of the value.
func (d *decoder) skip(depth int) error {
	switch c := d.peek(); c {
	case '{':
		if depth >= maxDepth {
			return d.syntaxErr(d.pos, "exceeded max depth of %d", maxDepth)
		}
		d.pos++
		for first := true; ; first = false {
			_, ok, err := d.member(first)
			if err != nil || !ok {
				return err
			}
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		}
	case '[':
		if depth >= maxDepth {
			return d.syntaxErr(d.pos, "exceeded max depth of %d", maxDepth)
		}
		d.pos++
		for first := true; ; first = false {
			ok, err := d.element(first)
			if err != nil || !ok {
				return err
			}
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		}
	case '"':
		_, _, _, err := d.scanString()
		return err
	case 't':
		return d.literal("true")
	case 'f':
		return d.literal("false")
	case 'n':
		return d.literal("null")
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		_, _, _, err := d.number()
		return err
	}
	return d.unexpected("looking for beginning of value")
}

// raw validates the value at d.pos, moves past it and returns its raw JSON
// text as a string (see clone).
func (d *decoder) raw() (string, error) {
	d.ws()
	start := d.pos
	if err := d.skip(0); err != nil {
		return "", err
	}
	return d.clone(d.data[start:d.pos]), nil
}

// validRaw reports whether s is exactly one valid JSON value (surrounding
// whitespace allowed) in valid UTF-8. A proto string is valid UTF-8 once
// it has crossed the wire, but not when a Go caller sets it; the check is
// cheap.
func validRaw(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	// The decoder only reads its input (skip copies nothing into it), so
	// it may scan s's bytes in place rather than a copy.
	d := decoder{data: unsafe.Slice(unsafe.StringData(s), len(s))}
	if d.peek() == 0 {
		return false
	}
	return d.skip(0) == nil && d.end() == nil
}

// checkUTF8 returns a *utf8Error at the first invalid UTF-8 byte of data.
func checkUTF8(data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	off := 0
	for off < len(data) {
		r, n := utf8.DecodeRune(data[off:])
		if r == utf8.RuneError && n == 1 {
			break
		}
		off += n
	}
	return &utf8Error{off: off}
}

// document parses d.data, which must hold one JSON object (what names it
// in errors): it checks UTF-8 and that the value is an object, calls each
// for every member as members does, and checks that only whitespace
// follows the object.
func (d *decoder) document(what string, each func(key []byte) error) error {
	if err := checkUTF8(d.data); err != nil {
		return err
	}
	if c := d.peek(); c != '{' {
		got, ok := kind(c)
		if !ok {
			return d.unexpected("looking for beginning of value")
		}
		if err := d.skip(0); err != nil {
			return err
		}
		if err := d.end(); err != nil {
			return err
		}
		return fieldErr("", "%s must be a JSON object, got %s", what, got)
	}
	if err := d.members(each); err != nil {
		return err
	}
	return d.end()
}
