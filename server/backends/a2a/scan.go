package a2a

import (
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a minimal JSON reader over one event's data, for the stream's
// steady state (artifact-update text chunks) without reflection or
// allocation. It only answers "this is a plain artifact-update of text
// parts" (then its fields) or "not sure": anything else, malformed input
// included, goes to the encoding/json path, which decides. Every read is
// bounds-checked; skipping nested values counts depth without recursion.
type scanner struct {
	b   []byte
	pos int
	bad bool
}

// ws skips white space.
func (s *scanner) ws() {
	for s.pos < len(s.b) {
		switch s.b[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.pos >= len(s.b) {
		return 0
	}
	return s.b[s.pos]
}

// expect consumes c or marks the input bad.
func (s *scanner) expect(c byte) {
	if s.peek() != c {
		s.bad = true
		return
	}
	s.pos++
}

// str reads a string: its raw bytes between the quotes and whether they
// hold an escape.
func (s *scanner) str() (raw []byte, escaped bool) {
	if s.peek() != '"' {
		s.bad = true
		return nil, false
	}
	s.pos++
	start := s.pos
	for s.pos < len(s.b) {
		switch c := s.b[s.pos]; {
		case c == '"':
			raw = s.b[start:s.pos]
			s.pos++
			return raw, escaped
		case c == '\\':
			escaped = true
			if s.pos+1 >= len(s.b) {
				s.bad = true
				return nil, false
			}
			switch s.b[s.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos += 2
			case 'u':
				if _, ok := hex4(s.b[s.pos+2:]); !ok {
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

// maxSkipDepth bounds the nesting the fast path skips; deeper input is
// left to encoding/json.
const maxSkipDepth = 256

// skip skips one value of any type, checking its syntax as encoding/json
// would.
func (s *scanner) skip() { s.skipDepth(0) }

// skipDepth skips a value nested depth levels deep.
func (s *scanner) skipDepth(depth int) {
	if depth > maxSkipDepth {
		s.bad = true
		return
	}
	switch s.peek() {
	case '"':
		s.str()
	case '{':
		s.object(func([]byte) { s.skipDepth(depth + 1) })
	case '[':
		s.array(func() { s.skipDepth(depth + 1) })
	case 't':
		s.lit("true")
	case 'f':
		s.lit("false")
	case 'n':
		s.lit("null")
	default:
		s.number()
	}
}

// lit consumes the literal l.
func (s *scanner) lit(l string) {
	if !hasPrefix(s.b[s.pos:], l) {
		s.bad = true
		return
	}
	s.pos += len(l)
}

// number consumes a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() {
	b, i := s.b, s.pos
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
		return
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			s.bad = true
			return
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			s.bad = true
			return
		}
	}
	s.pos = i
}

// object calls field for each member of an object, the scanner then at the
// member's value, which field must consume. It stops early once bad.
func (s *scanner) object(field func(key []byte)) {
	s.expect('{')
	if s.peek() == '}' {
		s.pos++
		return
	}
	for !s.bad {
		key, esc := s.str()
		if esc {
			s.bad = true // no A2A member name has an escape
		}
		s.expect(':')
		if s.bad {
			return
		}
		field(key)
		switch s.peek() {
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

// array calls elem for each element of an array.
func (s *scanner) array(elem func()) {
	s.expect('[')
	if s.peek() == ']' {
		s.pos++
		return
	}
	for !s.bad {
		elem()
		switch s.peek() {
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

// boolean reads true or false.
func (s *scanner) boolean() bool {
	s.ws()
	switch {
	case hasPrefix(s.b[s.pos:], "true"):
		s.pos += 4
		return true
	case hasPrefix(s.b[s.pos:], "false"):
		s.pos += 5
		return false
	}
	s.bad = true
	return false
}

// isNull consumes a null.
func (s *scanner) isNull() bool {
	s.ws()
	if hasPrefix(s.b[s.pos:], "null") {
		s.pos += 4
		return true
	}
	return false
}

// hasPrefix is bytes.HasPrefix for a string prefix, without allocating.
func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

// appendUnescaped appends the JSON string body raw, unescaped, to dst; ok
// is false for a bad escape or invalid UTF-8 (left to encoding/json, which
// writes U+FFFD).
func appendUnescaped(dst, raw []byte) ([]byte, bool) {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			j := i
			for j < len(raw) && raw[j] != '\\' {
				j++
			}
			if !utf8.Valid(raw[i:j]) {
				return dst, false
			}
			dst = append(dst, raw[i:j]...)
			i = j
			continue
		}
		if i+1 >= len(raw) {
			return dst, false
		}
		switch raw[i+1] {
		case '"', '\\', '/':
			dst = append(dst, raw[i+1])
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
			r, ok := hex4(raw[i+2:])
			if !ok {
				return dst, false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					r2, ok = hex4(raw[i+2:])
				}
				if !ok {
					return dst, false
				}
				r = utf16.DecodeRune(r, r2)
				if r == utf8.RuneError {
					return dst, false
				}
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default:
			return dst, false
		}
		i += 2
	}
	return dst, true
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
