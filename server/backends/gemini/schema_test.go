package gemini

import (
	"bytes"
	"testing"
)

// schemaCases are schemas the byte-level ReduceSchema must reduce as the
// map-based one did.
var schemaCases = []string{
	`{"type":"object","properties":{"$schema":{"type":["string","null"]},"b":{"$ref":"#/$defs/B"}},"$defs":{"B":{"type":"integer","minimum":1.50}},"additionalProperties":false}`,
	`{"z":1,"a":{"y":[{"b":2,"a":"<&>"}]},"a":"last wins"}`,
	`{"type":["null"]}`,
	`{"type":[{"$id":"kept as is","b":1,"a":2},"null"]}`,
	`{"type":["string","integer"]}`,
	`{"$ref":"#/definitions/A","definitions":{"A":{"$ref":"#/definitions/A"}}}`,
	`{"$ref":"#/$defs/missing"}`,
	`{"$ref":5,"properties":[1,{"$comment":"x"}]}`,
	`{"$ref":"#/$defs/S","$defs":{"S":"scalar"}}`,
	`[1]`, `{"a":`, ` {"k\u00e9y":"\ud800x\u00e9","n":-0.0e+00} trailing`,
	`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
}

// TestReduceSchemaAsReference: the byte-level reduction writes the bytes
// the map-based one wrote, and fails where it failed.
func TestReduceSchemaAsReference(t *testing.T) {
	for _, c := range schemaCases {
		checkReduceSchema(t, []byte(c))
	}
}

func checkReduceSchema(t *testing.T, raw []byte) {
	t.Helper()
	if bytes.Contains(raw, []byte("nullable")) {
		// A type array with null beside a nullable member: the map-based
		// one kept whichever its map iteration wrote last.
		return
	}
	got, err := ReduceSchema(raw)
	want, werr := reduceSchemaReference(raw)
	if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("ReduceSchema(%s) = %s, %v; the map-based one gives %s, %v", raw, got, err, want, werr)
	}
}

// FuzzReduceSchema: the two reductions agree on any input.
func FuzzReduceSchema(f *testing.F) {
	for _, c := range schemaCases {
		f.Add([]byte(c))
	}
	f.Fuzz(checkReduceSchema)
}
