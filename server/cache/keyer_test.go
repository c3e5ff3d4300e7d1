package cache_test

import (
	"fmt"
	"testing"

	"github.com/flexway/flexway/server/cache"
)

// TestKeyerSameKeys: the memo returns what NewKeys returns, for a body
// seen before, a respelled one, exact or semantic in either order, and
// past its bound.
func TestKeyerSameKeys(t *testing.T) {
	t.Parallel()
	k := cache.NewKeyer(2000)
	bodies := []string{
		`{"messages":[{"role":"user","content":"hi"}],"temperature":1}`,
		`{"temperature":1.0,"messages":[{"content":"hi","role":"user"}]}`,
		`{"messages":[{"role":"user","content":"bye"}]}`,
	}
	for i := 0; i < 40; i++ {
		bodies = append(bodies, fmt.Sprintf(`{"messages":[{"role":"user","content":"q%d"}]}`, i))
	}
	for round := 0; round < 3; round++ {
		for _, b := range bodies {
			for _, sem := range []bool{false, true, false} {
				want, err := cache.NewKeys([]byte(b), sem)
				if err != nil {
					t.Fatal(err)
				}
				got, err := k.Keys([]byte(b), sem)
				if err != nil || got != want {
					t.Fatalf("Keys(%s, %v) = %+v, %v; want %+v", b, sem, got, err, want)
				}
			}
		}
	}
	if _, err := k.Keys([]byte(`[]`), false); err == nil {
		t.Error("an uncacheable body got keys")
	}
}
