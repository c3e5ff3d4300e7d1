package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"math/bits"
	"slices"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/flexway/flexway/server/jsonstring"
)

// Key is the SHA-256 of a request's canonical form (see the package doc).
type Key [32]byte

// String is the key in hex.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// ErrUncacheable is returned (wrapped) for a body that is not one JSON
// object, is nested deeper than 64 levels, or has a number whose exponent
// does not fit in 15 digits: the call bypasses the cache.
var ErrUncacheable = errors.New("cache: request not cacheable")

// Keys are the keys of one request.
type Keys struct {
	// Exact is the key of the whole request (exact mode, and the entry
	// key of semantic mode).
	Exact Key
	// Semantic is set when semantic keys were asked for and the request
	// has a last user message whose content is text (a string, or parts
	// all of type text); Context and Text are set only then.
	Semantic bool
	// Context is the key of the request without the content of its last
	// user message: with the partition, it names the semantic index.
	Context Key
	// Text is the last user message's text; parts are joined with "\n".
	Text string
}

// ignored are the top-level members that do not change the answer.
func ignored(key []byte) bool {
	switch string(key) {
	case "model", "stream", "stream_options":
		return true
	}
	return false
}

// NewKeys computes the keys of body, a request's JSON object as the caller
// sent it; withSemantic also computes the context key and the text. An
// error wraps [ErrUncacheable].
func NewKeys(body []byte, withSemantic bool) (Keys, error) {
	c := canonPool.Get().(*canon)
	defer canonPool.Put(c)
	var ks Keys
	if err := c.run(body); err != nil {
		return ks, err
	}
	ks.Exact = sha256.Sum256(c.out)
	if withSemantic {
		ks.Semantic, ks.Context, ks.Text = c.semantic()
	}
	return ks, nil
}

// ExactKey is NewKeys(body, false).Exact.
func ExactKey(body []byte) (Key, error) {
	ks, err := NewKeys(body, false)
	return ks.Exact, err
}

// The canonical form is a prefix code, so that two different values never
// have the same encoding:
//
//	null 'n', true 't', false 'f'
//	number 'd' <sign '-'?> <digits, no leading or trailing 0> 'e' <exponent> ';'   (zero is "d0;")
//	string 's' <length, 4 bytes big-endian> <bytes, unescaped>
//	array '[' <values> ']'
//	object '{' (<key string> <value>)* '}', members sorted by key (bytesCompare)
const (
	tagNull, tagTrue, tagFalse = 'n', 't', 'f'
	tagNum, tagStr             = 'd', 's'
	tagArr, tagArrEnd          = '[', ']'
	tagObj, tagObjEnd          = '{', '}'
	tagHole                    = 'x' // the removed content, in the context key
	strHeader                  = 5   // tagStr and the length
	maxDepth                   = 64
)

var canonPool = sync.Pool{New: func() any { return &canon{out: make([]byte, 0, 8192)} }}

// canon writes the canonical form of a JSON object; reused through
// canonPool, not safe for concurrent use.
type canon struct {
	src   []byte
	pos   int
	out   []byte
	tmp   []byte
	spans []member
	depth int
}

// member is one object member in out: [start, end), its key's unescaped
// bytes at [kstart, kend).
type member struct{ start, kstart, kend, end int }

func uncacheable(what string) error { return errors.Join(ErrUncacheable, errors.New(what)) }

func (c *canon) run(body []byte) error {
	c.src, c.pos, c.out, c.spans, c.depth = body, 0, c.out[:0], c.spans[:0], 0
	c.ws()
	if c.pos >= len(c.src) || c.src[c.pos] != '{' {
		return uncacheable("not a JSON object")
	}
	if err := c.object(true); err != nil {
		return err
	}
	c.ws()
	if c.pos != len(c.src) {
		return uncacheable("bytes after the JSON object")
	}
	return nil
}

func (c *canon) ws() {
	for c.pos < len(c.src) {
		switch c.src[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canon) value() error {
	c.ws()
	if c.pos >= len(c.src) {
		return uncacheable("truncated JSON")
	}
	switch b := c.src[c.pos]; {
	case b == '"':
		return c.str()
	case b == '{':
		return c.object(false)
	case b == '[':
		return c.array()
	case b == '-' || b >= '0' && b <= '9':
		return c.number()
	default:
		return c.literal()
	}
}

func (c *canon) literal() error {
	for _, l := range [...]struct {
		s   string
		tag byte
	}{{"null", tagNull}, {"true", tagTrue}, {"false", tagFalse}} {
		if len(c.src)-c.pos >= len(l.s) && string(c.src[c.pos:c.pos+len(l.s)]) == l.s {
			c.pos += len(l.s)
			c.out = append(c.out, l.tag)
			return nil
		}
	}
	return uncacheable("invalid JSON value")
}

func (c *canon) array() error {
	if c.depth++; c.depth > maxDepth {
		return uncacheable("nested too deep")
	}
	c.pos++
	c.out = append(c.out, tagArr)
	c.ws()
	if c.pos < len(c.src) && c.src[c.pos] == ']' {
		c.pos++
	} else {
		for {
			if err := c.value(); err != nil {
				return err
			}
			c.ws()
			if c.pos >= len(c.src) {
				return uncacheable("truncated JSON")
			}
			if b := c.src[c.pos]; b == ']' {
				c.pos++
				break
			} else if b != ',' {
				return uncacheable("invalid JSON array")
			}
			c.pos++
		}
	}
	c.out = append(c.out, tagArrEnd)
	c.depth--
	return nil
}

// object writes the object at c.pos with its members sorted; top drops
// the members that do not change the answer.
func (c *canon) object(top bool) error {
	if c.depth++; c.depth > maxDepth {
		return uncacheable("nested too deep")
	}
	c.pos++
	c.out = append(c.out, tagObj)
	base := len(c.spans)
	c.ws()
	if c.pos < len(c.src) && c.src[c.pos] == '}' {
		c.pos++
	} else {
		for {
			c.ws()
			if c.pos >= len(c.src) || c.src[c.pos] != '"' {
				return uncacheable("invalid JSON object")
			}
			m := member{start: len(c.out), kstart: len(c.out) + strHeader}
			if err := c.str(); err != nil {
				return err
			}
			m.kend = len(c.out)
			c.ws()
			if c.pos >= len(c.src) || c.src[c.pos] != ':' {
				return uncacheable("invalid JSON object")
			}
			c.pos++
			if err := c.value(); err != nil {
				return err
			}
			m.end = len(c.out)
			if top && ignored(c.out[m.kstart:m.kend]) {
				c.out = c.out[:m.start]
			} else {
				c.spans = append(c.spans, m)
			}
			c.ws()
			if c.pos >= len(c.src) {
				return uncacheable("truncated JSON")
			}
			if b := c.src[c.pos]; b == '}' {
				c.pos++
				break
			} else if b != ',' {
				return uncacheable("invalid JSON object")
			}
			c.pos++
		}
	}
	c.sortMembers(c.spans[base:])
	c.spans = c.spans[:base]
	c.out = append(c.out, tagObjEnd)
	c.depth--
	return nil
}

// sortMembers reorders the members ms, contiguous in c.out, by key; a
// stable sort, so duplicate keys keep their order.
func (c *canon) sortMembers(ms []member) {
	cmpKey := func(a, b member) int {
		return bytesCompare(c.out[a.kstart:a.kend], c.out[b.kstart:b.kend])
	}
	if len(ms) < 2 || slices.IsSortedFunc(ms, cmpKey) {
		return
	}
	start, end := ms[0].start, ms[len(ms)-1].end
	slices.SortStableFunc(ms, cmpKey)
	c.tmp = c.tmp[:0]
	for _, m := range ms {
		c.tmp = append(c.tmp, c.out[m.start:m.end]...)
	}
	copy(c.out[start:end], c.tmp)
}

// bytesCompare orders keys by length, then bytewise: any fixed total
// order makes a canonical form, and this one is already the order in
// which clients write the common objects ("role" before "content",
// "type" before "function"), so that most objects need no reordering.
func bytesCompare(a, b []byte) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	n := len(a)
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return len(a) - len(b)
}

// str writes the string at c.pos (its opening quote), unescaped.
func (c *canon) str() error {
	src, pos := c.src, c.pos+1
	// Short plain strings (keys, roles) end before the call overhead of
	// IndexByte pays: the first 16 bytes eight at a time, the mask's
	// lowest bit marking the first quote, backslash or control byte.
	for i := pos; i+8 <= len(src) && i < pos+16; i += 8 {
		if m := jsonstring.SpecialMask(binary.LittleEndian.Uint64(src[i : i+8])); m != 0 {
			if j := i + bits.TrailingZeros64(m)>>3; src[j] == '"' {
				c.out = append(append(c.out, tagStr, 0, 0, 0, byte(j-pos)), src[pos:j]...)
				c.pos = j + 1
				return nil
			}
			break
		}
	}
	start := len(c.out)
	out := append(c.out, tagStr, 0, 0, 0, 0)
	defer func() { c.out = out }()
	qpos := -1 // a quote at or after pos, the string's end unless escaped
	for {
		// The run of plain bytes ends at the next backslash before the
		// next quote; both found with the SIMD IndexByte. A raw control
		// character (invalid JSON, which the request decoder refuses) is
		// kept as a byte: it makes no two strings alike.
		if qpos < pos {
			q := bytes.IndexByte(src[pos:], '"')
			if q < 0 {
				return uncacheable("truncated JSON string")
			}
			qpos = pos + q
		}
		end := qpos
		if bs := bytes.IndexByte(src[pos:qpos], '\\'); bs >= 0 {
			end = pos + bs
		}
		out = append(out, src[pos:end]...)
		pos = end
		if pos == qpos {
			c.pos = pos + 1
			n := len(out) - start - strHeader
			if n > math.MaxUint32 {
				return uncacheable("string longer than 4 GiB")
			}
			binary.BigEndian.PutUint32(out[start+1:], uint32(n))
			return nil
		}
		// A backslash.
		if pos+1 >= len(src) {
			return uncacheable("truncated JSON string")
		}
		e := src[pos+1]
		pos += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(src, pos)
			if !ok {
				return uncacheable("invalid \\u escape")
			}
			pos += 4
			if utf16.IsSurrogate(r) {
				// A pair makes one rune; a lone surrogate is U+FFFD, as
				// encoding/json decodes it (the escape after it is read
				// on its own).
				if pos+1 < len(src) && src[pos] == '\\' && src[pos+1] == 'u' {
					r2, ok := hex4(src, pos+2)
					if !ok {
						return uncacheable("invalid \\u escape")
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
						pos += 6
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return uncacheable("invalid escape in a JSON string")
		}
	}
}

// hex4 reads the four hex digits at src[pos:].
func hex4(src []byte, pos int) (rune, bool) {
	if pos+4 > len(src) {
		return 0, false
	}
	var r rune
	for _, b := range src[pos : pos+4] {
		switch {
		case b >= '0' && b <= '9':
			b -= '0'
		case b >= 'a' && b <= 'f':
			b -= 'a' - 10
		case b >= 'A' && b <= 'F':
			b -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(b)
	}
	return r, true
}

// number writes the number at c.pos as an exact decimal: sign, significant
// digits without leading or trailing zeros, and the exponent of the last
// digit.
func (c *canon) number() error {
	src := c.src
	neg := false
	if src[c.pos] == '-' {
		neg = true
		c.pos++
	}
	intStart := c.pos
	for c.pos < len(src) && src[c.pos] >= '0' && src[c.pos] <= '9' {
		c.pos++
	}
	intEnd := c.pos
	if intEnd == intStart || src[intStart] == '0' && intEnd-intStart > 1 {
		return uncacheable("invalid JSON number")
	}
	fracStart, fracEnd := c.pos, c.pos
	if c.pos < len(src) && src[c.pos] == '.' {
		c.pos++
		fracStart = c.pos
		for c.pos < len(src) && src[c.pos] >= '0' && src[c.pos] <= '9' {
			c.pos++
		}
		fracEnd = c.pos
		if fracEnd == fracStart {
			return uncacheable("invalid JSON number")
		}
	}
	var exp int64
	if c.pos < len(src) && (src[c.pos] == 'e' || src[c.pos] == 'E') {
		c.pos++
		eneg := false
		if c.pos < len(src) && (src[c.pos] == '+' || src[c.pos] == '-') {
			eneg = src[c.pos] == '-'
			c.pos++
		}
		es := c.pos
		for c.pos < len(src) && src[c.pos] >= '0' && src[c.pos] <= '9' {
			if exp = exp*10 + int64(src[c.pos]-'0'); exp > 1e15 {
				return uncacheable("number exponent too large")
			}
			c.pos++
		}
		if c.pos == es {
			return uncacheable("invalid JSON number")
		}
		if eneg {
			exp = -exp
		}
	}
	// The digits are src[intStart:intEnd] followed by src[fracStart:fracEnd],
	// the value digits × 10^(exp - fraction length).
	exp -= int64(fracEnd - fracStart)
	digit := func(i int) byte { // i-th digit of the concatenation
		if n := intEnd - intStart; i < n {
			return src[intStart+i]
		} else {
			return src[fracStart+i-n]
		}
	}
	n := (intEnd - intStart) + (fracEnd - fracStart)
	lo, hi := 0, n
	for lo < hi && digit(lo) == '0' {
		lo++
	}
	for hi > lo && digit(hi-1) == '0' {
		hi--
		exp++
	}
	c.out = append(c.out, tagNum)
	if lo == hi {
		c.out = append(c.out, '0', ';')
		return nil
	}
	if neg {
		c.out = append(c.out, '-')
	}
	for i := lo; i < hi; i++ {
		c.out = append(c.out, digit(i))
	}
	c.out = append(c.out, 'e')
	c.out = appendInt(c.out, exp)
	c.out = append(c.out, ';')
	return nil
}

func appendInt(b []byte, v int64) []byte {
	if v < 0 {
		b = append(b, '-')
		v = -v
	}
	var d [20]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + v%10)
		if v /= 10; v == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}
