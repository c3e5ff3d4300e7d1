package guardrail

import (
	"unicode/utf8"
	"unsafe"

	"golang.org/x/text/unicode/norm"
)

// Holder applies a Scanner to one channel of a streamed text. It holds back
// every byte a rule could still match when more text arrives, and releases
// only text no rule can still change: a match split across pushes is found
// whole, and redacted whole, before any of it is released. Concatenating
// every release of a stream, Flush's included, gives exactly
// Redacted(whole, s.Find(whole, nil)), wherever the stream was split. Not
// safe for concurrent use: one per channel of one call.
//
// What is held: after each push the holder rescans its window (the
// unreleased text and 80 characters of released context) and holds from
// the earliest place a match could still start or still change: the start
// of any candidate whose decision reads past the end of the text so far
// (a card number whose next group may follow, "sk-" whose key goes on, an
// open "-----BEGIN … PRIVATE KEY-----" block up to its END line or 16 KiB),
// the trailing run of an email's local part (≤ 64 characters) or of an
// IPv6 address (≤ 45), the longest suffix that begins an injection phrase
// or a banned word, a regex rule's resume point (its longest match, from
// regexp/syntax, plus one character: a regex whose matches are unbounded,
// such as `a+`, holds everything until Flush), and always the last
// normalisation segment (a combining mark may still attach to it) and any
// incomplete UTF-8 sequence. Lengths are of the normalised text:
// ignorable characters do not count, so a card padded with zero-width
// joiners is still held whole. In plain prose this is the last word or
// so; the cost of a push is linear in the window.
type Holder struct {
	s      *Scanner
	buf    string // the stream from base: b, read as a string
	b      []byte
	base   int   // stream offset of buf[0]
	rel    int   // stream bytes released so far
	rxFrom []int // each regex rule's resume offset (stream)
	wait   int   // bytes still to come before the next rescan (see bigHold)
	denied []Match
	ms     []Match
}

// NewHolder returns a Holder over s for one channel. A nil s (or one
// without rules) makes a Holder that releases every chunk as it comes.
func (s *Scanner) NewHolder() *Holder {
	h := &Holder{s: s}
	if s != nil {
		h.rxFrom = make([]int, len(s.eng.rx))
	}
	return h
}

// Push adds chunk to the channel. release is the text that may now go to
// the client, redacted; found are the matches in it, and any match with a
// Deny action found so far in the held text too (a denial is reported as
// soon as it is seen, and no byte of it is in that push's release; the
// caller then ends the stream and releases nothing more). Offsets are of
// the whole stream. found is valid until the next call.
func (h *Holder) Push(chunk string) (release string, found []Match) {
	if h.s == nil || len(h.s.rules) == 0 {
		return chunk, nil
	}
	// appended to a byte buffer read as a string (no copy of the hold
	// per push: a 16 KiB hold copied on every 10-byte push was half of a
	// Holder's time on open key blocks). Bytes once in buf are never
	// written again: append writes past its end only, so the strings
	// handed out (releases, windows) stay valid.
	h.b = append(h.b, chunk...)
	h.buf = unsafe.String(unsafe.SliceData(h.b), len(h.b))
	if h.wait > len(chunk) {
		// a large hold: rescanned once per eighth of it, not per push
		h.wait -= len(chunk)
		return "", nil
	}
	cut := escapeStart(h.buf, lastSegment(h.buf))
	release, found = h.step(cut, false)
	h.wait = 0
	if held := h.base + len(h.buf) - h.rel; held > bigHold {
		h.wait = held / 8
	}
	return release, found
}

// bigHold is the hold, in bytes, past which a Holder rescans its window
// once per eighth of the hold's size of new text rather than on every
// push: an open PEM or PuTTY block is held up to 16 KiB until its END
// line, and rescanned 16 KiB a push, a stream of BEGIN lines in 10-byte
// chunks took 9 s of CPU per MiB (third attack pass B18). Nothing more
// is released in between (what was held stays held), so a denial is
// reported at most an eighth of the hold later, and before any byte of
// it goes out.
const bigHold = 4 << 10

// escapeStart is cut, moved back to the backslash of a \uXXXX escape it
// falls inside or right after the start of: a window ending in "\u000"
// read the escape as letters, which ended a phrase or a card's groups
// there, and released them (third attack pass B14, B15: "ignore all\u000a"
// then "previous instructions" passed). The escape is then read whole
// by the next push.
func escapeStart(buf string, cut int) int {
	for b := cut - 1; b >= 0 && b > cut-6; b-- {
		if buf[b] == '\\' {
			if b+1 < len(buf) && buf[b+1] == 'u' && !escaped(buf, b) {
				return b
			}
			break
		}
	}
	return cut
}

// Flush ends the channel: release is every byte still held, redacted, and
// found its matches (Deny ones not reported before included).
func (h *Holder) Flush() (release string, found []Match) {
	if h.s == nil || len(h.s.rules) == 0 {
		return "", nil
	}
	return h.step(len(h.buf), true)
}

func (h *Holder) step(cut int, final bool) (string, []Match) {
	relIdx := h.rel - h.base
	ctx := contextStart(h.buf, relIdx)
	off := h.base + ctx
	win := h.buf[ctx:cut]
	rx := h.rxFrom
	for k := range rx {
		rx[k] -= off
	}
	ms, hold := h.s.scan(win, final, h.ms[:0], rx)
	for k := range rx {
		rx[k] += off
	}
	hold += off
	p := hold
	if final {
		p = h.base + len(h.buf)
	}
	// the determined matches not released yet, in stream offsets
	k := 0
	for _, m := range ms {
		m.Start += off
		m.End += off
		if m.End <= h.rel || (!final && m.Start >= hold) {
			continue
		}
		if m.Start < h.rel {
			// a match whose start maps before what was released: its
			// unreleased part is still redacted or denied, never skipped
			m.Start = h.rel
		}
		ms[k] = m
		k++
	}
	ms = ms[:k]
	sortMatches(ms)
	// never release part of a match
	for i := len(ms) - 1; i >= 0; i-- {
		if m := ms[i]; m.Start < p && m.End > p {
			p = m.Start
		}
	}
	var found []Match
	// denials: reported once, before any byte of them is released
	for _, m := range ms {
		if m.Rule.Action != Deny || m.Rule.Shadow || h.isDenied(m) {
			continue
		}
		h.denied = append(h.denied, m)
		found = append(found, m)
		if !final && m.Start < p {
			p = m.Start
		}
	}
	p = max(p, h.rel)
	// release [rel, p)
	var in []Match
	for _, m := range ms {
		if m.End <= p {
			in = append(in, m)
			if !(m.Rule.Action == Deny && !m.Rule.Shadow) {
				found = append(found, m)
			}
		}
	}
	text := h.buf[relIdx : p-h.base]
	for i := range in {
		in[i].Start -= h.rel
		in[i].End -= h.rel
	}
	out := Redacted(text, in)
	h.rel = p
	// a regex rule resumes where its scan is known to be: no later than
	// what was released (its determined matches past it are found again)
	for k := range h.rxFrom {
		h.rxFrom[k] = min(h.rxFrom[k], p)
	}
	// keep from the context start: the next context starts no earlier
	h.b = h.b[ctx:]
	h.buf = h.buf[ctx:]
	h.base = off
	k = 0
	for _, d := range h.denied {
		if d.End > h.rel {
			h.denied[k] = d
			k++
		}
	}
	h.denied = h.denied[:k]
	h.ms = ms[:0]
	return out, found
}

func (h *Holder) isDenied(m Match) bool {
	for _, d := range h.denied {
		if d.Start == m.Start && d.End == m.End && d.Rule == m.Rule {
			return true
		}
	}
	return false
}

// boundaryBefore reports whether a normalisation segment can begin at s[0]
// whatever precedes it (NFKC and NFKD).
func boundaryBefore(s string) bool {
	if s[0] < utf8.RuneSelf {
		return true
	}
	c, d := norm.NFKC.PropertiesString(s), norm.NFKD.PropertiesString(s)
	if !c.BoundaryBefore() || !d.BoundaryBefore() {
		return false
	}
	// and its normal form begins one: a compatibility jamo (ㅏ) is a
	// boundary itself, its NFKD a conjoining vowel that joins the
	// segment before it, which a match's start then maps back onto
	// (fourth attack pass C1: an email after "Mail: ㅏ" was released in
	// clear)
	if dec := d.Decomposition(); len(dec) > 0 {
		return norm.NFKC.Properties(dec).BoundaryBefore() && norm.NFKD.Properties(dec).BoundaryBefore()
	}
	return true
}

// contextStart is where a window must start for decisions at rel to see
// what they may look back at: lookBehind characters that count (not
// ignorable, not marks), then back to a segment boundary.
func contextStart(buf string, rel int) int {
	i, cnt := rel, 0
	// at most contextMax bytes back: on a run of zero-width characters
	// (none counts) the walk kept, and rescanned on every push, the whole
	// stream; a decision that would look past the bound sees less of
	// what was released already, which can only make more matches
	for i > 0 && cnt < lookBehind && rel-i < contextMax {
		if buf[i-1] < utf8.RuneSelf {
			// ASCII: one character that counts (no ASCII rune is
			// ignorable or a mark), without decoding.
			i--
			cnt++
			continue
		}
		r, w := utf8.DecodeLastRuneInString(buf[:i])
		i -= w
		// a tag character is read as ASCII: it counts
		if simpleOf(buf[i:]).counts() || (r >= 0xE0020 && r <= 0xE007E) || !ignorable(r) && !isMark(r) {
			cnt++
		}
	}
	for k := 0; i > 0 && k < maxNonStarters && !boundaryBefore(buf[i:]); k++ {
		_, w := utf8.DecodeLastRuneInString(buf[:i])
		i -= w
	}
	// never start on an escaped byte: blankEscapes reads escapes from the
	// window's first backslash, and a window starting inside a run of
	// escaped backslashes would read the "\n" ending it as a backslash
	// and the letter n. buf[0] is never escaped (every window starts so,
	// and buf is cut at a window start), so the parity of the run before
	// i, counted within buf, is the stream's; the walk covers at most
	// what the previous window released.
	// nor inside a \uXXXX escape (the byte bound above can stop there,
	// on a run of ignorable characters): start at its backslash
	i = escapeStart(buf, i)
	if escaped(buf, i) {
		i--
	}
	return i
}

// escaped reports whether buf[i] follows an odd run of backslashes (an
// escape's second byte, read from the run's start in buf).
func escaped(buf string, i int) bool {
	j := i
	for j > 0 && buf[j-1] == '\\' {
		j--
	}
	return (i-j)%2 == 1
}

// contextMax bounds contextStart's walk, in bytes: 80 characters of
// three bytes or fewer fit, and a stream of zero-width characters in
// 10-byte chunks rescans 256 bytes a push, not 1 KiB (0.8 s of CPU per
// MiB; 10 s with 1 KiB: third attack pass B10).
const contextMax = 256

// maxNonStarters is the most runes a normalisation segment spans that
// the Holder waits on: Unicode's stream-safe text format (UAX #15 §13)
// ends a segment after 30 non-starters, and so does golang.org/x/text's
// norm.Iter, so a longer run of combining marks ("zalgo" text, all held
// until the end) is released in pieces.
const maxNonStarters = 31

// lastSegment is the start of buf's last normalisation segment (which
// more text could still change), or of its incomplete last rune.
func lastSegment(buf string) int {
	n := len(buf)
	for k := 1; k <= 3 && k <= n; k++ {
		if utf8.RuneStart(buf[n-k]) {
			if !utf8.FullRuneInString(buf[n-k:]) {
				n -= k
			}
			break
		}
	}
	i := n
	for k := 0; i > 0; k++ {
		_, w := utf8.DecodeLastRuneInString(buf[:i])
		i -= w
		if boundaryBefore(buf[i:]) || k == maxNonStarters {
			break
		}
	}
	return i
}
