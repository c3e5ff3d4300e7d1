package openaiwire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/flexway/flexway/server/jsonstring"
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

// nextSpecial returns the index of the first quote, backslash or control
// character of data at or after i, len(data) if there is none. It reads
// eight bytes at a time; on a large string it is as fast as separate
// bytes.IndexByte passes, being bound by memory bandwidth.
func nextSpecial(data []byte, i int) int {
	for ; i+8 <= len(data); i += 8 {
		if m := jsonstring.SpecialMask(binary.LittleEndian.Uint64(data[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(data); i++ {
		if c := data[i]; c < 0x20 || c == '"' || c == '\\' {
			return i
		}
	}
	return i
}

// scanString validates the string whose opening quote is at d.pos and
// moves past its closing quote. It returns the span of the raw content
// (between the quotes) and whether it holds escapes.
func (d *decoder) scanString() (start, end int, escaped bool, err error) {
	data := d.data
	start = d.pos + 1
	for i := start; ; {
		i = nextSpecial(data, i)
		if i >= len(data) {
			return 0, 0, false, d.syntaxErr(i, "unexpected end of input in string")
		}
		switch c := data[i]; c {
		case '"':
			d.pos = i + 1
			return start, i, escaped, nil
		case '\\':
			escaped = true
			if i+1 >= len(data) {
				return 0, 0, false, d.syntaxErr(i+1, "unexpected end of input in string escape")
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k >= len(data) {
						return 0, 0, false, d.syntaxErr(k, "unexpected end of input in \\u escape")
					}
					if !isHex(data[k]) {
						return 0, 0, false, d.syntaxErr(k, "invalid character %q in \\u escape", data[k])
					}
				}
				i += 6
			default:
				return 0, 0, false, d.syntaxErr(i+1, "invalid escape character %q in string", data[i+1])
			}
		default:
			return 0, 0, false, d.syntaxErr(i, "invalid control character %q in string", c)
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// strView reads the string at d.pos and returns its decoded bytes: a view
// of the input when it has no escapes, a fresh slice otherwise.
func (d *decoder) strView() ([]byte, error) {
	start, end, escaped, err := d.scanString()
	if err != nil {
		return nil, err
	}
	if !escaped {
		return d.data[start:end], nil
	}
	return unescape(make([]byte, 0, end-start), d.data[start:end]), nil
}

// str reads the string at d.pos and returns it as a Go string, copying the
// input once; it returns a type error if the value is not a string.
func (d *decoder) str() (string, error) {
	if d.peek() != '"' {
		return "", d.typeErr("a string")
	}
	start, end, escaped, err := d.scanString()
	if err != nil {
		return "", err
	}
	raw := d.data[start:end]
	if !escaped {
		return internOrCopy(raw), nil
	}
	// An escape never decodes to more bytes than it is written with, so
	// the builder is allocated once at the raw length.
	var sb strings.Builder
	sb.Grow(len(raw))
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			sb.Write(raw)
			break
		}
		sb.Write(raw[:i])
		r, n := decodeEscape(raw[i:])
		if r < utf8.RuneSelf {
			sb.WriteByte(byte(r))
		} else {
			sb.WriteRune(r)
		}
		raw = raw[i+n:]
	}
	return sb.String(), nil
}

// unescape appends the decoded form of raw, the validated content of a JSON
// string, to dst.
func unescape(dst, raw []byte) []byte {
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:i]...)
		r, n := decodeEscape(raw[i:])
		dst = utf8.AppendRune(dst, r)
		raw = raw[i+n:]
	}
	return dst
}

// decodeEscape decodes the validated escape at the start of raw and returns
// the rune and the number of bytes it used. A UTF-16 surrogate pair is one
// rune; a lone surrogate is U+FFFD, as encoding/json decodes it.
func decodeEscape(raw []byte) (rune, int) {
	switch raw[1] {
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r := hex4(raw[2:6])
		if utf16.IsSurrogate(r) {
			if len(raw) >= 12 && raw[6] == '\\' && raw[7] == 'u' {
				if dec := utf16.DecodeRune(r, hex4(raw[8:12])); dec != utf8.RuneError {
					return dec, 12
				}
			}
			return utf8.RuneError, 6
		}
		return r, 6
	}
	return rune(raw[1]), 2 // '"', '\\', '/'
}

// hex4 decodes four validated hex digits.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// number validates the number at d.pos, moves past it and returns its
// span and whether it is written as an integer (no fraction, no exponent).
func (d *decoder) number() (start, end int, integer bool, err error) {
	data := d.data
	i := d.pos
	start = i
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i >= len(data):
		d.pos = i
		return 0, 0, false, d.unexpected("in number")
	case data[i] == '0':
		i++
	case '1' <= data[i] && data[i] <= '9':
		for i++; i < len(data) && '0' <= data[i] && data[i] <= '9'; i++ {
		}
	default:
		d.pos = i
		return 0, 0, false, d.unexpected("in number")
	}
	integer = true
	if i < len(data) && data[i] == '.' {
		integer = false
		i++
		if i >= len(data) || data[i] < '0' || data[i] > '9' {
			d.pos = i
			return 0, 0, false, d.unexpected("after decimal point in number")
		}
		for ; i < len(data) && '0' <= data[i] && data[i] <= '9'; i++ {
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		integer = false
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || data[i] < '0' || data[i] > '9' {
			d.pos = i
			return 0, 0, false, d.unexpected("in exponent of number")
		}
		for ; i < len(data) && '0' <= data[i] && data[i] <= '9'; i++ {
		}
	}
	d.pos = i
	return start, i, integer, nil
}

// int64 reads an integer at d.pos. Integral numbers written with a fraction
// or an exponent are accepted; other numbers, and values out of the int64
// range, are a *fieldError.
func (d *decoder) int64() (int64, error) {
	if c := d.peek(); c != '-' && (c < '0' || c > '9') {
		return 0, d.typeErr("an integer")
	}
	start, end, integer, err := d.number()
	if err != nil {
		return 0, err
	}
	raw := d.data[start:end]
	if integer {
		neg := raw[0] == '-'
		if neg {
			raw = raw[1:]
		}
		var u uint64
		for _, c := range raw {
			if u > (math.MaxUint64-9)/10 {
				return 0, fieldErr("", "integer %s is out of range", d.data[start:end])
			}
			u = u*10 + uint64(c-'0')
		}
		switch {
		case !neg && u <= math.MaxInt64:
			return int64(u), nil
		case neg && u <= 1<<63:
			return -int64(u), nil // -(1<<63) wraps to itself, MinInt64
		}
		return 0, fieldErr("", "integer %s is out of range", d.data[start:end])
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != math.Trunc(f) {
		return 0, fieldErr("", "expected an integer, got %s", raw)
	}
	if f < -(1<<63) || f >= 1<<63 {
		return 0, fieldErr("", "integer %s is out of range", raw)
	}
	return int64(f), nil
}

// int32 reads an integer in the int32 range at d.pos.
func (d *decoder) int32() (int32, error) {
	start := d.pos
	v, err := d.int64()
	if err != nil {
		return 0, err
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fieldErr("", "integer %s is out of range", d.data[start:d.pos])
	}
	return int32(v), nil
}

// float64 reads a number at d.pos.
func (d *decoder) float64() (float64, error) {
	if c := d.peek(); c != '-' && (c < '0' || c > '9') {
		return 0, d.typeErr("a number")
	}
	start, end, _, err := d.number()
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(string(d.data[start:end]), 64)
	if err != nil {
		// Only a magnitude beyond float64 fails on a valid JSON number.
		return 0, fieldErr("", "number %s is out of range", d.data[start:end])
	}
	return f, nil
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

// extra stores the raw value at d.pos in *m under key, allocating the map
// on first use.
func (d *decoder) extra(m *map[string]string, key []byte) error {
	v, err := d.raw()
	if err != nil {
		return err
	}
	if *m == nil {
		*m = make(map[string]string, 4)
	}
	(*m)[internKey(key)] = v
	return nil
}

// keepNull records that the typed field key was given as JSON null, just
// read: the null is kept in *m so that it is written back.
func (d *decoder) keepNull(m *map[string]string, key string) {
	if *m == nil {
		*m = make(map[string]string, 4)
	}
	(*m)[key] = "null"
}

// nullable reads the member key, at d.pos, of an object whose extra fields
// are *m: null is kept in *m and reads as nil; any other value is read by
// parse, and a null kept under key before is dropped. parse is a method
// value of d (d.usage) or a closure over d: passing d to a function value
// would move the caller's decoder to the heap.
func nullable[T any](d *decoder, m *map[string]string, key string, parse func() (*T, error)) (*T, error) {
	if null, err := d.keptNull(m, key); err != nil || null {
		return nil, err
	}
	v, err := parse()
	if err != nil {
		return nil, err
	}
	delete(*m, key)
	return v, nil
}

// strPtr reads a string at d.pos, for [nullable].
func (d *decoder) strPtr() (*string, error) {
	s, err := d.str()
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// boolPtr reads a boolean at d.pos, for [nullable].
func (d *decoder) boolPtr() (*bool, error) {
	b, err := d.bool()
	if err != nil {
		return nil, err
	}
	return &b, nil
}

// int32In reads an integer at d.pos that must lie in [lo, hi]; outside it
// the error (relative to the value) says "must be <what>".
func (d *decoder) int32In(lo, hi int64, what string) (*int32, error) {
	v, err := d.int64()
	if err != nil {
		return nil, err
	}
	if v < lo || v > hi {
		return nil, fieldErr("", "must be %s, got %d", what, v)
	}
	n := int32(v)
	return &n, nil
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

// topObject starts parsing data, which must hold one JSON object: it
// checks UTF-8 and that the value is an object, leaving d.pos on its '{'
// for members. what names the document in errors.
func topObject(data []byte, what string) (decoder, error) {
	d := decoder{data: data}
	if err := checkUTF8(data); err != nil {
		return d, err
	}
	c := d.peek()
	if c == '{' {
		return d, nil
	}
	got, ok := kind(c)
	if !ok {
		return d, d.unexpected("looking for beginning of value")
	}
	if err := d.skip(0); err != nil {
		return d, err
	}
	if err := d.end(); err != nil {
		return d, err
	}
	return d, fieldErr("", "%s must be a JSON object, got %s", what, got)
}
