package guardrail

import (
	"encoding/binary"
	"sort"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"golang.org/x/text/unicode/norm"
)

// A view is a normalised form of a text with the map back to it. Rules
// match on views; their spans are mapped back to the original bytes.
//
// runs maps view bytes to original bytes: run i covers the view bytes
// [runs[i].v, runs[i+1].v). A positional run maps byte for byte (an ASCII
// run, a segment NFKC leaves alone, ASCII lowered); another run is one
// normalisation segment, and each of its view bytes maps to the whole
// segment [o, o+n). runs == nil: the view is the original text itself.
type view struct {
	s    string
	runs []vrun
	olen int
	// dropped: the view left out an ignorable character (a zero-width
	// space, a control byte) that may have separated two words.
	dropped bool
}

type vrun struct {
	v, o, n int32
	pos     bool
}

// origStart is the original offset of view byte i's segment (len of the
// original for i == len(view)).
func (w *view) origStart(i int) int {
	if w.runs == nil {
		return i
	}
	if i >= len(w.s) {
		return w.olen
	}
	r := w.runs[w.find(i)]
	if r.pos {
		return int(r.o) + i - int(r.v)
	}
	return int(r.o)
}

// origEnd is the original offset just past view byte i-1's segment.
func (w *view) origEnd(i int) int {
	if w.runs == nil || i == 0 {
		return i
	}
	r := w.runs[w.find(i-1)]
	if r.pos {
		return int(r.o) + i - int(r.v)
	}
	return int(r.o + r.n)
}

func (w *view) find(i int) int {
	k := sort.Search(len(w.runs), func(k int) bool { return int(w.runs[k].v) > i })
	return k - 1
}

// span maps the view span [s, e) to the original text.
func (w *view) span(s, e int) (int, int) {
	return w.origStart(s), w.origEnd(e)
}

// plainASCII reports whether s is ASCII without a control byte the views
// drop (see dropped): the fast path, where the NFKC view is s itself and
// the phrase trie folds s on the fly. Eight bytes at a time: a word with
// no byte >= 0x80, below 0x20 or equal to 0x7F is plain; one with such a
// byte is looked at byte by byte (TAB, LF and CR are common and plain).
func plainASCII(s string) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+32 <= len(s); i += 32 {
		// four words, one branch: any high bit, or any byte below 0x20
		// or equal to 0x7F, sends the 32 bytes to the careful loop
		x0, x1, x2, x3 := load64(s, i), load64(s, i+8), load64(s, i+16), load64(s, i+24)
		if (x0|x1|x2|x3)&hi != 0 {
			return false
		}
		if (ctlOrDel(x0)|ctlOrDel(x1)|ctlOrDel(x2)|ctlOrDel(x3))&hi != 0 {
			for k := i; k < i+32; k++ {
				if dropped[s[k]] {
					return false
				}
			}
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= 0x80 || dropped[s[i]] {
			return false
		}
	}
	return true
}

// ctlOrDel has the top bit set of each byte of x (all below 0x80) that is
// below 0x20 or is 0x7F (and maybe of some that are not: a borrow can
// only flag the byte above a flagged one).
func ctlOrDel(x uint64) uint64 {
	const lo = 0x0101010101010101
	del := x ^ 0x7F*lo
	return (x-0x20*lo)&^x | (del-lo)&^del
}

// load64 is the 8 bytes of s at i as a little-endian word (one load; the
// caller has checked i+8 <= len(s)).
func load64(s string, i int) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))
}

// dropped is the ASCII control bytes removed before matching, like the
// ignorable characters: every C0 control but the whitespace ones (TAB,
// LF, VT, FF, CR: they separate words and digit groups as a reader sees
// them), and DEL. "4111\x011111…" is a card, "ign\x07ore" the word ignore.
var dropped = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	for _, c := range "\t\n\v\f\r" {
		t[c] = false
	}
	t[0x7F] = true
	return
}()

// ignorable reports the characters removed before matching: the control
// characters (see dropped; C1, U+0080–U+009F, too), format
// characters (Cf: zero-width space, joiner and non-joiner, BOM, soft
// hyphen, bidi controls, tags) and the other Default_Ignorable_Code_Points
// (combining grapheme joiner, Hangul fillers, variation selectors).
func ignorable(r rune) bool {
	if r < 0xAD {
		// the control characters: C0 but whitespace, DEL and C1
		return r < 0x80 && dropped[r] || r >= 0x80 && r <= 0x9F
	}
	switch {
	case r == 0x34F, r == 0x115F, r == 0x1160, r == 0x17B4, r == 0x17B5,
		r >= 0x180B && r <= 0x180F, r == 0x3164, r >= 0xFE00 && r <= 0xFE0F,
		r == 0xFFA0, r >= 0xE0000 && r <= 0xE0FFF:
		return true
	}
	return unicode.Is(unicode.Cf, r)
}

// plainer maps what NFKC leaves apart but a reader takes for the same: a
// decimal digit of any script (Arabic-Indic ٤, Devanagari ४) is its ASCII
// digit, a dash of any kind (U+2011 non-breaking hyphen, U+2013 en dash,
// U+2212 minus) is '-', a middle dot or a bullet is '.'.
func plainer(r rune) rune {
	if r < 0x80 {
		return r
	}
	if unicode.Is(unicode.Nd, r) {
		// Unicode's decimal digits come in runs of ten from zero.
		for v := rune(0); v < 10; v++ {
			if !unicode.Is(unicode.Nd, r-v-1) {
				return '0' + v
			}
		}
		return r
	}
	if unicode.Is(unicode.Pd, r) || r == '\u2212' { // and the minus sign
		return '-'
	}
	switch r {
	case '\u00B7', '\u2022', '\u2027', '\u2219', '\u22C5', '\u30FB':
		// middle dots and bullets: 4111·1111·1111·1111
		return '.'
	case '\u2800':
		// the blank braille pattern, which shows as a space (fourth
		// attack pass C9: "ignore⠀all previous instructions" passed)
		return ' '
	}
	return r
}

// lookAlike maps the lower-case Cyrillic and Greek letters that read as a
// Latin letter to it, in the folded view only (injection and banned
// rules): "ignоre" with a Cyrillic о is "ignore". Conservative: letters a
// reader takes for the Latin one in any font (after Unicode's
// confusables.txt), not every similar shape.
var lookAlike = map[rune]rune{
	'а': 'a', 'е': 'e', 'і': 'i', 'ј': 'j', 'о': 'o', 'р': 'p', 'с': 'c',
	'у': 'y', 'х': 'x', 'ѕ': 's', 'һ': 'h', 'ԁ': 'd', 'ԛ': 'q', 'ԝ': 'w',
	'α': 'a', 'ο': 'o', 'ι': 'i', 'ν': 'v', 'ρ': 'p', 'υ': 'u', 'κ': 'k',
	'τ': 't',
	// Latin letters of other shapes: dotless i, script g, alpha, and the
	// small capitals (ɪɢɴᴏʀᴇ reads "ignore"); Armenian o and h
	'ı': 'i', 'ɡ': 'g', 'ɑ': 'a', 'ᴀ': 'a', 'ʙ': 'b', 'ᴄ': 'c', 'ᴅ': 'd', 'ᴇ': 'e',
	'ꜰ': 'f', 'ɢ': 'g', 'ʜ': 'h', 'ɪ': 'i', 'ᴊ': 'j', 'ᴋ': 'k', 'ʟ': 'l', 'ᴍ': 'm',
	'ɴ': 'n', 'ᴏ': 'o', 'ᴘ': 'p', 'ʀ': 'r', 'ꜱ': 's', 'ᴛ': 't', 'ᴜ': 'u', 'ᴠ': 'v',
	'ᴡ': 'w', 'ʏ': 'y', 'ᴢ': 'z', 'օ': 'o', 'հ': 'h',
}

// isMark is a combining mark, dropped by both views.
func isMark(r rune) bool { return r >= 0x300 && unicode.In(r, unicode.Mn, unicode.Me) }

// builder accumulates a view.
type builder struct {
	b    []byte
	runs []vrun
	// folded view state: the last byte written was a collapsed space.
	fold, space bool
	// sep: an ignorable character is a space instead (the second folded
	// view, see Scanner.phrases); dropped: one was left out.
	sep, dropped bool
}

func (b *builder) addPos(o int, seg string) {
	v := int32(len(b.b))
	if k := len(b.runs) - 1; k >= 0 {
		r := &b.runs[k]
		if r.pos && r.v+r.n == v && r.o+r.n == int32(o) {
			r.n += int32(len(seg))
			b.b = append(b.b, seg...)
			return
		}
	}
	b.runs = append(b.runs, vrun{v: v, o: int32(o), n: int32(len(seg)), pos: true})
	b.b = append(b.b, seg...)
}

func (b *builder) addSeg(o, n int, out []byte) {
	if len(out) == 0 {
		return
	}
	b.runs = append(b.runs, vrun{v: int32(len(b.b)), o: int32(o), n: int32(n)})
	b.b = append(b.b, out...)
}

// joiner reports the ASCII punctuation the folded view makes a space:
// '-' and '_' join words, '*', '~' and '`' mark emphasis or code, '"'
// quotes. Not '+', which banned words hold (c++).
func joiner(c byte) bool {
	switch c {
	case '-', '_', '*', '~', '`', '"':
		return true
	}
	return false
}

// asciiFold is the folded form of an ASCII byte: lower case, every
// whitespace byte a space, 0 for a dropped control byte.
var asciiFold = func() (t [128]byte) {
	for i := range t {
		c := byte(i)
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c == '\t', c == '\n', c == '\v', c == '\f', c == '\r':
			c = ' '
		case joiner(c):
			// joiners of words: "ignore_all_previous-instructions" is the
			// phrase, project_hydra the banned project-hydra, and
			// emphasis or quotes around a word do not hide it ("**ignore**
			// all", `ignore "all" previous`)
			c = ' '
		case dropped[c]:
			c = 0 // removed (asciiRun skips it)
		}
		t[i] = c
	}
	return
}()

// asciiRun adds the ASCII text t (at original offset o), without its
// dropped control bytes.
func (b *builder) asciiRun(o int, t string) {
	if !b.fold {
		for len(t) > 0 {
			k := 0
			for k < len(t) && !dropped[t[k]] {
				k++
			}
			if k > 0 {
				b.addPos(o, t[:k])
			}
			for k < len(t) && dropped[t[k]] {
				k++
			}
			o, t = o+k, t[k:]
		}
		return
	}
	start := len(b.b)
	runStart := 0
	for i := 0; i < len(t); i++ {
		c := asciiFold[t[i]]
		if c == 0 {
			b.dropped = true
			if b.sep {
				c = ' '
			}
		}
		if c == 0 || c == ' ' && b.space {
			// dropped, or a collapsed space: close the positional run
			// before it
			if i > runStart {
				b.posBytes(o+runStart, b.b[start:])
			}
			start = len(b.b)
			runStart = i + 1
			continue
		}
		b.space = c == ' '
		b.b = append(b.b, c)
	}
	if len(t) > runStart {
		b.posBytes(o+runStart, b.b[start:])
	}
}

// posBytes records the run of the already written bytes w (at the end of
// b.b), positional from original offset o.
func (b *builder) posBytes(o int, w []byte) {
	if len(w) == 0 {
		return
	}
	v := int32(len(b.b) - len(w))
	if k := len(b.runs) - 1; k >= 0 {
		r := &b.runs[k]
		if r.pos && r.v+r.n == v && r.o+r.n == int32(o) {
			r.n += int32(len(w))
			return
		}
	}
	b.runs = append(b.runs, vrun{v: v, o: int32(o), n: int32(len(w)), pos: true})
}

// segment adds one normalisation segment seg (the normalised output of
// original bytes [o, o+n)).
func (b *builder) segment(o int, src string, seg []byte) {
	var out [64]byte
	w := out[:0]
	for i := 0; i < len(seg); {
		r, sz := utf8.DecodeRune(seg[i:])
		i += sz
		if r >= 0xE0020 && r <= 0xE007E {
			// a tag character is read as the ASCII one it shadows by
			// models that decode "ASCII smuggling": so by the rules
			r -= 0xE0000
		} else if ignorable(r) {
			b.dropped = true
			if !(b.fold && b.sep) {
				continue
			}
			r = ' '
		}
		if isMark(r) {
			// A mark NFKC left apart (on a digit: 4\u0301) hides nothing
			// of what the rules look for.
			continue
		}
		r = plainer(r)
		if b.fold && r < utf8.RuneSelf && joiner(byte(r)) {
			r = ' '
		}
		if b.fold {
			if unicode.IsSpace(r) {
				if b.space {
					continue
				}
				b.space = true
				w = append(w, ' ')
				continue
			}
			b.space = false
			r = unicode.ToLower(r)
			if l, ok := lookAlike[r]; ok {
				r = l
			}
		}
		w = utf8.AppendRune(w, r)
	}
	if string(w) == src {
		b.addPos(o, src)
		return
	}
	b.addSeg(o, len(src), w)
}

// nfkcView is the view pii, secrets and regex rules match on: NFKC,
// ignorables removed. plain: plainASCII(text), the view is text itself.
func nfkcView(text string, plain bool) view {
	if plain {
		return view{s: text, olen: len(text)}
	}
	return build(text, false, false)
}

// foldedView is the view injection and banned rules match on: NFKD,
// ignorables and combining marks removed, lower case, whitespace runs
// collapsed to one space.
func foldedView(text string) view {
	return build(text, true, false)
}

// sepView is foldedView with each ignorable character a space: a
// zero-width space between two words separates them for the model's
// tokenizer ("ignore\u200ball previous instructions"), inside one it
// hides nothing ("ig\u200bnore"); the phrase rules read both views.
func sepView(text string) view {
	return build(text, true, true)
}

func build(text string, fold, sep bool) view {
	b := builder{fold: fold, sep: sep, b: make([]byte, 0, len(text)+len(text)/8)}
	form := norm.NFKC
	if fold {
		form = norm.NFKD
	}
	var it norm.Iter
	for i := 0; i < len(text); {
		// ASCII run [i, j); its last byte may combine with what follows.
		j := i
		for j < len(text) && text[j] < 0x80 {
			j++
		}
		if j == len(text) {
			b.asciiRun(i, text[i:j])
			break
		}
		if j > i+1 {
			b.asciiRun(i, text[i:j-1])
			i = j - 1
		}
		// non-ASCII stretch up to the next ASCII byte after it, which
		// always begins a segment.
		k := j
		for k < len(text) && text[k] >= 0x80 {
			k++
		}
		part := text[i:k]
		prev := 0
		if !noSimpleRunes {
			prev = b.simpleRunes(i, part)
		}
		if prev == len(part) {
			i = k
			continue
		}
		it.InitString(form, part[prev:])
		base := prev
		for !it.Done() {
			seg := it.Next()
			p := base + it.Pos()
			b.segment(i+prev, part[prev:p], seg)
			prev = p
		}
		i = k
	}
	return view{s: string(b.b), runs: b.runs, olen: len(text), dropped: b.dropped}
}

// weight is how many characters the rune enc (one rune's UTF-8, r)
// counts for in a window the rules read (see TailStart): what the folded
// view makes of it alone, 0 for what it drops (ignorable characters,
// combining marks) and for what it makes a space (whitespace, a word
// joiner, a spacing diacritic such as ¨, whose NFKD is a space and a
// mark: third attack pass B9) next to another (afterSpace: the last rune
// counted was one), 1 otherwise. space is the state for the next rune.
func weight(r rune, enc string, afterSpace bool) (n int, space bool) {
	if r < utf8.RuneSelf {
		switch {
		case r == ' ' || joiner(byte(r)) || r >= '\t' && r <= '\r':
			if afterSpace {
				return 0, true
			}
			return 1, true
		case dropped[r]:
			return 0, afterSpace
		}
		return 1, false
	}
	var out string
	if e := simpleOf(enc); e.ign(true) {
		return 0, afterSpace
	} else if !e.ok(true) && (isMark(r) || ignorable(r)) {
		return 0, afterSpace // dropped, without normalising it alone
	} else if !e.ok(true) && (unicode.IsLetter(r) || unicode.IsDigit(r)) && len(norm.NFKD.PropertiesString(enc).Decomposition()) == 0 {
		// a letter or digit of its own is never a space alone (one
		// that decomposes may be a mark: the half-width voiced mark ﾞ
		// is U+3099 in NFKD, dropped: fifth attack pass D3)
		return 1, false
	} else if e.ok(true) {
		if e.out(true) != ' ' {
			return 1, false
		}
		out = " "
	} else {
		b := builder{fold: true}
		b.segment(0, enc, []byte(norm.NFKD.String(enc)))
		out = string(b.b)
	}
	switch {
	case out == "":
		return 0, afterSpace
	case strings.Trim(out, " ") == "":
		if afterSpace {
			return 0, true
		}
		return 1, true
	}
	return 1, out[len(out)-1] == ' '
}

// TailStart is where the tail of s that holds n characters as the rules
// count them begins: a run of whitespace (or of joiners: see joiner) counts once,
// ignorable characters and combining marks not at all, so that padding
// cannot push a phrase out of a window of n. got is the count of s[start:]
// (less than n only when start is 0). start is a rune start.
func TailStart(s string, n int) (start, got int) {
	i := len(s)
	sp := false
	for i > 0 {
		r, sz := utf8.DecodeLastRuneInString(s[:i])
		w, isSp := weight(r, s[i-sz:i], sp)
		if got+w > n {
			return i, got
		}
		got += w
		sp = isSp
		i -= sz
	}
	return 0, got
}

// Blank reports whether the rules read s as whitespace at most: every
// rune of it is dropped (ignorable characters, marks) or read as a space
// (whitespace, joiners, spacing diacritics).
func Blank(s string) bool {
	for i := 0; i < len(s); {
		r, sz := utf8.DecodeRuneInString(s[i:])
		if _, sp := weight(r, s[i:i+sz], true); !sp {
			if w, _ := weight(r, s[i:i+sz], false); w > 0 {
				return false
			}
		}
		i += sz
	}
	return true
}

// BlankEnd is where the run of runes the rules read as whitespace at
// most (see Blank) that ends s begins: len(s) when s does not end with
// one. BlankStart is where the one that begins s ends.
func BlankEnd(s string) int {
	i := len(s)
	for i > 0 {
		_, sz := utf8.DecodeLastRuneInString(s[:i])
		if !Blank(s[i-sz : i]) {
			break
		}
		i -= sz
	}
	return i
}

// BlankStart: see BlankEnd.
func BlankStart(s string) int {
	i := 0
	for i < len(s) {
		_, sz := utf8.DecodeRuneInString(s[i:])
		if !Blank(s[i : i+sz]) {
			break
		}
		i += sz
	}
	return i
}

// HeadEnd is where the head of s that holds n characters as the rules
// count them ends (see TailStart): s[:end] counts got, less than n only
// when end is len(s). end is a rune start.
func HeadEnd(s string, n int) (end, got int) {
	sp := false
	for i := 0; i < len(s); {
		r, sz := utf8.DecodeRuneInString(s[i:])
		w, isSp := weight(r, s[i:i+sz], sp)
		if got+w > n {
			return i, got
		}
		got += w
		sp = isSp
		i += sz
	}
	return len(s), got
}

// noSimpleRunes turns the rune table off (tests: the views must be the
// same without it).
var noSimpleRunes bool

// simpleRunes adds the leading runes of part (at original offset o) that
// are each a normalisation segment of their own, from the rune table,
// and returns how many bytes it added: the rest goes through norm.Iter.
// A rune is taken only when the rune after it is simple too (or part ends
// after it), so no following mark or jamo can join its segment. The
// first byte of part may be the ASCII byte before a non-ASCII stretch.
func (b *builder) simpleRunes(o int, part string) int {
	p := 0
	if part[0] < utf8.RuneSelf {
		if len(part) == 1 || !simpleOf(part[1:]).ok(b.fold) {
			return 0
		}
		b.asciiRun(o, part[:1])
		p = 1
	}
	cur := simpleOf(part[p:])
	for p < len(part) && cur.ok(b.fold) {
		sz := cur.size()
		var next simpleRune
		if p+sz < len(part) {
			next = simpleOf(part[p+sz:])
			if !next.ok(b.fold) {
				return p
			}
		}
		r := cur.out(b.fold)
		src := part[p : p+sz]
		switch {
		case cur.ign(b.fold):
			b.dropped = true
			if b.fold && b.sep && !b.space {
				b.space = true
				b.addSeg(o+p, sz, []byte{' '})
			}
		case b.fold && r == ' ':
			if !b.space {
				b.space = true
				b.addSeg(o+p, sz, []byte{' '})
			}
		case b.fold:
			b.space = false
			fallthrough
		default:
			var w [utf8.UTFMax]byte
			n := utf8.EncodeRune(w[:], r)
			if string(w[:n]) == src {
				b.addPos(o+p, src)
			} else {
				b.addSeg(o+p, sz, w[:n])
			}
		}
		p += sz
		cur = next
	}
	return p
}

// simpleRune is a rune's entry in the rune table: a rune that begins a
// normalisation segment (a boundary before it in NFKC and NFKD), so that
// it is a segment of its own when the rune after it is simple too, and
// whose segment is one rune in a view (not a mark, not several runes) or
// nothing (an ignorable character): its size in UTF-8 (bits 0–2), whether
// it is simple in the NFKC view (bit 3) and the folded one (bit 4), or
// ignorable in them (bits 5 and 6), and
// its output in each (bits 8–28, 32–52). The zero value is not simple.
type simpleRune uint64

func (e simpleRune) size() int { return int(e & 7) }

// ok: simple in that view, ignorable ones included.
func (e simpleRune) ok(fold bool) bool {
	if fold {
		return e&(16|64) != 0
	}
	return e&(8|32) != 0
}

// ign: an ignorable character, which that view drops (bits 5 and 6).
func (e simpleRune) ign(fold bool) bool {
	if fold {
		return e&64 != 0
	}
	return e&32 != 0
}

// counts: a character the folded view keeps, one that counts in a
// window (see weight).
func (e simpleRune) counts() bool { return e&16 != 0 }

func (e simpleRune) out(fold bool) rune {
	if fold {
		return rune(e>>32) & 0x1FFFFF
	}
	return rune(e>>8) & 0x1FFFFF
}

// simpleBlocks is the rune table, filled a block of 256 runes at a time
// on first use (a Scanner is shared: atomic). It covers the BMP, the
// SMP and the tag block (U+E0000–U+E00FF, index 512): at most 513 blocks
// of 2 KiB; other runes take norm.Iter.
var simpleBlocks [513]atomic.Pointer[[256]simpleRune]

// simpleOf is the entry of the rune s begins with (its size filled in).
func simpleOf(s string) simpleRune {
	r, sz := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && sz == 1 {
		return 0
	}
	k := int(r >> 8)
	switch {
	case r < 0x20000:
	case r >= 0xE0000 && r <= 0xE00FF:
		k = 512
	default:
		return 0
	}
	blk := simpleBlocks[k].Load()
	if blk == nil {
		blk = simpleBlock(r &^ 0xFF)
		simpleBlocks[k].Store(blk)
	}
	return blk[r&0xFF]
}

// simpleBlock computes the entries of the runes [first, first+256), by
// running each alone through the same segment code the views use.
func simpleBlock(first rune) *[256]simpleRune {
	var blk [256]simpleRune
	for i := range blk {
		r := first + rune(i)
		if r < utf8.RuneSelf || !utf8.ValidRune(r) {
			continue
		}
		src := string(r)
		c, d := norm.NFKC.PropertiesString(src), norm.NFKD.PropertiesString(src)
		if !c.BoundaryBefore() || !d.BoundaryBefore() {
			continue // it may join the segment before it
		}
		e := simpleRune(len(src))
		for _, fold := range [2]bool{false, true} {
			form := norm.NFKC
			if fold {
				form = norm.NFKD
			}
			seg := form.String(src)
			if form.String(src+"a") != seg+"a" || seg != "" &&
				(!norm.NFKC.PropertiesString(seg).BoundaryBefore() || !norm.NFKD.PropertiesString(seg).BoundaryBefore()) {
				// not a segment of its own after all, or one whose
				// normal form may join the segment before it (a
				// compatibility jamo is a conjoining one, which composes
				// with the jamo before it: third attack pass B5)
				continue
			}
			b := builder{fold: fold}
			b.segment(0, src, []byte(seg))
			out := string(b.b)
			if b.dropped && out == "" {
				// ignorable: dropped (a space in the second folded view)
				if fold {
					e |= 64
				} else {
					e |= 32
				}
				continue
			}
			if b.dropped || utf8.RuneCountInString(out) != 1 {
				continue
			}
			o, _ := utf8.DecodeRuneInString(out)
			if fold {
				e |= 16 | simpleRune(o)<<32
			} else {
				e |= 8 | simpleRune(o)<<8
			}
		}
		blk[i] = e
	}
	return &blk
}
