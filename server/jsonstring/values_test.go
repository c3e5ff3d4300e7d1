package jsonstring

import (
	"reflect"
	"testing"
)

// TestValues: every string value with its path and span, keys left out,
// whitespace anywhere; Splice puts texts back, every other byte kept.
func TestValues(t *testing.T) {
	raw := ` {"name":"a\u0041","args":{"x":[1," b ",{"k":"c"}],"n":null,"t":true},"e":{},"l":[]} `
	vs, err := Values(raw)
	if err != nil {
		t.Fatal(err)
	}
	var got [][3]string
	for _, v := range vs {
		got = append(got, [3]string{v.Path, raw[v.Start:v.End], v.Text})
	}
	// keys and numbers too: a model reads a tool's parameter names and
	// enum values (attack pass: a card as a key or a number passed)
	want := [][3]string{{".name", `"name"`, "name"}, {".name", `"a\u0041"`, "aA"}, {".args", `"args"`, "args"}, {".args.x", `"x"`, "x"},
		{".args.x[0]", `1`, "1"}, {".args.x[1]", `" b "`, " b "}, {".args.x[2].k", `"k"`, "k"}, {".args.x[2].k", `"c"`, "c"},
		{".args.n", `"n"`, "n"}, {".args.t", `"t"`, "t"}, {".e", `"e"`, "e"}, {".l", `"l"`, "l"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Values = %q\nwant %q", got, want)
	}
	if !vs[0].Key || vs[1].Key || !vs[4].Number || vs[5].Number {
		t.Errorf("kinds: %+v", vs[:6])
	}
	if s := Splice(raw, []Value{vs[4], vs[5], vs[7]}, []string{"N", "B", "C"}); s != ` {"name":"a\u0041","args":{"x":["N","B",{"k":"C"}],"n":null,"t":true},"e":{},"l":[]} ` {
		t.Fatalf("Splice = %s", s)
	}
	if vs, err := Values(" \n\"4111\" "); err != nil || len(vs) != 1 || vs[0].Path != "" || vs[0].Text != "4111" {
		t.Fatalf("a string with whitespace: %v %v", vs, err)
	}
	for _, bad := range []string{`{"a":`, `[1,`, `"x`, ``} {
		if _, err := Values(bad); err == nil && bad != `` {
			t.Errorf("Values(%q): no error", bad)
		}
	}
}
