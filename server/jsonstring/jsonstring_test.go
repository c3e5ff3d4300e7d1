package jsonstring_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/flexway/flexway/server/jsonstring"
)

// TestAppendMatchesEncodingJSON: Append writes what encoding/json writes
// with HTML escaping off.
func TestAppendMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"", "hello", `a"b\c`, "\n\r\t\b\f\x00\x1f", "a\u2028b\u2029c", "a\xffb\xc3", "été 😀 <&>",
		"0123456789abcdef0123456789abcdef\"", "01234567\x7f89", "long run of plain ascii text, then é",
	} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := jsonstring.Append([]byte("x"), s); string(got) != "x"+string(bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
			t.Errorf("Append(%q) = %s, want x%s", s, got, want.Bytes())
		}
	}
}

// TestSpecialMask: the first quote, backslash or control byte of eight is
// found, and plain text has none.
func TestSpecialMask(t *testing.T) {
	t.Parallel()
	load := func(s string) uint64 {
		var x uint64
		for i := 7; i >= 0; i-- {
			x = x<<8 | uint64(s[i])
		}
		return x
	}
	if m := jsonstring.SpecialMask(load("abcdefgh")); m != 0 {
		t.Errorf("plain text: mask %#x", m)
	}
	for i, s := range []string{`"bcdefgh`, `a\cdefgh`, "ab\ndefgh", "abcdefg\x00"} {
		want := []int{0, 1, 2, 7}[i]
		m := jsonstring.SpecialMask(load(s))
		if got := bitsIndex(m); got != want {
			t.Errorf("%q: first special byte at %d, want %d", s, got, want)
		}
	}
}

// bitsIndex is the byte index of m's lowest set bit.
func bitsIndex(m uint64) int {
	for i := 0; i < 8; i++ {
		if m&(0x80<<(8*i)) != 0 {
			return i
		}
	}
	return -1
}
