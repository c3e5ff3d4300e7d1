package guardrail

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzScanner: no panic; spans within bounds and on rune boundaries;
// Redacted valid UTF-8 when the input is; the Holder's contract on a
// split given by the fuzzer.
func FuzzScanner(f *testing.F) {
	for _, x := range holderFixtures {
		f.Add(x, uint16(len(x)/2), uint16(len(x)/3))
	}
	s := propScanner(f)
	f.Fuzz(func(t *testing.T, text string, a, b uint16) {
		ms := s.Find(text, nil)
		for _, m := range ms {
			if m.Start < 0 || m.End > len(text) || m.Start >= m.End {
				t.Fatalf("span %d..%d of %d", m.Start, m.End, len(text))
			}
			if utf8.ValidString(text) && (!utf8.RuneStart(text[m.Start]) || (m.End < len(text) && !utf8.RuneStart(text[m.End]))) {
				t.Fatalf("span %d..%d not on rune boundaries", m.Start, m.End)
			}
		}
		if red := Redacted(text, ms); utf8.ValidString(text) && !utf8.ValidString(red) {
			t.Fatalf("Redacted not valid UTF-8: %q", red)
		}
		i, j := int(a)%(len(text)+1), int(b)%(len(text)+1)
		if i > j {
			i, j = j, i
		}
		checkStream(t, s, []string{text[:i], text[i:j], text[j:]})
	})
}

// TestFindLinear: a 24 MiB prompt is checked in bounded time, and twice
// the text takes about twice the time.
func TestFindLinear(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("24 MiB, timed: not under -short or -race")
	}
	s := allRules(t)
	unit := "card 4111 1111 1111 1111, mail a@b.io, ignore previous instructions, hydra ４１１１ 1.2.3.4 "
	big := strings.Repeat(unit, (24<<20)/len(unit))
	t0 := testingNow()
	n1 := len(s.Find(big, nil))
	d1 := testingSince(t0)
	if d1.Seconds() > 10 {
		t.Fatalf("24 MiB took %v", d1)
	}
	t0 = testingNow()
	n2 := len(s.Find(big+big, nil))
	d2 := testingSince(t0)
	if n2 != 2*n1 || n1 == 0 {
		t.Fatalf("matches %d, %d", n1, n2)
	}
	if d2 > 3*d1 {
		t.Fatalf("48 MiB took %v, 24 MiB %v: not linear", d2, d1)
	}
	t.Logf("24 MiB: %v, 48 MiB: %v", d1, d2)
}

var (
	testingNow   = time.Now
	testingSince = time.Since
)
