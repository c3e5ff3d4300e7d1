package jsonschema

import (
	"encoding/json"
	"errors"
	"fmt"
)

// FromResponseFormat returns the schema of a chat request's
// response_format, raw its JSON text as the request carried it:
// {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}.
// It is nil, without error, when raw is empty or null, or of type text or
// json_object (no schema: the rule does nothing), or of type json_schema
// without a schema. It fails when raw is not an object of that shape or
// the schema does not compile (wrapping [ErrRemoteRef] for a reference
// that would be fetched). Compiled schemas are cached ([CompileJSON]).
func FromResponseFormat(raw string) (*Schema, error) {
	if raw == "" || raw == "null" {
		return nil, nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal([]byte(raw), &rf); err != nil {
		return nil, errors.New("response_format is not an object of the expected shape")
	}
	if rf.Type != "json_schema" || rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 || string(rf.JSONSchema.Schema) == "null" {
		return nil, nil
	}
	s, err := CompileJSON(rf.JSONSchema.Schema)
	if err != nil {
		return nil, fmt.Errorf("response_format.json_schema.schema: %w", err)
	}
	return s, nil
}

// Tools are the parameter schemas of a request's function tools, by
// name, compiled on first use (through the cache). Safe for concurrent use
// once built; the zero value and nil declare no tool.
type Tools struct {
	params map[string]json.RawMessage // nil value: declared without parameters
}

// FromTools reads a chat request's tools, raw its JSON text as the request
// carried it ([{"type": "function", "function": {"name", "parameters",
// …}}, …]); tools of other types are ignored. nil, without error, for
// empty or null. It fails when raw is not an array of objects.
func FromTools(raw string) (*Tools, error) {
	if raw == "" || raw == "null" {
		return nil, nil
	}
	var list []struct {
		Type     string `json:"type"`
		Function *struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal([]byte(raw), &list); err != nil {
		return nil, errors.New("tools is not an array of tool objects")
	}
	t := &Tools{params: make(map[string]json.RawMessage, len(list))}
	for _, tl := range list {
		if tl.Type != "function" || tl.Function == nil || tl.Function.Name == "" {
			continue
		}
		p := tl.Function.Parameters
		if string(p) == "null" {
			p = nil
		}
		t.params[tl.Function.Name] = p
	}
	return t, nil
}

// ErrUnknownTool is wrapped by [Tools.Validate]'s error for a tool call to
// a function the request did not declare.
var ErrUnknownTool = errors.New("the request declares no such tool")

// Validate checks a tool call's arguments (its JSON text) against the
// parameters schema of the tool it names: nil when valid or when the tool
// declares no parameters; an error wrapping [ErrUnknownTool] when the
// request declared no function of that name; the schema's compile error
// (prefixed with the tool's name); else what [Schema.Validate] returns.
func (t *Tools) Validate(name, arguments string) error {
	var p json.RawMessage
	ok := false
	if t != nil {
		p, ok = t.params[name]
	}
	if !ok {
		return fmt.Errorf("tool %q: %w", clip(name, 64), ErrUnknownTool)
	}
	if p == nil {
		return nil
	}
	s, err := CompileJSON(p)
	if err != nil {
		return fmt.Errorf("tool %q parameters: %w", clip(name, 64), err)
	}
	return s.Validate(arguments)
}
