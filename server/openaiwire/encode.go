package openaiwire

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/flexway/flexway/server/jsonstring"
)

// appendFloat appends f as a JSON number, in the shortest form that reads
// back as the same float64 and in encoding/json's notation; NaN and the
// infinities, which JSON cannot write, are written as null.
func appendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// Clean up e-09 to e-9, as encoding/json does.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// object tracks the members written to one JSON object.
type object struct {
	dst   []byte
	empty bool
}

// open starts an object on dst.
func open(dst []byte) object {
	return object{dst: append(dst, '{'), empty: true}
}

// key writes the separator and a key known to need no escaping.
func (o *object) key(k string) {
	if !o.empty {
		o.dst = append(o.dst, ',')
	}
	o.empty = false
	o.dst = append(o.dst, '"')
	o.dst = append(o.dst, k...)
	o.dst = append(o.dst, '"', ':')
}

// str writes a string member.
func (o *object) str(k, v string) {
	o.key(k)
	o.dst = jsonstring.Append(o.dst, v)
}

// int writes an integer member.
func (o *object) int(k string, v int64) {
	o.key(k)
	o.dst = strconv.AppendInt(o.dst, v, 10)
}

// bool writes a boolean member.
func (o *object) bool(k string, v bool) {
	o.key(k)
	o.dst = strconv.AppendBool(o.dst, v)
}

// null writes a null member.
func (o *object) null(k string) {
	o.key(k)
	o.dst = append(o.dst, "null"...)
}

// extras writes the members of m sorted by key, skipping the keys for
// which typed reports true (the typed fields written already). In strict
// mode (requests) a value that is not one valid JSON value is an error
// naming its key, and values are written byte for byte. Otherwise
// (responses) such a value is written as null, and a value holding a raw
// line break is written compacted, so that a chunk always fits one SSE
// data line.
func (o *object) extras(m map[string]string, typed func(string) bool, strict bool) error {
	if len(m) == 0 {
		return nil
	}
	var buf [16]string
	keys := buf[:0]
	for k := range m {
		if typed == nil || !typed(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := m[k]
		if !validRaw(v) {
			if strict {
				return fieldErr(k, "extra field value %.40q is not valid JSON", v)
			}
			v = "null"
		}
		if !o.empty {
			o.dst = append(o.dst, ',')
		}
		o.empty = false
		o.dst = jsonstring.Append(o.dst, k)
		o.dst = append(o.dst, ':')
		if !strict && strings.ContainsAny(v, "\r\n") {
			o.dst = appendCompact(o.dst, v)
		} else {
			o.dst = append(o.dst, v...)
		}
	}
	return nil
}

// appendCompact appends the valid JSON value v without the whitespace
// between its tokens.
func appendCompact(dst []byte, v string) []byte {
	inString := false
	start := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case inString:
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			dst = append(dst, v[start:i]...)
			start = i + 1
		}
	}
	return append(dst, v[start:]...)
}

// close ends the object and returns the extended slice.
func (o *object) close() []byte {
	return append(o.dst, '}')
}
