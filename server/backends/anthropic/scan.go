package anthropic

import (
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a minimal JSON reader for the stream's hot events
// (content_block_delta, ping, content_block_stop): it walks one object's
// members without allocating, and gives up (ok false) on anything it does
// not read exactly, in which case the caller falls back to encoding/json,
// which also reports the error.
type scanner struct {
	d  []byte
	i  int
	ok bool
}

func (s *scanner) ws() {
	for s.i < len(s.d) {
		switch s.d[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// expect consumes c after whitespace.
func (s *scanner) expect(c byte) bool {
	s.ws()
	if s.i < len(s.d) && s.d[s.i] == c {
		s.i++
		return true
	}
	s.ok = false
	return false
}

// members calls fn with each member's key (raw: keys with escapes are
// given up on) with s positioned at the value, which fn must consume.
func (s *scanner) members(fn func(key []byte)) {
	if !s.expect('{') {
		return
	}
	s.ws()
	if s.i < len(s.d) && s.d[s.i] == '}' {
		s.i++
		return
	}
	for s.ok {
		if !s.expect('"') {
			return
		}
		start := s.i
		for s.i < len(s.d) && s.d[s.i] != '"' {
			if s.d[s.i] == '\\' || s.d[s.i] < 0x20 {
				s.ok = false
				return
			}
			s.i++
		}
		if s.i >= len(s.d) {
			s.ok = false
			return
		}
		key := s.d[start:s.i]
		s.i++
		if !s.expect(':') {
			return
		}
		s.ws()
		fn(key)
		if !s.ok {
			return
		}
		s.ws()
		if s.i < len(s.d) && s.d[s.i] == ',' {
			s.i++
			continue
		}
		s.expect('}')
		return
	}
}

// str appends the string value at s.i, unescaped, to dst.
func (s *scanner) str(dst []byte) []byte {
	if !s.expect('"') {
		return dst
	}
	for s.i < len(s.d) {
		c := s.d[s.i]
		switch {
		case c == '"':
			s.i++
			return dst
		case c < 0x20:
			s.ok = false
			return dst
		case c == '\\':
			if s.i+1 >= len(s.d) {
				s.ok = false
				return dst
			}
			e := s.d[s.i+1]
			s.i += 2
			switch e {
			case '"', '\\', '/':
				dst = append(dst, e)
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
				r, ok := s.hex4()
				if !ok {
					return dst
				}
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if s.i+1 < len(s.d) && s.d[s.i] == '\\' && s.d[s.i+1] == 'u' {
						s.i += 2
						if r2, ok = s.hex4(); !ok {
							return dst
						}
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
					} else {
						// As encoding/json: a lone surrogate is U+FFFD,
						// and the next escape is read on its own.
						s.ok = false
						return dst
					}
				}
				dst = utf8.AppendRune(dst, r)
			default:
				s.ok = false
				return dst
			}
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			s.i++
		default:
			r, size := utf8.DecodeRune(s.d[s.i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, "\uFFFD"...)
			} else {
				dst = append(dst, s.d[s.i:s.i+size]...)
			}
			s.i += size
		}
	}
	s.ok = false
	return dst
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.d) {
		s.ok = false
		return 0, false
	}
	var r rune
	for _, c := range s.d[s.i : s.i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			s.ok = false
			return 0, false
		}
	}
	s.i += 4
	return r, true
}

// small reads a non-negative integer below maxBlocks.
func (s *scanner) small() int {
	n, digits := 0, 0
	for s.i < len(s.d) && '0' <= s.d[s.i] && s.d[s.i] <= '9' {
		n = n*10 + int(s.d[s.i]-'0')
		s.i++
		digits++
		if n >= maxBlocks {
			s.ok = false
			return 0
		}
	}
	if digits == 0 || digits > 1 && s.d[s.i-digits] == '0' {
		s.ok = false
	}
	return n
}
