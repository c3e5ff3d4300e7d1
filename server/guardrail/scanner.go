package guardrail

import (
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

// rawPool holds the detectors' match buffers between scans (a 4 KiB
// prompt with a dozen emails grew one five times per scan).
var rawPool = sync.Pool{New: func() any { return new([]rawMatch) }}

// engine is what a Scanner runs, built from its rules.
type engine struct {
	want   [nKinds]bool
	byKind [nKinds][]*Rule
	// phrases finds the injection phrases and banned words (folded
	// view); phraseRules[p] are the rules of pattern p.
	phrases     *trie
	phraseRules [][]*Rule
	rx          []*rxRule
	// lookAhead: whether any rule needs the NFKC (pii, secrets, regex) or
	// the folded view (injection, banned).
	nfkc, folded bool
}

type rxRule struct {
	rule *Rule
	re   *regexp.Regexp
	// ctx finds the leftmost match at or after a text's second rune,
	// seeing the first as context (the Holder resumes a scan with it).
	ctx *regexp.Regexp
	// maxLen is the longest match in bytes of the NFKC view; -1:
	// unbounded (a Holder then holds everything until Flush).
	maxLen int
}

var entityKind = map[string]int{
	EntityEmail: kEmail, EntityPhone: kPhone, EntityCreditCard: kCard,
	EntityIBAN: kIBAN, EntityIPv4: kIPv4, EntityIPv6: kIPv6,
}

// injectionFolded is injectionPhrases expanded and folded, once.
var injectionFolded = func() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range injectionPhrases {
		for _, x := range expand(p) {
			f := foldPhrase(x)
			if f != "" && !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out
}()

func ruleName(sp *Spec) string {
	ph := "prompt"
	if sp.Phase == Response {
		ph = "response"
	}
	return fmt.Sprintf("policy %q guardrails.%s[%d] (%s)", sp.Policy, ph, sp.Index, sp.Type)
}

// validate checks a spec; the error names the rule.
func validate(sp *Spec) (*rxRule, error) {
	switch sp.Type {
	case TypePII:
		for _, e := range sp.Entities {
			if _, ok := entityKind[e]; !ok {
				return nil, fmt.Errorf("%s: unknown entity %q (email, phone, credit_card, iban, ipv4, ipv6)", ruleName(sp), e)
			}
		}
	case TypeSecrets:
	case TypeInjection:
	case TypeBanned:
		n := 0
		for _, w := range sp.Words {
			if foldPhrase(w) != "" {
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("%s: no words", ruleName(sp))
		}
	case TypeRegex:
		re, err := regexp.Compile(sp.Pattern)
		if err != nil {
			return nil, fmt.Errorf("%s: bad RE2 pattern: %v", ruleName(sp), err)
		}
		st, err := syntax.Parse(sp.Pattern, syntax.Perl)
		if err != nil {
			return nil, fmt.Errorf("%s: bad RE2 pattern: %v", ruleName(sp), err)
		}
		st = st.Simplify()
		if minLen(st) == 0 {
			return nil, fmt.Errorf("%s: pattern %q matches the empty string", ruleName(sp), sp.Pattern)
		}
		ctx, err := regexp.Compile(`^(?s:.)(?s:.*?)(` + sp.Pattern + `)`)
		if err != nil {
			return nil, fmt.Errorf("%s: bad RE2 pattern: %v", ruleName(sp), err)
		}
		ml := maxLen(st)
		if ml >= math.MaxInt32 {
			ml = -1
		}
		return &rxRule{re: re, ctx: ctx, maxLen: ml}, nil
	default:
		return nil, fmt.Errorf("%s: unknown type %q (pii, secrets, injection, banned, regex)", ruleName(sp), sp.Type)
	}
	switch sp.Action {
	case Deny, Redact, Log:
	default:
		return nil, fmt.Errorf("%s: no action", ruleName(sp))
	}
	return nil, nil
}

const inf = math.MaxInt32

func sat(a, b int) int {
	if a >= inf || b >= inf || a+b >= inf {
		return inf
	}
	return a + b
}

// maxLen is the longest text in bytes re matches (inf: unbounded).
func maxLen(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		n := 0
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				n += 4 // a fold can change the encoding's length (k, K, U+212A)
			} else {
				n += utf8.RuneLen(r)
			}
		}
		return n
	case syntax.OpCharClass:
		if len(re.Rune) == 0 {
			return 0
		}
		hi := re.Rune[len(re.Rune)-1]
		if hi > utf8.MaxRune {
			hi = utf8.MaxRune
		}
		return utf8.RuneLen(hi)
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		return utf8.UTFMax
	case syntax.OpCapture:
		return maxLen(re.Sub[0])
	case syntax.OpConcat:
		n := 0
		for _, s := range re.Sub {
			n = sat(n, maxLen(s))
		}
		return n
	case syntax.OpAlternate:
		n := 0
		for _, s := range re.Sub {
			n = max(n, maxLen(s))
		}
		return n
	case syntax.OpQuest:
		return maxLen(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		if maxLen(re.Sub[0]) == 0 {
			return 0
		}
		return inf
	case syntax.OpRepeat:
		m := maxLen(re.Sub[0])
		if re.Max < 0 {
			if m == 0 {
				return 0
			}
			return inf
		}
		if m >= inf || m*re.Max >= inf {
			return inf
		}
		return m * re.Max
	}
	return 0 // empty-width assertions, empty match
}

// minLen is the shortest text in bytes re matches.
func minLen(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		return len(re.Rune)
	case syntax.OpCharClass, syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		return 1
	case syntax.OpCapture, syntax.OpPlus:
		return minLen(re.Sub[0])
	case syntax.OpConcat:
		n := 0
		for _, s := range re.Sub {
			n += minLen(s)
		}
		return n
	case syntax.OpAlternate:
		n := inf
		for _, s := range re.Sub {
			n = min(n, minLen(s))
		}
		return n
	case syntax.OpRepeat:
		return re.Min * minLen(re.Sub[0])
	}
	return 0
}

// Compile checks specs and compiles them into one Scanner; nil, nil for
// no specs.
func compile(specs []Spec) (*Scanner, error) {
	rules := make([]*Rule, 0, len(specs))
	for i := range specs {
		sp := specs[i]
		rx, err := validate(&sp)
		if err != nil {
			return nil, err
		}
		if sp.Type == TypeRegex {
			switch sp.Action {
			case Deny, Redact, Log:
			default:
				return nil, fmt.Errorf("%s: no action", ruleName(&sp))
			}
		}
		r := &Rule{Spec: sp}
		r.rx = rx
		if rx != nil {
			rx.rule = r
		}
		rules = append(rules, r)
	}
	return newScanner(rules), nil
}

func newScanner(rules []*Rule) *Scanner {
	s := &Scanner{rules: rules}
	e := &s.eng
	pats := map[string]int{}
	var list []string
	addPat := func(p string, r *Rule) {
		k, ok := pats[p]
		if !ok {
			k = len(list)
			pats[p] = k
			list = append(list, p)
			e.phraseRules = append(e.phraseRules, nil)
		}
		if !slices.Contains(e.phraseRules[k], r) {
			e.phraseRules[k] = append(e.phraseRules[k], r)
		}
	}
	for _, r := range rules {
		switch r.Type {
		case TypePII:
			ents := r.Entities
			if len(ents) == 0 {
				ents = []string{EntityEmail, EntityPhone, EntityCreditCard, EntityIBAN, EntityIPv4, EntityIPv6}
			}
			for _, en := range ents {
				k := entityKind[en]
				if !slices.Contains(e.byKind[k], r) {
					e.byKind[k] = append(e.byKind[k], r)
				}
				e.want[k] = true
			}
			e.nfkc = true
		case TypeSecrets:
			e.byKind[kSecret] = append(e.byKind[kSecret], r)
			e.want[kSecret] = true
			e.nfkc = true
		case TypeInjection:
			for _, p := range injectionFolded {
				addPat(p, r)
			}
			for _, p := range r.Phrases {
				for _, x := range expand(p) {
					if f := foldPhrase(x); f != "" {
						addPat(f, r)
					}
				}
			}
			e.folded = true
		case TypeBanned:
			for _, w := range r.Words {
				if f := foldPhrase(w); f != "" {
					addPat(f, r)
					// a phrase's words run together are the phrase too
					// (projecthydra, #ProjectHydra), still on word
					// boundaries (projecthydras is another word)
					if j := strings.ReplaceAll(f, " ", ""); j != f {
						addPat(j, r)
					}
				}
			}
			e.folded = true
		case TypeRegex:
			e.rx = append(e.rx, r.rx)
			e.nfkc = true
		}
	}
	if len(list) > 0 {
		e.phrases = newTrie(list)
	}
	return s
}

func entityOf(r *Rule, kind int) string {
	switch r.Type {
	case TypeInjection:
		return "injection"
	case TypeBanned:
		return "banned"
	case TypeRegex:
		return "regex"
	}
	return kindEntity[kind]
}

// scan finds the matches of the scanner's rules in text. final: text is
// whole. Otherwise (a Holder's window) matches that more text could change
// are left out and hold is the smallest original offset such a match, or
// one still to come, can start at (len(text) when none).
//
// rxFrom, when non-nil, is each regex rule's resume offset (a Holder's):
// its scan restarts there, and rxFrom is advanced to where it can resume
// next time.
func (s *Scanner) scan(text string, final bool, dst []Match, rxFrom []int) ([]Match, int) {
	e := &s.eng
	if k := strings.IndexByte(text, '\\'); k >= 0 {
		text = blankEscapes(text, k, final)
	}
	hold := len(text)
	plain := plainASCII(text)
	if e.nfkc {
		v := nfkcView(text, plain)
		if e.want != [nKinds]bool{} {
			out := rawPool.Get().(*[]rawMatch)
			d := det{s: v.s, want: e.want, final: final, out: (*out)[:0]}
			d.scan()
			for _, m := range d.out {
				a, b := v.span(m.s, m.e)
				for _, r := range e.byKind[m.kind] {
					dst = append(dst, Match{Start: a, End: b, Entity: kindEntity[m.kind], Rule: r})
				}
			}
			if !final && d.hold < len(v.s) {
				hold = min(hold, v.origStart(d.hold))
			}
			if cap(d.out) <= 1024 {
				*out = d.out
				rawPool.Put(out)
			}
		}
		for k, rx := range e.rx {
			if rxFrom == nil {
				for _, m := range rx.re.FindAllStringIndex(v.s, -1) {
					a, b := v.span(m[0], m[1])
					dst = append(dst, Match{Start: a, End: b, Entity: "regex", Rule: rx.rule})
				}
				continue
			}
			var h int
			dst, h = rx.resume(&v, final, dst, &rxFrom[k])
			hold = min(hold, h)
		}
	}
	if e.folded && e.phrases != nil {
		dst, hold = s.phrases(text, plain, final, dst, hold)
	}
	return dst, hold
}

// blankEscapes returns text with each JSON whitespace escape (\t, \n,
// \r, \f, \b: two bytes; \u0000–\u001f: six) as whitespace, read from the first backslash
// at k: a tool call's arguments are JSON, and "4111\t1111\t…" there is a
// card to the tool that decodes it, "ignore all previous\ninstructions"
// the phrase to the model. The length is kept, so matches index text
// itself. An escaped backslash is skipped whole ("\\n" is a backslash and
// an n); a backslash at the end of a text still to come (!final) reads
// as a space until its escape is known.
func blankEscapes(text string, k int, final bool) string {
	b := []byte(text)
	for i := k; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+1 == len(b) {
			if !final {
				b[i] = ' '
			}
			break
		}
		switch b[i+1] {
		case 't', 'b':
			b[i], b[i+1] = ' ', ' '
		case 'n':
			b[i], b[i+1] = ' ', '\n' // a line break still: a column of numbers is no card
		case 'r':
			b[i], b[i+1] = ' ', '\r'
		case 'f':
			b[i], b[i+1] = ' ', '\f'
		case 'u':
			// \u0000–\u001f, a control character: one space, then five
			// bytes the views drop (six spaces would be more than a
			// card's separators)
			if i+6 <= len(b) && b[i+2] == '0' && b[i+3] == '0' && (b[i+4] == '0' || b[i+4] == '1') && isHexByte(b[i+5]) {
				c := byte(' ')
				if b[i+4] == '0' && (b[i+5]|0x20 == 'a' || b[i+5]|0x20 == 'b' || b[i+5]|0x20 == 'c' || b[i+5]|0x20 == 'd') {
					c = '\n'
				}
				copy(b[i:i+6], "\x00\x01\x01\x01\x01\x01")
				b[i] = c
				i += 4
			}
		}
		i++
	}
	return string(b)
}

func isHexByte(c byte) bool { return bcls[c]&bHex != 0 }

// phrases finds injection phrases and banned words: on pure-ASCII text
// directly (the automaton folds case and whitespace), otherwise on the
// folded view, and when that view dropped an ignorable character, on the
// view where each is a space too (sepView), the matches of both reported
// once.
func (s *Scanner) phrases(text string, ascii, final bool, dst []Match, hold int) ([]Match, int) {
	if ascii {
		return s.phrasesIn(text, nil, final, dst, hold)
	}
	v := foldedView(text)
	n := len(dst)
	dst, hold = s.phrasesIn(text, &v, final, dst, hold)
	if !v.dropped {
		return dst, hold
	}
	sv := sepView(text)
	m := len(dst)
	dst, hold = s.phrasesIn(text, &sv, final, dst, hold)
	// drop what the first view found already
	out := dst[:m]
	for _, x := range dst[m:] {
		if !slices.Contains(dst[n:m], x) {
			out = append(out, x)
		}
	}
	return out, hold
}

// phrasesIn runs the phrase trie over v (nil: text itself, pure ASCII).
func (s *Scanner) phrasesIn(text string, v *view, final bool, dst []Match, hold int) ([]Match, int) {
	e := &s.eng
	src := text
	if v != nil {
		src = v.s
	}
	h := e.phrases.scan(src, v == nil, final, func(st, end int, p int32) {
		x, y := st, end
		if v != nil {
			x, y = v.span(st, end)
		}
		for _, r := range e.phraseRules[p] {
			dst = append(dst, Match{Start: x, End: y, Entity: entityOf(r, 0), Rule: r})
		}
	})
	if !final && h < len(src) {
		if v != nil {
			h = v.origStart(h)
		}
		hold = min(hold, h)
	}
	return dst, hold
}

// resume continues a regex rule's leftmost-first scan at *from (an
// original offset of v's text): it appends the matches no more text can
// change, advances *from past them (and past every offset no match can
// start at any more) and returns the hold: *from.
func (rx *rxRule) resume(v *view, final bool, dst []Match, from *int) ([]Match, int) {
	vp := v.viewPos(*from)
	for vp < len(v.s) {
		var a, b int
		if vp == 0 {
			m := rx.re.FindStringIndex(v.s)
			if m == nil {
				break
			}
			a, b = m[0], m[1]
		} else {
			_, w := utf8.DecodeLastRuneInString(v.s[:vp])
			base := vp - w
			m := rx.ctx.FindStringSubmatchIndex(v.s[base:])
			if m == nil {
				break
			}
			a, b = base+m[2], base+m[3]
		}
		if !final && (rx.maxLen < 0 || a+rx.maxLen+1 > len(v.s)) {
			// could still grow, or a match starting before it could
			// still appear: resume no later than n - maxLen - 1.
			if rx.maxLen >= 0 {
				vp = max(vp, min(a, len(v.s)-rx.maxLen-1))
			}
			vp = runeStart(v.s, vp)
			*from = v.origStart(vp)
			return dst, *from
		}
		x, y := v.span(a, b)
		dst = append(dst, Match{Start: x, End: y, Entity: "regex", Rule: rx.rule})
		vp = b
	}
	if final {
		*from = v.olen
		return dst, v.olen
	}
	if rx.maxLen >= 0 {
		vp = max(vp, len(v.s)-rx.maxLen-1)
	}
	vp = runeStart(v.s, min(vp, len(v.s)))
	*from = v.origStart(vp)
	return dst, *from
}

// viewPos is the view offset of original offset o: the start of the
// segment o is in, or of the next one when o is in text the view dropped.
func (w *view) viewPos(o int) int {
	if w.runs == nil {
		return min(o, len(w.s))
	}
	if o >= w.olen || len(w.runs) == 0 {
		return len(w.s)
	}
	// the last run starting at or before o
	k := sort.Search(len(w.runs), func(k int) bool { return int(w.runs[k].o) > o }) - 1
	if k < 0 {
		return 0
	}
	r := w.runs[k]
	if o < int(r.o+r.n) {
		if r.pos {
			return int(r.v) + o - int(r.o)
		}
		return int(r.v)
	}
	if k+1 < len(w.runs) {
		return int(w.runs[k+1].v)
	}
	return len(w.s)
}

// runeStart is the start of the rune at i in s.
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}
