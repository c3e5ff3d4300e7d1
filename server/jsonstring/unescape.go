package jsonstring

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Unescape returns raw, JSON text (a tool call's arguments), with the \u
// escapes inside its strings that stand for printable characters written
// as those characters ("\u0034" as "4", "\u200b" as the zero-width space
// itself) and "\/" as "/". Escapes that must stay escapes (a quote, a
// backslash, a control character, a lone surrogate) and every other byte
// are kept, so that valid JSON stays valid and means the same. It is what
// a guardrail must read: whoever uses the arguments decodes them. raw
// need not be valid JSON (a quote starts or ends a string either way).
func Unescape(raw string) string {
	if !strings.Contains(raw, `\`) {
		return raw
	}
	var u Unescaper
	return u.Push(raw) + u.Flush()
}

// Unescaper is [Unescape] over a text that arrives in pieces (a streamed
// tool call's arguments): an escape split across pieces is held until it
// is whole. The zero value is ready; not safe for concurrent use.
type Unescaper struct {
	inString bool
	pending  []byte // an escape not yet whole, from its backslash: ≤ 12 bytes
}

// Push adds a piece and returns what of it (and of the held escape) can
// be written now.
func (u *Unescaper) Push(s string) string {
	if len(u.pending) == 0 && !strings.ContainsAny(s, `\"`) {
		return s // nothing that changes state or needs decoding
	}
	var b strings.Builder
	b.Grow(len(s) + len(u.pending))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if len(u.pending) > 0 {
			u.pending = append(u.pending, c)
			u.escape(&b)
			continue
		}
		switch {
		case c == '"':
			u.inString = !u.inString
			b.WriteByte(c)
		case c == '\\' && u.inString:
			u.pending = append(u.pending[:0], c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Flush ends the text: a held escape, never completed, is written as is.
func (u *Unescaper) Flush() string {
	s := string(u.pending)
	u.pending = u.pending[:0]
	return s
}

// escape looks at the pending escape: when it is whole (or can no longer
// become a decodable one), it writes its result to b, clears it and
// reports true.
func (u *Unescaper) escape(b *strings.Builder) bool {
	p := u.pending
	if len(p) < 2 {
		return false
	}
	if p[1] != 'u' {
		if p[1] == '/' {
			b.WriteByte('/')
		} else {
			b.Write(p[:2]) // \n, \", \\ …: kept
		}
		u.pending = u.pending[:0] // decided at its second byte: nothing follows
		return true
	}
	if len(p) < 6 {
		if len(p) > 2 && !isHex(p[len(p)-1]) {
			u.keep(b)
			return true
		}
		return false
	}
	r, ok := hex4(p[2:6])
	if !ok {
		u.keep(b)
		return true
	}
	if utf16.IsSurrogate(r) {
		if r >= 0xDC00 { // a low surrogate first: not a pair
			u.keep(b)
			return true
		}
		// a high surrogate: its pair's \uDCxx must follow
		if len(p) < 12 {
			if (len(p) == 7 && p[6] != '\\') || (len(p) == 8 && p[7] != 'u') || (len(p) > 8 && !isHex(p[len(p)-1])) {
				u.keep(b)
				return true
			}
			return false
		}
		lo, ok := hex4(p[8:12])
		if !ok || lo < 0xDC00 || lo > 0xDFFF {
			u.keep(b)
			return true
		}
		r = utf16.DecodeRune(r, lo)
	}
	if r < 0x20 || r == '"' || r == '\\' || r == utf8.RuneError {
		b.Write(p) // must stay an escape
	} else {
		b.WriteRune(r)
	}
	u.pending = u.pending[:0]
	return true
}

// keep writes the pending escape's backslash as is and feeds what
// followed it through again (it may hold a quote or a new escape).
func (u *Unescaper) keep(b *strings.Builder) {
	rest := append([]byte(nil), u.pending[1:]...)
	b.WriteByte('\\')
	u.pending = u.pending[:0]
	if len(rest) > 0 && rest[0] == '\\' {
		// "\\" is one escape: write it whole
		b.WriteByte('\\')
		rest = rest[1:]
	}
	b.WriteString(u.Push(string(rest)))
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func hex4(p []byte) (rune, bool) {
	var r rune
	for _, c := range p {
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}
