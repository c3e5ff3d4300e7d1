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
// the text takes about twice the time (each size timed at its best of
// three, so that a loaded machine's pauses do not decide).
func TestFindLinear(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("24 MiB, timed: not under -short or -race")
	}
	s := allRules(t)
	unit := "card 4111 1111 1111 1111, mail a@b.io, ignore previous instructions, hydra ４１１１ 1.2.3.4 "
	big := strings.Repeat(unit, (24<<20)/len(unit))
	t0 := testingNow()
	if n := len(s.Find(big, nil)); n == 0 {
		t.Fatal("no match in 24 MiB")
	}
	if d := testingSince(t0); d.Seconds() > 10 {
		t.Fatalf("24 MiB took %v", d)
	}
	// the matches go to one buffer grown beforehand: growing a slice of
	// a million matches, which the larger text does once more, is not
	// the scan's cost (it pushed the ratio past 3 on a loaded machine)
	dst := make([]Match, 0, 2*len(s.Find(big, nil)))
	best := func(text string) (time.Duration, int) {
		var d time.Duration
		n := 0
		for range 3 {
			t0 := testingNow()
			n = len(s.Find(text, dst[:0]))
			if e := testingSince(t0); d == 0 || e < d {
				d = e
			}
		}
		return d, n
	}
	half := big[:len(big)/3/len(unit)*len(unit)]
	d1, n1 := best(half)
	d2, n2 := best(half + half)
	if n2 != 2*n1 || n1 == 0 {
		t.Fatalf("matches %d, %d", n1, n2)
	}
	if d2 > 3*d1 {
		t.Fatalf("%d MiB took %v, %d MiB %v: not linear", 2*len(half)>>20, d2, len(half)>>20, d1)
	}
	t.Logf("%d MiB: %v, %d MiB: %v (best of 3)", len(half)>>20, d1, 2*len(half)>>20, d2)
}

// TestFindManyBeginLines: a text of unterminated PEM BEGIN lines (each
// looks for its END line up to 16 KiB on) is read in time linear in its
// size, not once per line.
func TestFindManyBeginLines(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("timed: not under -short or -race")
	}
	s := mustCompile(t, Spec{Type: TypeSecrets, Action: Deny})
	big := strings.Repeat("-----BEGIN RSA PRIVATE KEY-----\n", (4<<20)/32)
	t0 := testingNow()
	if n := len(s.Find(big, nil)); n == 0 {
		t.Fatal("no match")
	}
	if d := testingSince(t0); d.Seconds() > 3 {
		t.Fatalf("4 MiB of BEGIN lines took %v", d)
	}
}

// TestFindKeyBlobs: 1 MiB blobs of key anchors are read in time linear
// in their size: each "eyJ" of a base64 run measured the run again (1 MiB
// of "eyJn" took 5.9 s) and each "sk-" of "sk-sk-…" was a key of its own
// (0.4 s, 350,000 matches).
func TestFindKeyBlobs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("timed: not under -short or -race")
	}
	s := mustCompile(t, Spec{Type: TypeSecrets, Action: Deny})
	for _, u := range []string{"eyJn", "eyJn.", strings.Repeat("eyJn", 250) + ".", "sk-", "github_pat_", "xoxb-", "AKIA"} {
		big := strings.Repeat(u, (1<<20)/len(u))
		t0 := testingNow()
		n := len(s.Find(big, nil))
		if d := testingSince(t0); d.Seconds() > 1 || n > 5000 {
			t.Errorf("1 MiB of %.12q: %v, %d matches", u, d, n)
		}
	}
}

var (
	testingNow   = time.Now
	testingSince = time.Since
)

// TestHolderBlobBounded: a streamed base64 blob (a model printing eyJ…
// for 200 KB in 10-byte chunks) is released as it comes, holding no more
// than a JWT header could be, in bounded time (attack pass: the whole
// blob was held and rescanned on every push, 24 s).
func TestHolderBlobBounded(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("timed: not under -short or -race")
	}
	// log: the release is the text itself, so what is held is counted
	s := mustCompile(t, Spec{Type: TypeSecrets, Action: Log}, Spec{Type: TypePII, Action: Log})
	for _, c := range []struct {
		u          string
		size, held int
	}{
		{"eyJ", 200_000, 4 << 10}, {"eyJhbGciOiJIUzI1NiJ9", 200_000, 4 << 10}, {"sk-", 200_000, 4 << 10},
		{"AKIA", 200_000, 4 << 10}, {"4 ", 200_000, 4 << 10}, {"a:", 200_000, 4 << 10},
		// an unterminated private key block is held to its bound (one
		// match, not one per BEGIN line: that took 52 s), and an eighth
		// more while a large hold waits to be rescanned (bigHold)
		{"-----BEGIN RSA PRIVATE KEY-----\nAAAA\n", 50_000, pemMax + pemMax/8 + 64},
		// repeated PuTTY headers: each match ends at the next header,
		// not chained into one hold of the stream (fourth attack pass C7)
		{"PuTTY-User-Key-File-3: x\n", 200_000, 4 << 10},
		// zero-width characters and combining marks: the context walked
		// back over all of them, and a run of marks was one segment held
		// whole (attack pass: over 120 s and 45 s)
		{"\u200b", 100_000, 4 << 10}, {"\u0301", 100_000, 4 << 10}, {"a\u0301\u200b", 100_000, 4 << 10},
	} {
		u := c.u
		text := strings.Repeat(u, c.size/len(u))
		h := s.NewHolder()
		t0 := testingNow()
		released, most := 0, 0
		for i := 0; i < len(text); i += 10 {
			rel, _ := h.Push(text[i:min(i+10, len(text))])
			released += len(rel)
			most = max(most, min(i+10, len(text))-released)
		}
		h.Flush()
		if d := testingSince(t0); d.Seconds() > 2 || most > c.held {
			t.Errorf("%q × 200 KB: %v, held up to %d bytes", u, d, most)
		}
	}
}

// TestHeadersLinear: texts of many PuTTY headers or PEM BEGIN lines, none
// ever closed, are read in time linear in their size, found whole and
// streamed (third attack pass B18: each header searched 16 KiB for its
// MAC line, 15 s per MiB, and a Holder rescanned its 16 KiB hold on every
// 10-byte push, 9 s per MiB).
func TestHeadersLinear(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("timed: not under -short or -race")
	}
	s := mustCompile(t, Spec{Type: TypeSecrets, Action: Deny})
	logs := mustCompile(t, Spec{Type: TypeSecrets, Action: Log})
	for _, unit := range []string{"PuTTY-User-Key-File-2: x\n", "-----BEGIN RSA PRIVATE KEY-----\n"} {
		big := strings.Repeat(unit, (1<<20)/len(unit))
		t0 := testingNow()
		if len(s.Find(big, nil)) == 0 {
			t.Fatalf("%q × 1 MiB: no match", unit)
		}
		if d := testingSince(t0); d.Seconds() > 1 {
			t.Errorf("Find %q × 1 MiB: %v", unit, d)
		}
		// log: a denial ends a stream, and this one goes on
		stream := big[:256<<10]
		h := logs.NewHolder()
		t0 = testingNow()
		for i := 0; i < len(stream); i += 10 {
			h.Push(stream[i:min(i+10, len(stream))])
		}
		h.Flush()
		if d := testingSince(t0); d.Seconds() > 1 {
			t.Errorf("Holder %q × 256 KiB in 10-byte chunks: %v", unit, d)
		}
	}
}
