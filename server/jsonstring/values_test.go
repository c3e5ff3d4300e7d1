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
	want := [][3]string{{".name", `"a\u0041"`, "aA"}, {".args.x[1]", `" b "`, " b "}, {".args.x[2].k", `"c"`, "c"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Values = %q\nwant %q", got, want)
	}
	if s := Splice(raw, vs[1:], []string{"B", "C"}); s != ` {"name":"a\u0041","args":{"x":[1,"B",{"k":"C"}],"n":null,"t":true},"e":{},"l":[]} ` {
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
