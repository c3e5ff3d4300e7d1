package jsonscan

import (
	"github.com/flexway/flexway/server/jsonstring"
)

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string, byte for byte what json.Marshal
// writes for a Go string: [jsonstring.Append], and <, > and & escaped as
// \u003c, \u003e and \u0026.
func AppendString(dst []byte, s string) []byte {
	html := false
	for i := 0; i < len(s) && !html; i++ {
		html = s[i] == '<' || s[i] == '>' || s[i] == '&'
	}
	if !html {
		return jsonstring.Append(dst, s)
	}
	from := len(dst)
	dst = jsonstring.Append(dst, s)
	return escapeHTML(dst, from)
}

// escapeHTML escapes <, > and & in dst[from:], JSON that has none of them
// outside strings.
func escapeHTML(dst []byte, from int) []byte {
	n := 0
	for _, c := range dst[from:] {
		if c == '<' || c == '>' || c == '&' {
			n++
		}
	}
	if n == 0 {
		return dst
	}
	end := len(dst)
	for range 5 * n {
		dst = append(dst, 0)
	}
	// Move backwards so that each byte is read before it is overwritten.
	w := len(dst)
	for r := end - 1; r >= from; r-- {
		c := dst[r]
		if c == '<' || c == '>' || c == '&' {
			w -= 6
			copy(dst[w:], `\u00`)
			dst[w+4], dst[w+5] = hexDigits[c>>4], hexDigits[c&0xF]
			continue
		}
		w--
		dst[w] = c
	}
	return dst
}

// AppendCompact appends the JSON value raw to dst without its
// insignificant white space, as json.Marshal writes a json.RawMessage
// (<, >, &, U+2028 and U+2029 escaped); ok is false, and dst unchanged,
// when raw is not one JSON value.
func AppendCompact(dst, raw []byte) (out []byte, ok bool) {
	var s Scanner
	s.Reset(raw)
	return appendCompact(dst, raw, &s)
}

// AppendCompactString is [AppendCompact] of a string, read in place.
func AppendCompactString(dst []byte, raw string) (out []byte, ok bool) {
	var s Scanner
	s.resetString(raw)
	return appendCompact(dst, s.data, &s)
}

// appendCompact is AppendCompact of raw, s reading raw.
func appendCompact(dst, raw []byte, s *Scanner) (out []byte, ok bool) {
	s.Skip()
	if !s.Done() {
		return dst, false
	}
	inStr := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inStr:
			switch {
			case c == '\\':
				dst = append(dst, c, raw[i+1])
				i++
				continue
			case c == '"':
				inStr = false
			case c == '<' || c == '>' || c == '&':
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
				continue
			case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8:
				dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[raw[i+2]&0xF])
				i += 2
				continue
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		case c == '"':
			inStr = true
		}
		dst = append(dst, c)
	}
	return dst, true
}
