package gemini

import (
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// errSyntax is the scanner's one error: the event is not the JSON it
// expects.
var errSyntax = errors.New("gemini: malformed stream event")

// eventScan is the hand-written reader of one streamGenerateContent event
// (a GenerateContentResponse, https://ai.google.dev/api/generate-content#generatecontentresponse):
// it reads only the members the stream decoder uses and skips the rest,
// reusing its buffers from event to event, so that a text event costs no
// allocation. Strings are unescaped per RFC 8259; invalid JSON is
// errSyntax.
type eventScan struct {
	data []byte
	pos  int

	// Per event.
	hasError    bool
	usage       gUsageMetadata
	hasUsage    bool
	blockReason []byte
	model       []byte
	responseID  []byte
	cands       []scanCandidate
	ncands      int

	strs []byte // unescaped strings of this event
	keys []byte // the escaped member name being read
}

// key reads a member name: a slice of the data when it has no escape, else
// unescaped into e.keys. It is valid until the next key is read, which is
// enough: a member's callback switches on its name before reading on.
func (e *eventScan) key() ([]byte, error) {
	if e.pos < len(e.data) && e.data[e.pos] == '"' {
		for i := e.pos + 1; i < len(e.data); i++ {
			b := e.data[i]
			if b == '\\' || b < 0x20 {
				break
			}
			if b == '"' {
				k := e.data[e.pos+1 : i]
				e.pos = i + 1
				return k, nil
			}
		}
	}
	var err error
	e.keys, err = e.str(e.keys[:0])
	return e.keys, err
}

type scanCandidate struct {
	index   int64
	finish  []byte
	text    []byte
	thought []byte
	calls   []scanCall
}

type scanCall struct {
	name, args, sig []byte
}

// scan reads data; the results hold until the next call.
func (e *eventScan) scan(data []byte) error {
	e.data, e.pos = data, 0
	e.hasError, e.hasUsage, e.usage = false, false, gUsageMetadata{}
	e.blockReason, e.model, e.responseID = e.blockReason[:0], e.model[:0], e.responseID[:0]
	e.ncands = 0
	e.strs = e.strs[:0]
	err := e.object(func(key []byte) error {
		switch string(key) {
		case "candidates":
			return e.array(func() error { return e.candidate() })
		case "usageMetadata":
			e.hasUsage = true
			return e.usageMetadata()
		case "promptFeedback":
			return e.object(func(k []byte) error {
				if string(k) == "blockReason" {
					var err error
					e.blockReason, err = e.str(e.blockReason[:0])
					return err
				}
				return e.skip()
			})
		case "modelVersion":
			var err error
			e.model, err = e.str(e.model[:0])
			return err
		case "responseId":
			var err error
			e.responseID, err = e.str(e.responseID[:0])
			return err
		case "error":
			e.ws()
			if !e.lit("null") {
				e.hasError = true
			}
			return e.skip()
		}
		return e.skip()
	})
	if err != nil {
		return err
	}
	e.ws()
	if e.pos != len(e.data) {
		return errSyntax
	}
	return nil
}

func (e *eventScan) candidate() error {
	if e.ncands == len(e.cands) {
		e.cands = append(e.cands, scanCandidate{})
	}
	c := &e.cands[e.ncands]
	e.ncands++
	c.index, c.finish, c.text, c.thought, c.calls = 0, c.finish[:0], c.text[:0], c.thought[:0], c.calls[:0]
	return e.object(func(key []byte) error {
		switch string(key) {
		case "index":
			var err error
			c.index, err = e.int()
			return err
		case "finishReason":
			var err error
			c.finish, err = e.str(c.finish[:0])
			return err
		case "content":
			return e.object(func(k []byte) error {
				if string(k) != "parts" {
					return e.skip()
				}
				return e.array(func() error { return e.part(c) })
			})
		}
		return e.skip()
	})
}

func (e *eventScan) part(c *scanCandidate) error {
	var text []byte
	hasText, thought := false, false
	var call scanCall
	hasCall := false
	err := e.object(func(key []byte) error {
		switch string(key) {
		case "text":
			var err error
			from := len(e.strs)
			e.strs, err = e.str(e.strs)
			text, hasText = e.strs[from:], true
			return err
		case "thought":
			e.ws()
			switch {
			case e.lit("true"):
				thought = true
			case e.lit("false"), e.lit("null"):
			default:
				return errSyntax
			}
			return nil
		case "thoughtSignature":
			from := len(e.strs)
			var err error
			e.strs, err = e.str(e.strs)
			call.sig = e.strs[from:]
			return err
		case "functionCall":
			hasCall = true
			return e.object(func(k []byte) error {
				switch string(k) {
				case "name":
					from := len(e.strs)
					var err error
					e.strs, err = e.str(e.strs)
					call.name = e.strs[from:]
					return err
				case "args":
					e.ws()
					from := e.pos
					if err := e.skip(); err != nil {
						return err
					}
					call.args = e.data[from:e.pos]
					return nil
				}
				return e.skip()
			})
		}
		return e.skip()
	})
	if err != nil {
		return err
	}
	switch {
	case hasCall:
		c.calls = append(c.calls, call)
	case hasText && thought:
		c.thought = append(c.thought, text...)
	case hasText:
		c.text = append(c.text, text...)
	}
	return nil
}

func (e *eventScan) usageMetadata() error {
	return e.object(func(key []byte) error {
		var dst *int64
		switch string(key) {
		case "promptTokenCount":
			dst = &e.usage.PromptTokenCount
		case "candidatesTokenCount":
			dst = &e.usage.CandidatesTokenCount
		case "totalTokenCount":
			dst = &e.usage.TotalTokenCount
		case "cachedContentTokenCount":
			dst = &e.usage.CachedContentTokenCount
		case "thoughtsTokenCount":
			dst = &e.usage.ThoughtsTokenCount
		case "toolUsePromptTokenCount":
			dst = &e.usage.ToolUsePromptTokenCount
		default:
			return e.skip()
		}
		var err error
		*dst, err = e.int()
		return err
	})
}

func (e *eventScan) ws() {
	for e.pos < len(e.data) {
		switch e.data[e.pos] {
		case ' ', '\t', '\n', '\r':
			e.pos++
		default:
			return
		}
	}
}

// lit consumes the literal s if it comes next.
func (e *eventScan) lit(s string) bool {
	if len(e.data)-e.pos >= len(s) && string(e.data[e.pos:e.pos+len(s)]) == s {
		e.pos += len(s)
		return true
	}
	return false
}

// object reads an object (or null), calling member for each key with the
// position at its value.
func (e *eventScan) object(member func(key []byte) error) error {
	return e.seq('{', '}', func() error {
		e.ws()
		k, err := e.key()
		if err != nil {
			return err
		}
		e.ws()
		if e.pos >= len(e.data) || e.data[e.pos] != ':' {
			return errSyntax
		}
		e.pos++
		return member(k)
	})
}

// array reads an array (or null), calling elem for each element.
func (e *eventScan) array(elem func() error) error {
	return e.seq('[', ']', elem)
}

// seq reads null or open, elements separated by commas, close.
func (e *eventScan) seq(open, close byte, elem func() error) error {
	e.ws()
	if e.lit("null") {
		return nil
	}
	if e.pos >= len(e.data) || e.data[e.pos] != open {
		return errSyntax
	}
	e.pos++
	e.ws()
	if e.pos < len(e.data) && e.data[e.pos] == close {
		e.pos++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		e.ws()
		if e.pos >= len(e.data) {
			return errSyntax
		}
		switch e.data[e.pos] {
		case ',':
			e.pos++
		case close:
			e.pos++
			return nil
		default:
			return errSyntax
		}
	}
}

// int reads a JSON integer (a number without fraction or exponent) up to
// 2^53, or null as 0.
func (e *eventScan) int() (int64, error) {
	e.ws()
	if e.lit("null") {
		return 0, nil
	}
	neg := e.pos < len(e.data) && e.data[e.pos] == '-'
	if neg {
		e.pos++
	}
	start := e.pos
	var n int64
	for e.pos < len(e.data) && e.data[e.pos] >= '0' && e.data[e.pos] <= '9' {
		n = n*10 + int64(e.data[e.pos]-'0')
		e.pos++
		if n > 1<<53 {
			return 0, errSyntax
		}
	}
	if e.pos == start || (e.data[start] == '0' && e.pos-start > 1) {
		return 0, errSyntax
	}
	if neg {
		n = -n
	}
	return n, nil
}

// str appends the unescaped string that comes next to dst (null appends
// nothing).
func (e *eventScan) str(dst []byte) ([]byte, error) {
	e.ws()
	if e.lit("null") {
		return dst, nil
	}
	if e.pos >= len(e.data) || e.data[e.pos] != '"' {
		return dst, errSyntax
	}
	e.pos++
	for {
		start := e.pos
		for e.pos < len(e.data) {
			b := e.data[e.pos]
			if b == '"' || b == '\\' || b < 0x20 {
				break
			}
			e.pos++
		}
		dst = append(dst, e.data[start:e.pos]...)
		if e.pos >= len(e.data) || e.data[e.pos] < 0x20 {
			return dst, errSyntax
		}
		if e.data[e.pos] == '"' {
			e.pos++
			return dst, nil
		}
		e.pos++ // the backslash
		if e.pos >= len(e.data) {
			return dst, errSyntax
		}
		c := e.data[e.pos]
		e.pos++
		switch c {
		case '"', '\\', '/':
			dst = append(dst, c)
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
			r, ok := e.hex4()
			if !ok {
				return dst, errSyntax
			}
			if utf16.IsSurrogate(r) {
				// A pair makes one rune; a lone surrogate is U+FFFD, as
				// encoding/json reads it.
				paired := false
				save := e.pos
				if e.lit(`\u`) {
					if r2, ok := e.hex4(); ok {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							r, paired = d, true
						}
					}
				}
				if !paired {
					e.pos, r = save, utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, errSyntax
		}
	}
}

func (e *eventScan) hex4() (rune, bool) {
	if len(e.data)-e.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range e.data[e.pos : e.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	e.pos += 4
	return r, true
}

// skip consumes one JSON value of any kind.
func (e *eventScan) skip() error {
	e.ws()
	if e.pos >= len(e.data) {
		return errSyntax
	}
	switch c := e.data[e.pos]; {
	case c == '{':
		return e.object(func([]byte) error { return e.skip() })
	case c == '[':
		return e.array(e.skip)
	case c == '"':
		var scratch [64]byte
		_, err := e.str(scratch[:0])
		return err
	case e.lit("true"), e.lit("false"), e.lit("null"):
		return nil
	case c == '-' || (c >= '0' && c <= '9'):
		return e.number()
	}
	return errSyntax
}

// number consumes a JSON number per RFC 8259's grammar.
func (e *eventScan) number() error {
	digits := func() int {
		n := 0
		for e.pos < len(e.data) && e.data[e.pos] >= '0' && e.data[e.pos] <= '9' {
			e.pos++
			n++
		}
		return n
	}
	if e.data[e.pos] == '-' {
		e.pos++
	}
	start := e.pos
	if n := digits(); n == 0 || (n > 1 && e.data[start] == '0') {
		return errSyntax
	}
	if e.pos < len(e.data) && e.data[e.pos] == '.' {
		e.pos++
		if digits() == 0 {
			return errSyntax
		}
	}
	if e.pos < len(e.data) && (e.data[e.pos] == 'e' || e.data[e.pos] == 'E') {
		e.pos++
		if e.pos < len(e.data) && (e.data[e.pos] == '+' || e.data[e.pos] == '-') {
			e.pos++
		}
		if digits() == 0 {
			return errSyntax
		}
	}
	return nil
}
