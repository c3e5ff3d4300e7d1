package cache_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/flexway/flexway/server/cache"
)

// FuzzNewKeys: any bytes give keys or ErrUncacheable, never a panic; a
// valid JSON object (not too deep) always gives keys; the semantic keys
// never change the exact key.
func FuzzNewKeys(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a\u0000b"}]},{"role":"user"}],"n":1e3}`,
		`{"a":[{"b":{"c":["\ud83d\ude00",-0.0e-0,true,false,null]}}]}`,
		`{"messages":"x"}`, `{"messages":[1,"user",{"role":"user","content":null}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ks, err := cache.NewKeys(b, true)
		if err != nil {
			if !errors.Is(err, cache.ErrUncacheable) {
				t.Fatalf("error %v does not wrap ErrUncacheable", err)
			}
			var v map[string]any
			if json.Unmarshal(b, &v) == nil && depth(v) < 60 {
				t.Fatalf("valid JSON object refused: %v", err)
			}
			return
		}
		exact, err := cache.ExactKey(b)
		if err != nil || exact != ks.Exact {
			t.Fatalf("ExactKey = %v, %v; NewKeys gave %v", exact, err, ks.Exact)
		}
	})
}

func depth(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			d = max(d, depth(e))
		}
		return d + 1
	case []any:
		for _, e := range v {
			d = max(d, depth(e))
		}
		return d + 1
	}
	return 0
}
