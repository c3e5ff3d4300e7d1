package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"strings"
)

// semantic finds, in the canonical form c.out, the content of the last
// user message and returns the context key and the text (see [Keys]).
func (c *canon) semantic() (ok bool, ctx Key, text string) {
	out := c.out
	var msgs int = -1
	forMembers(out, 0, func(k []byte, v int) bool {
		if string(k) == "messages" && out[v] == tagArr {
			msgs = v
			return false
		}
		return true
	})
	if msgs < 0 {
		return false, ctx, ""
	}
	cs, ce := -1, -1
	for i := msgs + 1; out[i] != tagArrEnd; i = skip(out, i) {
		if out[i] != tagObj {
			continue
		}
		user, content := false, -1
		forMembers(out, i, func(k []byte, v int) bool {
			switch string(k) {
			case "role":
				user = out[v] == tagStr && string(strBytes(out, v)) == "user"
			case "content":
				content = v
			}
			return true
		})
		if user {
			cs, ce = content, -1
			if content >= 0 {
				ce = skip(out, content)
			}
		}
	}
	if cs < 0 {
		return false, ctx, ""
	}
	text, ok = contentText(out, cs)
	if !ok {
		return false, ctx, ""
	}
	h := sha256.New()
	h.Write(out[:cs])
	h.Write([]byte{tagHole})
	h.Write(out[ce:])
	h.Sum(ctx[:0])
	return true, ctx, text
}

// contentText is the text of a message content at v: a string, or an
// array of parts all of type text (joined with "\n").
func contentText(out []byte, v int) (string, bool) {
	switch out[v] {
	case tagStr:
		return string(strBytes(out, v)), true
	case tagArr:
	default:
		return "", false
	}
	var b strings.Builder
	parts := 0
	for i := v + 1; out[i] != tagArrEnd; i = skip(out, i) {
		if out[i] != tagObj {
			return "", false
		}
		isText, txt := false, -1
		other := false
		forMembers(out, i, func(k []byte, w int) bool {
			switch string(k) {
			case "type":
				isText = out[w] == tagStr && string(strBytes(out, w)) == "text"
			case "text":
				if out[w] == tagStr {
					txt = w
				}
			default:
				other = true // cache_control and friends: not plain text
			}
			return true
		})
		if !isText || txt < 0 || other {
			return "", false
		}
		if parts > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(string(strBytes(out, txt)))
		parts++
	}
	return b.String(), parts > 0
}

// forMembers calls f with each member's key and value offset of
// the object at out[i], until f returns false.
func forMembers(out []byte, i int, f func(k []byte, v int) bool) {
	for j := i + 1; out[j] != tagObjEnd; {
		k := strBytes(out, j)
		v := skip(out, j)
		if !f(k, v) {
			return
		}
		j = skip(out, v)
	}
}

// strBytes is the content of the string at out[i].
func strBytes(out []byte, i int) []byte {
	n := int(binary.BigEndian.Uint32(out[i+1:]))
	return out[i+strHeader : i+strHeader+n]
}

// skip returns the offset just after the value at out[i].
func skip(out []byte, i int) int {
	switch out[i] {
	case tagNull, tagTrue, tagFalse:
		return i + 1
	case tagNum:
		for out[i] != ';' {
			i++
		}
		return i + 1
	case tagStr:
		return i + strHeader + len(strBytes(out, i))
	case tagArr:
		for i++; out[i] != tagArrEnd; i = skip(out, i) {
		}
		return i + 1
	case tagObj:
		for i++; out[i] != tagObjEnd; {
			i = skip(out, skip(out, i))
		}
		return i + 1
	}
	panic("cache: corrupt canonical form")
}
