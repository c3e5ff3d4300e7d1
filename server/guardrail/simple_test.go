package guardrail

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSimpleRunesSameViews: the rune table's fast path builds the same
// views as norm.Iter alone (the same text, the same dropped flag), with
// each view byte mapped within the span the slow path maps it to (the
// fast path's segments are single runes, the iterator's may be longer;
// where a rune decomposes into two segments, such as Tibetan U+0F43, the
// iterator maps the first to an empty span, which is not compared).
func TestSimpleRunesSameViews(t *testing.T) {
	texts := append([]string{}, holderFixtures...)
	// every rune of the blocks that matter, alone, before a mark, a jamo,
	// an ASCII letter and a space
	var all strings.Builder
	for _, rg := range [][2]rune{{0x80, 0x3000}, {0x3000, 0x3100}, {0x4E00, 0x4F00}, {0xAC00, 0xAD00}, {0x3130, 0x3190}, {0xFE00, 0xFFFF}, {0x1D400, 0x1D800}, {0xE0000, 0xE0100}} {
		for r := rg[0]; r < rg[1]; r++ {
			if !utf8.ValidRune(r) {
				continue
			}
			for _, after := range []string{"", "\u0301", "\u3099", "\u11A8", "\u1161", "\u314F", "\uFFC2", "\u3142\u3157", "a", " ", "\u200b", "4"} {
				all.WriteString("x" + string(r) + after)
			}
		}
	}
	for s := all.String(); len(s) > 0; {
		k := min(len(s), 256)
		for k < len(s) && !utf8.RuneStart(s[k]) {
			k++
		}
		texts = append(texts, s[:k])
		s = s[k:]
	}
	// random mixes of runes that NFKC changes, marks, jamo, spaces, tags
	palette := []rune("aZ4 -\u00a0\u00e9e\u0301\u0302\u1100\u1161\u11a8\uac00\u2014\u2013\uff21\uff14\u200b\u00ad\U000e0041\U000e0020\u0130\u03a3\u00df\ufb01\u2460\u0664\u3000\u30fb\U0001d400\u0345\u0f73\u1e9b")
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b strings.Builder
		for range 1 + rng.IntN(24) {
			b.WriteRune(palette[rng.IntN(len(palette))])
		}
		texts = append(texts, b.String())
	}
	// and short texts of any runes of the BMP, the SMP and the tags
	for range 20000 {
		var b strings.Builder
		for range 1 + rng.IntN(5) {
			var r rune
			switch rng.IntN(4) {
			case 0:
				r = 0xE0000 + rune(rng.IntN(0x100))
			case 1:
				r = 0x10000 + rune(rng.IntN(0x10000))
			default:
				r = 0x80 + rune(rng.IntN(0xFF80))
			}
			b.WriteRune(r)
		}
		texts = append(texts, b.String())
	}
	for _, text := range texts {
		for _, mode := range [][2]bool{{false, false}, {true, false}, {true, true}} {
			noSimpleRunes = true
			slow := build(text, mode[0], mode[1])
			noSimpleRunes = false
			fast := build(text, mode[0], mode[1])
			if fast.s != slow.s || fast.dropped != slow.dropped {
				t.Fatalf("%q fold=%v sep=%v:\nfast %q dropped=%v\nslow %q dropped=%v", text, mode[0], mode[1], fast.s, fast.dropped, slow.s, slow.dropped)
			}
			for i := 0; i < len(fast.s); i++ {
				fs, fe := fast.origStart(i), fast.origEnd(i+1)
				ss, se := slow.origStart(i), slow.origEnd(i+1)
				if ss < se && (fs < ss || fe > se) || fs > fe {
					a, z := max(0, min(fs, ss)-12), min(len(text), max(fe, se)+12)
					t.Fatalf("%q fold=%v: view byte %d maps to %d..%d, the slow path to %d..%d (text %d.. %q, view %q)", text, mode[0], i, fs, fe, ss, se, a, text[a:z], fast.s[max(0, i-8):min(len(fast.s), i+8)])
				}
			}
		}
	}
}
