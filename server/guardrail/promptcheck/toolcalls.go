package promptcheck

import (
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/flexway/flexway/server/jsonstring"
)

// argument is one tool call's function.arguments string in a message's
// raw tool_calls JSON: its byte span there (quotes included) and its
// decoded text.
type argument struct {
	call       int // the tool call's index in the array
	start, end int
	text       string
}

// errToolCalls: the tool_calls JSON is not one JSON value.
var errToolCalls = errors.New("tool_calls is not valid JSON")

// toolArguments finds the function.arguments strings of the tool calls
// in raw, a message's tool_calls JSON (an array of {"function":
// {"arguments": "…"}} objects). A value of another shape holds none;
// arguments that are not a string are not text. The error is
// errToolCalls when raw is not one JSON value.
func toolArguments(raw string) ([]argument, error) {
	dec := json.NewDecoder(strings.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, errToolCalls
	}
	var out []argument
	if tok != json.Delim('[') {
		if err := skip(dec, tok); err != nil {
			return nil, errToolCalls
		}
		return nil, end(dec)
	}
	for i := 0; dec.More(); i++ {
		if out, err = toolCall(dec, raw, i, out); err != nil {
			return nil, errToolCalls
		}
	}
	if _, err := dec.Token(); err != nil { // ']'
		return nil, errToolCalls
	}
	return out, end(dec)
}

// toolCall reads the array's element number i, appending its arguments.
func toolCall(dec *json.Decoder, raw string, i int, out []argument) ([]argument, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return out, skip(dec, tok)
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, err
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		if key != "function" || tok != json.Delim('{') {
			if err := skip(dec, tok); err != nil {
				return nil, err
			}
			continue
		}
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return nil, err
			}
			before := int(dec.InputOffset())
			tok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			s, isString := tok.(string)
			if key != "arguments" || !isString {
				if err := skip(dec, tok); err != nil {
					return nil, err
				}
				continue
			}
			after := int(dec.InputOffset())
			// Between the key and the string: whitespace and the colon.
			start := before + strings.IndexByte(raw[before:after], '"')
			out = append(out, argument{call: i, start: start, end: after, text: s})
		}
		if _, err := dec.Token(); err != nil { // the function's '}'
			return nil, err
		}
	}
	_, err = dec.Token() // the call's '}'
	return out, err
}

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
		return errToolCalls
	}
	return nil
}

// spliceArguments returns raw with the span of each argument of args
// (in raw's order) replaced by its text encoded as a JSON string.
func spliceArguments(raw string, args []argument) string {
	var b []byte
	last := 0
	for _, a := range args {
		b = append(b, raw[last:a.start]...)
		b = jsonstring.Append(b, a.text)
		last = a.end
	}
	return string(append(b, raw[last:]...))
}
