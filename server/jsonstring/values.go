package jsonstring

import (
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// Value is one string value, object key or number inside a JSON text:
// what a model reads of it (a tool's parameter names and its enum
// values are shown to the model as much as its descriptions).
type Value struct {
	// Path is where it is, from the text's root: ".a.b[2]" ("" for a
	// text that is one string); an object key's is its member's.
	Path string
	// Start and End are its byte span in the text, quotes included.
	Start, End int
	// Text is its decoded content (a number's literal as written).
	Text string
	// Key: an object key; Number: a number (Splice writes either back as
	// a string).
	Key, Number bool
}

// ErrNotJSON is Values' error for a text that is not one JSON value.
var ErrNotJSON = errors.New("not one JSON value")

// Values returns every string value, object key and number inside raw,
// one JSON value, in order; booleans and nulls are skipped. Its error is
// ErrNotJSON.
func Values(raw string) ([]Value, error) {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var out []Value
	type frame struct {
		array bool
		index int
		key   string
		path  string
	}
	var stack []frame
	expectKey := false
	path := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		if f.array {
			return f.path + "[" + strconv.Itoa(f.index) + "]"
		}
		return f.path + "." + f.key
	}
	advance := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].array {
				stack[n-1].index++
			} else {
				expectKey = true
			}
		}
	}
	for {
		before := int(dec.InputOffset())
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) != 0 {
				return nil, ErrNotJSON
			}
			return out, nil
		}
		if err != nil {
			return nil, ErrNotJSON
		}
		if expectKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				expectKey = false
				advance()
				continue
			}
			k, _ := tok.(string)
			stack[len(stack)-1].key = k
			expectKey = false
			after := int(dec.InputOffset())
			start := before + strings.IndexByte(raw[before:after], '"')
			out = append(out, Value{Path: path(), Start: start, End: after, Text: k, Key: true})
			continue
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, frame{path: path()})
				expectKey = true
			case '[':
				stack = append(stack, frame{array: true, path: path()})
			case ']':
				stack = stack[:len(stack)-1]
				advance()
			}
		case string:
			after := int(dec.InputOffset())
			start := before + strings.IndexByte(raw[before:after], '"')
			out = append(out, Value{Path: path(), Start: start, End: after, Text: t})
			advance()
		case json.Number:
			after := int(dec.InputOffset())
			start := before + strings.IndexAny(raw[before:after], "-0123456789")
			out = append(out, Value{Path: path(), Start: start, End: after, Text: string(t), Number: true})
			advance()
		default:
			advance()
		}
	}
}

// Splice returns raw with the span of each value of vs (in raw's order,
// not overlapping) replaced by texts[i] encoded as a JSON string.
func Splice(raw string, vs []Value, texts []string) string {
	var b []byte
	last := 0
	for i, v := range vs {
		b = append(b, raw[last:v.Start]...)
		b = Append(b, texts[i])
		last = v.End
	}
	return string(append(b, raw[last:]...))
}
