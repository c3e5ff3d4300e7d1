package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// reduceSchemaReference is the former, map-based ReduceSchema, kept as
// the oracle the byte-level one is checked against: it returns a JSON Schema (a tool's parameters, a
// response_format schema) reduced to the OpenAPI subset Gemini's Schema
// accepts (https://ai.google.dev/api/caching#Schema): `$schema`, `$id`,
// `$comment`, `additionalProperties`, `$defs` and `definitions` removed;
// every local `$ref` ("#/$defs/X", "#/definitions/X") replaced by what it
// names; `type: [X, "null"]` turned into `type: X, nullable: true`. Keys
// come out sorted; numbers are kept as written.
//
// Errors: the schema is not a JSON object, a `$ref` is not local or names
// nothing, `$ref`s form a cycle or the schema nests deeper than 64, or a
// type array holds more than one non-null type.
func reduceSchemaReference(raw []byte) (json.RawMessage, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var root any
	if err := d.Decode(&root); err != nil {
		return nil, errors.New("the schema is not JSON")
	}
	obj, ok := root.(map[string]any)
	if !ok {
		return nil, errors.New("the schema must be a JSON object")
	}
	r := refReducer{root: obj}
	out, err := r.reduce(obj, 0, nil)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

type refReducer struct{ root map[string]any }

func (r *refReducer) reduce(v any, depth int, refs []string) (any, error) {
	if depth > maxSchemaDepth {
		return nil, errors.New("the schema nests too deep")
	}
	switch t := v.(type) {
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			var err error
			if out[i], err = r.reduce(e, depth+1, refs); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		if ref, ok := t["$ref"].(string); ok {
			for _, seen := range refs {
				if seen == ref {
					return nil, errors.New("the schema's $ref " + ref + " is cyclic; Gemini takes no $ref")
				}
			}
			target, err := r.resolve(ref)
			if err != nil {
				return nil, err
			}
			return r.reduce(target, depth+1, append(refs, ref))
		}
		out := make(map[string]any, len(t))
		for k, e := range t {
			switch k {
			case "$schema", "$id", "$comment", "additionalProperties", "$defs", "definitions":
				continue
			case "type":
				if types, ok := e.([]any); ok {
					var kept []any
					nullable := false
					for _, ty := range types {
						if ty == "null" {
							nullable = true
						} else {
							kept = append(kept, ty)
						}
					}
					switch {
					case len(kept) == 1:
						out["type"] = kept[0]
					case len(kept) > 1:
						return nil, errors.New("the schema has a type array with several non-null types")
					}
					if nullable {
						out["nullable"] = true
					}
					continue
				}
			case "properties":
				// Property names are not keywords.
				if props, ok := e.(map[string]any); ok {
					po := make(map[string]any, len(props))
					for name, p := range props {
						var err error
						if po[name], err = r.reduce(p, depth+1, refs); err != nil {
							return nil, err
						}
					}
					out[k] = po
					continue
				}
			}
			var err error
			if out[k], err = r.reduce(e, depth+1, refs); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return v, nil
}

func (r *refReducer) resolve(ref string) (any, error) {
	var rest string
	var ok bool
	if rest, ok = strings.CutPrefix(ref, "#/$defs/"); ok {
		if defs, _ := r.root["$defs"].(map[string]any); defs != nil {
			if t, found := defs[rest]; found {
				return t, nil
			}
		}
	} else if rest, ok = strings.CutPrefix(ref, "#/definitions/"); ok {
		if defs, _ := r.root["definitions"].(map[string]any); defs != nil {
			if t, found := defs[rest]; found {
				return t, nil
			}
		}
	}
	return nil, errors.New("the schema's $ref " + ref + " names no local definition")
}
