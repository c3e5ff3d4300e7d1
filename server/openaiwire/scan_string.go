package openaiwire

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/flexway/flexway/server/jsonstring"
)

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
