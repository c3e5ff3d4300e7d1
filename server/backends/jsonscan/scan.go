// Package jsonscan is the hand-written JSON reader (and the two small JSON
// writers) shared by the anthropic, gemini and a2a backends' translations:
// their stream decoders read every event with a [Scanner] that walks one
// value's members in place, reusing the caller's buffers, so that an
// event in the steady state costs no allocation and no reflection; their
// encoders read the request's raw tool and tool call JSON with it and copy
// raw JSON through with [AppendCompact].
//
// The reading follows RFC 8259 (https://www.rfc-editor.org/rfc/rfc8259)
// and decodes strings exactly as encoding/json does (a lone surrogate or a
// byte of invalid UTF-8 becomes U+FFFD); the writing matches what
// json.Marshal writes, HTML escaping included, so that an encoder moved off
// encoding/json keeps its bytes.
package jsonscan

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/flexway/flexway/server/jsonstring"
)

// MaxDepth bounds the nesting [Scanner.Skip] reads, as encoding/json's
// own limit does; deeper input is bad.
const MaxDepth = 10000

// Scanner reads one JSON text in place. Its errors are sticky: the first
// read that does not find what it expects marks the scanner bad
// ([Scanner.Bad]) and every later read is a no-op, so a caller checks once
// at the end. The zero value is empty; [Scanner.Reset] gives it data.
type Scanner struct {
	data []byte
	pos  int
	bad  bool
	key  []byte // an escaped member name, unescaped
	// inPlace: data is a string's bytes (resetString), which strings
	// read from it may share.
	inPlace bool
}

// Reset makes s read data from its start, keeping its buffers.
func (s *Scanner) Reset(data []byte) {
	s.data, s.pos, s.bad, s.inPlace = data, 0, false, false
}

// resetString makes s read raw in place: the scanner only reads its data,
// so it may scan a string's bytes rather than a copy, and [Scanner.Text]
// returns substrings of raw.
func (s *Scanner) resetString(raw string) {
	s.Reset(unsafe.Slice(unsafe.StringData(raw), len(raw)))
	s.inPlace = true
}

// view is b, bytes of the data, as a string: shared with the data when
// it is a string's, else copied.
func (s *Scanner) view(b []byte) string {
	if !s.inPlace || len(b) == 0 {
		return string(b)
	}
	return unsafe.String(&b[0], len(b))
}

// Bad reports whether a read failed.
func (s *Scanner) Bad() bool { return s.bad }

// Fail marks s bad: the caller read something it does not take.
func (s *Scanner) Fail() { s.bad = true }

// Pos is the offset in bytes of the next byte to read.
func (s *Scanner) Pos() int { return s.pos }

// Done reports whether the whole data was read without error (only white
// space left).
func (s *Scanner) Done() bool {
	s.ws()
	return !s.bad && s.pos == len(s.data)
}

func (s *Scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// Peek returns the next byte after white space, 0 at the end or once bad.
func (s *Scanner) Peek() byte {
	s.ws()
	if s.bad || s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

// Lit consumes the literal l (true, false, null) when it comes next.
func (s *Scanner) Lit(l string) bool {
	s.ws()
	if s.bad || len(s.data)-s.pos < len(l) || string(s.data[s.pos:s.pos+len(l)]) != l {
		return false
	}
	s.pos += len(l)
	return true
}

// Null consumes a null when it comes next.
func (s *Scanner) Null() bool { return s.Lit("null") }

// Bool reads true or false.
func (s *Scanner) Bool() bool {
	switch {
	case s.Lit("true"):
		return true
	case s.Lit("false"):
	default:
		s.bad = true
	}
	return false
}

// expect consumes c after white space.
func (s *Scanner) expect(c byte) bool {
	if s.Peek() != c {
		s.bad = true
		return false
	}
	s.pos++
	return true
}

// Object reads an object, calling member with each member's name
// (unescaped; valid until the next name is read) with s at the member's
// value, which member must consume (with [Scanner.Skip] at least). It
// stops at the first failure.
func (s *Scanner) Object(member func(key []byte)) {
	if !s.expect('{') {
		return
	}
	if s.Peek() == '}' {
		s.pos++
		return
	}
	for !s.bad {
		key := s.name()
		if !s.expect(':') {
			return
		}
		member(key)
		switch s.Peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return
		default:
			s.bad = true
		}
	}
}

// name reads a member name: a slice of the data when it holds no escape
// and is valid UTF-8.
func (s *Scanner) name() []byte {
	raw, escaped := s.Raw()
	if !escaped && utf8.Valid(raw) {
		return raw
	}
	s.key = Unescape(s.key[:0], raw)
	return s.key
}

// Array reads an array, calling elem with s at each element, which elem
// must consume.
func (s *Scanner) Array(elem func()) {
	if !s.expect('[') {
		return
	}
	if s.Peek() == ']' {
		s.pos++
		return
	}
	for !s.bad {
		elem()
		switch s.Peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return
		default:
			s.bad = true
		}
	}
}

// Raw reads a string and returns its body between the quotes, a slice of
// the data, and whether it holds an escape (then [Unescape] decodes it).
// The escapes are checked; the UTF-8 is not.
func (s *Scanner) Raw() (raw []byte, escaped bool) {
	if !s.expect('"') {
		return nil, false
	}
	start := s.pos
	for {
		// Skip plain bytes eight at a time, up to the first quote,
		// backslash or control byte.
		for s.pos+8 <= len(s.data) {
			if m := jsonstring.SpecialMask(binary.LittleEndian.Uint64(s.data[s.pos:])); m != 0 {
				s.pos += bits.TrailingZeros64(m) >> 3
				break
			}
			s.pos += 8
		}
		if s.pos >= len(s.data) {
			break
		}
		switch c := s.data[s.pos]; {
		case c == '"':
			raw = s.data[start:s.pos]
			s.pos++
			return raw, escaped
		case c == '\\':
			escaped = true
			if s.pos+1 >= len(s.data) {
				s.bad = true
				return nil, false
			}
			switch s.data[s.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos += 2
			case 'u':
				if _, ok := hex4(s.data[s.pos+2:]); !ok {
					s.bad = true
					return nil, false
				}
				s.pos += 6
			default:
				s.bad = true
				return nil, false
			}
		case c < 0x20:
			s.bad = true
			return nil, false
		default:
			s.pos++
		}
	}
	s.bad = true
	return nil, false
}

// Str reads a string and appends it, decoded, to dst.
func (s *Scanner) Str(dst []byte) []byte {
	raw, escaped := s.Raw()
	if !escaped && utf8.Valid(raw) {
		return append(dst, raw...)
	}
	return Unescape(dst, raw)
}

// Unescape appends the string body raw (as [Scanner.Raw] returns it, its
// escapes checked) to dst, decoded as encoding/json decodes it: each byte
// of invalid UTF-8 and each lone surrogate escape becomes U+FFFD.
func Unescape(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\' && i+1 < len(raw):
			e := raw[i+1]
			i += 2
			switch e {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, _ := hex4(raw[i:])
				i += 4
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						r2, _ = hex4(raw[i+2:])
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
						i += 6
					} else {
						// As encoding/json: the next escape is read on its own.
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
			default: // '"', '\\', '/'
				dst = append(dst, e)
			}
		case c < utf8.RuneSelf:
			j := i + 1
			for j < len(raw) && raw[j] < utf8.RuneSelf && raw[j] != '\\' {
				j++
			}
			dst = append(dst, raw[i:j]...)
			i = j
		default:
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, "\uFFFD"...)
			} else {
				dst = append(dst, raw[i:i+size]...)
			}
			i += size
		}
	}
	return dst
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// Int reads an integer: a JSON number without fraction or exponent, of at
// most 2^53 in magnitude (what every JSON reader holds exactly).
func (s *Scanner) Int() int64 {
	s.ws()
	if s.bad {
		return 0
	}
	neg := s.pos < len(s.data) && s.data[s.pos] == '-'
	if neg {
		s.pos++
	}
	start := s.pos
	var n int64
	for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
		n = n*10 + int64(s.data[s.pos]-'0')
		s.pos++
		if n > 1<<53 {
			s.bad = true
			return 0
		}
	}
	if s.pos == start || s.data[start] == '0' && s.pos-start > 1 {
		s.bad = true
		return 0
	}
	if s.pos < len(s.data) && (s.data[s.pos] == '.' || s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.bad = true
		return 0
	}
	if neg {
		n = -n
	}
	return n
}

// Number reads any JSON number and returns it as written.
func (s *Scanner) Number() []byte {
	s.ws()
	if s.bad {
		return nil
	}
	b, i := s.data, s.pos
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		s.bad = true
		return nil
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			s.bad = true
			return nil
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			s.bad = true
			return nil
		}
	}
	n := b[s.pos:i]
	s.pos = i
	return n
}

// Skip reads one value of any type, checking its syntax as encoding/json
// would, nested at most [MaxDepth] deep.
func (s *Scanner) Skip() { s.skip(0) }

func (s *Scanner) skip(depth int) {
	if depth > MaxDepth {
		s.bad = true
		return
	}
	switch s.Peek() {
	case '"':
		s.Raw()
	case '{':
		s.Object(func([]byte) { s.skip(depth + 1) })
	case '[':
		s.Array(func() { s.skip(depth + 1) })
	case 't':
		s.bad = s.bad || !s.Lit("true")
	case 'f':
		s.bad = s.bad || !s.Lit("false")
	case 'n':
		s.bad = s.bad || !s.Lit("null")
	default:
		s.Number()
	}
}

// Value reads one value of any type, as [Scanner.Skip], and returns it as
// written (a slice of the data).
func (s *Scanner) Value() []byte {
	s.ws()
	from := s.pos
	s.Skip()
	if s.bad {
		return nil
	}
	return s.data[from:s.pos]
}
