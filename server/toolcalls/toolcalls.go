// Package toolcalls reads the tool_calls of an OpenAI chat message (a
// request's message, an answer's message, a stream delta) from the raw
// JSON Flexway keeps them in: each call's index, function name, and the
// byte span and text of its function.arguments string, so that the
// guardrails check the arguments and rewrite them in place, every other
// byte kept. The shape is OpenAI's (Chat Completions API reference,
// "tool_calls": an array of {"id", "type": "function", "function":
// {"name", "arguments"}}; stream deltas add "index"). Both phases use it:
// the prompt check refuses what it cannot read, the answer guard checks
// an unreadable value as a field it does not model.
package toolcalls

import (
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/flexway/flexway/server/jsonstring"
)

// Call is one element of a tool_calls array.
type Call struct {
	// Index is the call's "index" field (stream deltas), else its
	// position in the array.
	Index int
	// Name is function.name; "" when absent or null.
	Name string
	// Start and End are the byte span of function.arguments in the raw
	// JSON, quotes included; Start is -1 when the call has no arguments
	// string (absent or null).
	Start, End int
	// Arguments is function.arguments decoded from its JSON string, one
	// level: the JSON inside it keeps its own escapes.
	Arguments string
	// Other is set when the call carries a field besides index and
	// function.arguments (an id, a type, a name): a stream delta holding
	// it goes out even when its arguments are held back.
	Other bool
	// Unindexed is set when the call has no "index" field (Index is then
	// its position).
	Unindexed bool
}

// ErrNotJSON is Parse's error for a value that is not one JSON value.
var ErrNotJSON = errors.New("tool_calls is not valid JSON")

// ShapeError is Parse's error for tool_calls that are JSON but not of
// OpenAI's shape.
type ShapeError struct {
	// Path is where, from tool_calls: "[1].function.arguments", "" for
	// the value itself.
	Path string
	// Want is what it must be: "an array", "a string", "unique keys"…
	Want string
}

// Error is "tool_calls<Path> must be <Want>".
func (e *ShapeError) Error() string { return "tool_calls" + e.Path + " must be " + e.Want }

// maxIndex bounds a call's "index": a stream delta's calls are numbered
// from 0, one per call of the answer.
const maxIndex = 1 << 16

// Parse reads raw, a tool_calls value, and appends its calls to dst.
// What it reads: null (no call), or an array of objects in which
// "index", when present, is an integer from 0 to 65536 and "function",
// when present and not null, is an object whose "name" and "arguments",
// when present and not null, are strings, these keys matched in any
// case as encoding/json matches them; no key of these twice (which
// one a reader takes differs from reader to reader, so a second
// arguments string could pass unchecked). Any other field is allowed
// (and sets Other). Its error is ErrNotJSON or a *ShapeError; dst's
// calls are returned with it.
func Parse(raw string, dst []Call) ([]Call, error) {
	if !json.Valid([]byte(raw)) {
		// first: a shape error is only ever said of JSON
		return dst, ErrNotJSON
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return dst, ErrNotJSON
	}
	if tok == nil {
		return dst, end(dec)
	}
	if tok != json.Delim('[') {
		if err := skip(dec, tok); err != nil || end(dec) != nil {
			return dst, ErrNotJSON
		}
		return dst, shape("", "an array")
	}
	n := len(dst)
	for pos := 0; dec.More(); pos++ {
		if dst, err = call(dec, raw, pos, dst); err != nil {
			return dst[:n], err
		}
	}
	if _, err := dec.Token(); err != nil { // ']'
		return dst[:n], ErrNotJSON
	}
	if err := end(dec); err != nil {
		return dst[:n], err
	}
	return dst, nil
}

// call reads the array's element number pos.
func call(dec *json.Decoder, raw string, pos int, dst []Call) ([]Call, error) {
	at := "[" + strconv.Itoa(pos) + "]"
	tok, err := dec.Token()
	if err != nil {
		return dst, ErrNotJSON
	}
	if tok != json.Delim('{') {
		if err := skip(dec, tok); err != nil {
			return dst, ErrNotJSON
		}
		return dst, shape(at, "an object")
	}
	c := Call{Index: pos, Start: -1, Unindexed: true}
	var seenIndex, seenFunction bool
	for dec.More() {
		tk, err := dec.Token()
		if err != nil {
			return dst, ErrNotJSON
		}
		switch fold(tk.(string), "index", "function") {
		case "index":
			if seenIndex {
				return dst, shape(at, "an object with one index")
			}
			seenIndex = true
			tok, err := dec.Token()
			if err != nil {
				return dst, ErrNotJSON
			}
			num, ok := tok.(json.Number)
			i, err := strconv.Atoi(num.String())
			if !ok || err != nil || i < 0 || i > maxIndex {
				if err := skip(dec, tok); err != nil {
					return dst, ErrNotJSON
				}
				return dst, shape(at+".index", "an integer from 0 to 65536")
			}
			c.Index, c.Unindexed = i, false
		case "function":
			if seenFunction {
				return dst, shape(at, "an object with one function")
			}
			seenFunction = true
			if err := function(dec, raw, at+".function", &c); err != nil {
				return dst, err
			}
		default:
			c.Other = true
			tok, err := dec.Token()
			if err != nil {
				return dst, ErrNotJSON
			}
			if err := skip(dec, tok); err != nil {
				return dst, ErrNotJSON
			}
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return dst, ErrNotJSON
	}
	return append(dst, c), nil
}

// function reads a call's "function" value into c.
func function(dec *json.Decoder, raw, at string, c *Call) error {
	tok, err := dec.Token()
	if err != nil {
		return ErrNotJSON
	}
	if tok == nil {
		return nil
	}
	if tok != json.Delim('{') {
		if err := skip(dec, tok); err != nil {
			return ErrNotJSON
		}
		return shape(at, "an object")
	}
	var seenName, seenArgs bool
	for dec.More() {
		tk, err := dec.Token()
		if err != nil {
			return ErrNotJSON
		}
		key := fold(tk.(string), "name", "arguments")
		before := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return ErrNotJSON
		}
		switch key {
		case "name", "arguments":
			seen := &seenName
			if key == "arguments" {
				seen = &seenArgs
			}
			if *seen {
				return shape(at, "an object with one "+key)
			}
			*seen = true
			if tok == nil {
				if key == "name" {
					c.Other = true
				}
				continue
			}
			s, ok := tok.(string)
			if !ok {
				if err := skip(dec, tok); err != nil {
					return ErrNotJSON
				}
				return shape(at+"."+key, "a string")
			}
			if key == "name" {
				c.Name, c.Other = s, true
				continue
			}
			after := int(dec.InputOffset())
			// Between the key and the string: whitespace and the colon.
			c.Start, c.End, c.Arguments = before+strings.IndexByte(raw[before:after], '"'), after, s
		default:
			c.Other = true
			if err := skip(dec, tok); err != nil {
				return ErrNotJSON
			}
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return ErrNotJSON
	}
	return nil
}

// fold is the known key k spells in any case (Go's encoding/json, which
// the translations read tool calls with, matches keys so: "Arguments" is
// the arguments), else k.
func fold(k string, known ...string) string {
	for _, w := range known {
		if strings.EqualFold(k, w) {
			return w
		}
	}
	return k
}

func shape(path, want string) error { return &ShapeError{Path: path, Want: want} }

// skip consumes the rest of the value that tok begins.
func skip(dec *json.Decoder, tok json.Token) error {
	d, ok := tok.(json.Delim)
	if !ok || (d != '{' && d != '[') {
		return nil
	}
	for depth := 1; depth > 0; {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := t.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}

// end checks that nothing but whitespace follows the value.
func end(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		return ErrNotJSON
	}
	return nil
}

// Splice returns raw with the arguments of calls[i] (as Parse returned
// them for raw, in order) replaced by texts[i] encoded as a JSON string;
// a call without an arguments string (Start < 0) is left alone, and so
// is every other byte.
func Splice(raw string, calls []Call, texts []string) string {
	var b []byte
	last := 0
	for i, c := range calls {
		if c.Start < 0 {
			continue
		}
		b = append(b, raw[last:c.Start]...)
		b = jsonstring.Append(b, texts[i])
		last = c.End
	}
	return string(append(b, raw[last:]...))
}
