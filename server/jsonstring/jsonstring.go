// Package jsonstring writes Go strings as JSON strings (RFC 8259), fast:
// the OpenAI codec (server/openaiwire) and the audit line
// (server/auditlog) both encode with it, and the codec's scanner finds the
// end of a plain string run with [SpecialMask].
package jsonstring

import (
	"math/bits"
	"unicode/utf8"
)

// Masks for the eight-bytes-at-a-time string scans.
const (
	lsb   = 0x0101010101010101
	msb   = 0x8080808080808080
	quote = '"' * lsb
	bslsh = '\\' * lsb
)

// SpecialMask has the high bit set in the byte of x, little-endian, of the
// first quote, backslash or control character (< 0x20), the bytes that end
// a fast string scan; it is 0 when there is none. Bits above the first
// such byte are not reliable.
func SpecialMask(x uint64) uint64 {
	return (hasLess(x, 0x20) | hasZero(x^quote) | hasZero(x^bslsh)) & msb
}

// hasZero has the high bit set in the lowest byte of x that is 0, and in
// no byte below it.
func hasZero(x uint64) uint64 {
	return ((x - lsb) &^ x) & msb
}

// hasLess has the high bit set in the lowest byte of x that is less than
// n, and in no byte below it, for n <= 128.
func hasLess(x uint64, n uint64) uint64 {
	return ((x - n*lsb) &^ x) & msb
}

const hexDigits = "0123456789abcdef"

// load64 reads eight bytes of s at i, little-endian.
func load64(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

// Append appends s as a JSON string (RFC 8259): what encoding/json
// writes with HTML escaping off. It escapes the quote, the backslash,
// control characters, U+2028 and U+2029, and writes each byte of invalid
// UTF-8 as U+FFFD. Printable ASCII is scanned eight bytes at a time.
func Append(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	i := 0
	for {
		// Skip printable ASCII eight bytes at a time, up to the first byte
		// that needs a look.
		for i+8 <= len(s) {
			x := load64(s, i)
			if m := x&msb | SpecialMask(x); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
