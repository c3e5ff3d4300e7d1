package guardrail

import (
	"encoding/base64"
	"encoding/json"
	"math/bits"
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The pii and secrets detectors. They scan the NFKC view once: a byte
// class table finds the few bytes that can begin a match (a letter at a
// word start, a digit at a number start, '@', ':', '+', '(', '-') and each
// candidate is parsed by hand and validated in code (Go's RE2 has no
// look-around, and validation — Luhn, mod-97, netip — is code anyway).
//
// Every decision about a candidate at s reads only the view from s-80 to
// its end plus a few bytes: the Holder relies on it. A read past the end
// of the text sets det.eot: the candidate is undetermined (more text could
// change it), which is how the Holder knows what to hold.

// kinds of detection (index into Scanner.byKind).
const (
	kEmail = iota
	kPhone
	kCard
	kIBAN
	kIPv4
	kIPv6
	kSecret
	nKinds
)

var kindEntity = [nKinds]string{EntityEmail, EntityPhone, EntityCreditCard, EntityIBAN, EntityIPv4, EntityIPv6, "secret"}

// Byte classes.
const (
	bDigit = 1 << iota
	bUpper
	bLower
	bWord  // [A-Za-z0-9_]
	bLocal // an email local part's byte
	bDom   // [A-Za-z0-9.-]
	bHex   // [0-9A-Fa-f]
	bB64   // [A-Za-z0-9_-]
)

var bcls = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		var k uint8
		switch {
		case b >= '0' && b <= '9':
			k = bDigit | bWord | bLocal | bDom | bHex | bB64
		case b >= 'A' && b <= 'Z':
			k = bUpper | bWord | bLocal | bDom | bB64
			if b <= 'F' {
				k |= bHex
			}
		case b >= 'a' && b <= 'z':
			k = bLower | bWord | bLocal | bDom | bB64
			if b <= 'f' {
				k |= bHex
			}
		case b == '_':
			k = bWord | bLocal | bB64
		case b == '-':
			k = bLocal | bDom | bB64
		case b == '.':
			k = bLocal | bDom
		case strings.IndexByte("!#$%&'*+/=?^`{|}~", b) >= 0:
			k = bLocal
		}
		t[c] = k
	}
	return
}()

// Triggers of the main loop.
const (
	tNone = iota
	tLetter
	tDigit
	tAt
	tColon
	tPhone // '+', '('
	tDash
	tKey // '_': a key's anchor (see anchored)
)

// trigs are the main loop's trigger tables, by whether secrets are
// wanted (trigs[1]): a letter is a trigger only where a key is found from
// it, so that the words of prose are skipped by the loop's tight scan
// rather than one by one (BenchmarkFind4KiB). An IBAN is found from its
// first check digit, a digit being a trigger anyway.
var trigs = func() (ts [2][256]uint8) {
	ts[0] = trigBase
	ts[1] = trigBase
	// every key holds an upper-case letter, '-' or '_' at a fixed place
	// (sk-, xoxb-, ghp_, github_pat_, eyJ, AKIA, AIza): it is found from
	// there (anchored), so that lower-case letters and spaces never stop
	// the scan
	ts[1]['A'] = tLetter
	ts[1]['J'] = tLetter
	ts[1]['_'] = tKey
	return
}()

var trigBase = func() (t [256]uint8) {
	for c := '0'; c <= '9'; c++ {
		t[c] = tDigit
	}
	t['@'] = tAt
	t[':'] = tColon
	t['+'] = tPhone
	t['('] = tPhone
	t['-'] = tDash
	return
}()

// Bounds (in bytes of the view).
const (
	emailLocalMax = 64
	emailMax      = 254
	v6Max         = 45
	keyMax        = 512
	jwtMax        = 16 << 10 // a token with many group claims (Entra ID) passes 8 KiB
	jwtHeaderMax  = 1 << 10  // a JOSE header's base64 (alg, typ, kid, enc, cty…)
	pemMax        = 16 << 10
	lookBehind    = 80 // what a decision may read before its candidate
)

type rawMatch struct {
	s, e int
	kind int
}

type det struct {
	s   string
	eot bool // a read hit the end of the text
	// final: the text is whole (Find, Flush): a read past its end is the
	// end, not a reason to wait.
	final bool
	want  [nKinds]bool
	out   []rawMatch
	// hold is the smallest start of an undetermined candidate (len(s)
	// when none).
	hold int
	// noEnd: no PEM END line begins in s[noEnd[0]:noEnd[1]] (pem).
	noEnd [2]int
	// noMAC: no "Private-MAC:" begins in s[noMAC[0]:noMAC[1]] (putty).
	noMAC [2]int
	// b64: s[b64[0]:b64[1]] is a run of base64url bytes ending at a
	// byte of none (b64run).
	b64 [2]int
	// keyEnd is the end of the last key or private key block found;
	// keyHeld the start of the first undetermined one (len(s) when none):
	// a candidate inside the one or after the other is not tried.
	keyEnd, keyHeld int
	// du: s[du[1]-1] is the first digit or upper-case letter from du[0]
	// (nextDigitOrUpper; du[1] == 0: none remembered).
	du [2]int
}

// at is s[j], or 0 (and eot) past the end.
func (d *det) at(j int) byte {
	if j < len(d.s) {
		return d.s[j]
	}
	d.eot = true
	return 0
}

func (d *det) cls(j int) uint8 { return bcls[d.at(j)] }

func (d *det) prev(i int) byte {
	if i > 0 {
		return d.s[i-1]
	}
	return 0
}

// try runs f on a candidate at i: a match is recorded, an undetermined
// candidate lowers hold.
func (d *det) try(i, kind int, f func(int) int) int {
	d.eot = false
	e := f(i)
	if d.eot && !d.final {
		if i < d.hold {
			d.hold = i
		}
		return -1
	}
	if e > i {
		d.out = append(d.out, rawMatch{i, e, kind})
	}
	return e
}

// hasPrefixFold is hasPrefix in any case; p is lower case.
func (d *det) hasPrefixFold(i int, p string) bool {
	for k := 0; k < len(p); k++ {
		if d.at(i+k)|0x20 != p[k] {
			return false
		}
	}
	return true
}

// indexFold is strings.Index of the lower-case ASCII word in s, in any
// case; firsts is word's first letter in both cases ("pP"). One pass:
// each candidate is found with strings.IndexAny from the last one.
func indexFold(s, word, firsts string) int {
	for i := 0; i+len(word) <= len(s); i++ {
		k := strings.IndexAny(s[i:len(s)-len(word)+1], firsts)
		if k < 0 {
			return -1
		}
		i += k
		if strings.EqualFold(s[i:i+len(word)], word) {
			return i
		}
	}
	return -1
}

func (d *det) hasPrefix(i int, p string) bool {
	for k := 0; k < len(p); k++ {
		if d.at(i+k) != p[k] {
			return false
		}
	}
	return true
}

// run returns the end of the run of bytes of class c from i (at most
// max bytes; reading the byte after it).
func (d *det) run(i int, c uint8, max int) int {
	j := i
	for j-i <= max && d.cls(j)&c != 0 {
		j++
	}
	return j
}

func (d *det) scan() {
	s := d.s
	n := len(s)
	d.hold = n
	d.keyHeld = n
	pii := d.want[kEmail] || d.want[kPhone] || d.want[kCard] || d.want[kIBAN] || d.want[kIPv4] || d.want[kIPv6]
	v6done := 0
	trig := &trigs[0]
	if d.want[kSecret] {
		trig = &trigs[1]
	}
	for i := 0; i < n; {
	next:
		for i+8 <= n {
			// prose: nothing begins at a lower-case letter, a space or a
			// non-ASCII byte, so only the other bytes of 8 are looked up
			for m := notLowerOrSpace(s, i); m != 0; m &= m - 1 {
				if k := i + bits.TrailingZeros64(m)>>3; trig[s[k]] != tNone {
					i = k
					break next
				}
			}
			i += 8
		}
		for i < n && trig[s[i]] == tNone {
			i++
		}
		if i >= n {
			break
		}
		switch trig[s[i]] {
		case tLetter:
			if d.want[kSecret] {
				d.anchored(i)
			}
			// on to the next trigger, in this word too: a key or a card
			// glued to the text before it (tokenghp_…, card4111…)
		case tKey:
			if d.want[kSecret] {
				d.anchored(i)
			}
		case tDigit:
			if d.want[kIBAN] && d.ibanStart(i-2) {
				// the first check digit of an IBAN (DE89…)
				d.try(i-2, kIBAN, d.iban)
			}
			if pii {
				if p := bcls[d.prev(i)]; p&bWord == 0 {
					d.number(i)
				} else if p&bDigit == 0 && d.want[kCard] {
					// after a letter or '_': a card glued to the text
					// before it (card4111…, x_4111…); a phone or an
					// address is not (v1.2.3.4, ext555-1234)
					d.try(i, kCard, d.card)
				}
			}
			for i < n && bcls[s[i]]&bDigit != 0 {
				i++
			}
			continue
		case tAt:
			if d.want[kEmail] {
				d.eot = false
				k, e := d.email(i)
				if d.eot && !d.final {
					d.hold = min(d.hold, k)
				} else if e > 0 {
					d.out = append(d.out, rawMatch{k, e, kEmail})
				}
			}
		case tColon:
			if d.want[kIPv6] && i >= v6done {
				v6done = d.ipv6(i)
			}
		case tPhone:
			if p := d.prev(i); d.want[kPhone] && bcls[p]&bWord == 0 && !(p == ' ' && i >= 2 && bcls[s[i-2]]&bDigit != 0) {
				d.try(i, kPhone, d.phone)
			}
		case tDash:
			if d.want[kSecret] {
				// any byte before: x-----BEGIN, a sixth dash
				if i >= d.keyEnd && i <= d.keyHeld {
					// a BEGIN line inside a block found already is part
					// of it (one match per block, not one per line)
					if e := d.try(i, kSecret, d.pem); e > i {
						d.keyEnd = e
					} else if e < 0 && d.eot && !d.final {
						d.keyHeld = i // held from i: what starts after is looked at again
					}
				}
				if i >= 5 && s[i-1]|0x20 == 'y' {
					d.try(i-5, kSecret, func(int) int { return d.putty(i) })
				}
				d.anchored(i)
			}
		}
		i++
	}
	if !d.final {
		d.trailing()
	}
}

// trailing holds the end runs a trigger still to come could make part of
// a match: an email's local part before its '@', an IPv6 address before
// its first ':'.
func (d *det) trailing() {
	n := len(d.s)
	if d.want[kSecret] {
		// a key's first bytes before its anchor: sk, xoxb, gh, ghp,
		// githu…, ey (anchored finds the key once its anchor comes)
		for _, p := range [...]string{"sk-", "xox?-", "gh?_", "github_", "eyJ"} {
			for l := min(len(p)-1, n); l > 0; l-- {
				if prefixOf(d.s[n-l:], p) {
					d.hold = min(d.hold, n-l)
					break
				}
			}
		}
	}
	if d.want[kIBAN] {
		// an IBAN's country code before its check digits
		for k := max(n-2, 0); k < n; k++ {
			if n-k == 2 && d.ibanStart(k) || n-k == 1 && bcls[d.s[k]]&(bUpper|bLower) != 0 && (k < 1 || bcls[d.s[k-1]]&bWord == 0 || k >= 4 && strings.EqualFold(d.s[k-4:k], "iban")) {
				d.hold = min(d.hold, k)
				break
			}
		}
	}
	if d.want[kEmail] {
		k := localStart(d.s, n)
		if k < d.hold {
			d.hold = k
		}
	}
	if d.want[kIPv6] {
		k := n
		for k > 0 && n-k <= v6Max && (bcls[d.s[k-1]]&bHex != 0 || d.s[k-1] == ':' || d.s[k-1] == '.') {
			k--
		}
		if n-k <= v6Max && k < d.hold {
			d.hold = k
		}
	}
}

// anchored tries the key whose anchor is the byte at i: 'A' begins
// AKIA…, ASIA… and AIza…; 'J' is the third byte of a JWT (eyJ); '-' the
// third of sk- and the fifth of xoxb-; '_' the fourth of ghp_ and the
// seventh of github_pat_. The key's own boundary is key's to check.
func (d *det) anchored(i int) {
	s := d.s
	back := func(k int, p string) bool { return k >= 0 && s[k:k+len(p)] == p }
	k := -1
	switch s[i] {
	case 'A':
		k = i
	case 'J':
		if back(i-2, "ey") {
			k = i - 2
		}
	case '-':
		if back(i-2, "sk") {
			k = i - 2
		} else if back(i-4, "xox") {
			k = i - 4
		}
	case '_':
		if back(i-3, "gh") {
			k = i - 3
		} else if back(i-6, "github") {
			k = i - 6
		}
	}
	// a key inside a key found already is part of it ("sk-sk-sk-…" is
	// one match, not one per anchor)
	if k >= 0 && k >= d.keyEnd && k <= d.keyHeld {
		if e := d.try(k, kSecret, d.key); e > k {
			d.keyEnd = e
		} else if e < 0 && d.eot && !d.final {
			// undetermined: held from k, so every key starting after it
			// is looked at again with more text (sk-sk-sk-… read each
			// anchor's body on every push of a stream)
			d.keyHeld = k
		}
	}
}

// prefixOf reports whether t is a prefix of p, where '?' in p is any byte.
func prefixOf(t, p string) bool {
	for k := 0; k < len(t); k++ {
		if p[k] != '?' && p[k] != t[k] {
			return false
		}
	}
	return true
}

// notLowerOrSpace has the top bit set of each of the 8 bytes of s at i
// that is an ASCII byte other than a lower-case letter or a space (SWAR on
// the bytes' low 7 bits, so no carry crosses a byte: b+0x1F has its top
// bit set when b >= 'a', b+0x05 when b > 'z'; b^0x20 is zero for a space).
func notLowerOrSpace(s string, i int) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	x := load64(s, i)
	b := x &^ hi
	lower := (b + 0x1F*lo) &^ (b + 0x05*lo)
	y := b ^ 0x20*lo
	space := ^((y + 0x7F*lo) | y)
	return hi &^ (lower | space | x)
}

// key matches a provider API key or a JWT at i, or returns -1. Each kind
// has its own boundary before it, since a key is pasted after `KEY_`,
// `=`, `--` or a word as often as after a space:
//   - sk-…, sk-proj-…, sk-ant-… (OpenAI, Anthropic): after any byte but a
//     letter or digit, with 20 or more bytes of [A-Za-z0-9_-] holding a
//     digit or an upper-case letter (a key's random body does, a
//     kebab-case word like sk-learn-is-a-python-library does not); after a
//     letter or digit (tokensk-…) only with 40 or more that mix upper
//     case, lower case and digits, as a generated key does and a
//     kebab-case word (risk-assessment-…, task-2024-…) does not;
//   - AKIA… and ASIA… (AWS access key ids, long-term and session): 16 of
//     [A-Z0-9] after the prefix, with neither an upper-case letter nor a
//     digit on either side (a longer id of the same alphabet is not a
//     key); lower case, `_` or `-` around it is a boundary;
//   - ghp_, gho_, ghu_, ghs_, ghr_ and github_pat_ (GitHub), xoxb-, xoxp-,
//     xoxa-, xoxs- (Slack), AIza (Google, exactly 39 bytes) and JWTs
//     (eyJ…, a header that decodes with "alg"): after any byte, their
//     prefix and shape being boundary enough.
func (d *det) key(i int) int {
	p := bcls[d.prev(i)]
	switch d.s[i] {
	case 's':
		if !d.hasPrefix(i, "sk-") {
			return -1
		}
		e := min(d.b64run(i+3, keyMax), i+3+keyMax+1)
		if e-i < 3+20 {
			return -1
		}
		body := d.s[i+3 : min(e, len(d.s))]
		if p&(bUpper|bLower|bDigit) != 0 && !generated(body) {
			return -1
		}
		if d.nextDigitOrUpper(i+3) >= i+3+len(body) {
			return -1 // a kebab-case word (sk-learn-is-a-python-library), no key
		}
		return min(e, i+keyMax)
	case 'A':
		if d.hasPrefix(i, "AKIA") || d.hasPrefix(i, "ASIA") {
			if p&(bUpper|bDigit) != 0 {
				return -1 // inside a longer id
			}
			for j := i + 4; j < i+20; j++ {
				if c := d.cls(j); c&(bUpper|bDigit) == 0 {
					return -1
				}
			}
			if d.cls(i+20)&(bUpper|bDigit) != 0 {
				return -1 // a longer id of the same alphabet: not a key
			}
			return i + 20 // a key glued to lower-case text or `_` is still a key
		}
		if d.hasPrefix(i, "AIza") { // Google API key
			e := d.run(i+4, bB64, 36)
			if e-i != 39 {
				return -1
			}
			return e
		}
	case 'g': // GitHub tokens
		if d.hasPrefix(i, "github_pat_") {
			e := d.run(i+11, bWord, keyMax)
			if e-i < 11+22 {
				return -1
			}
			return min(e, i+keyMax)
		}
		if d.hasPrefix(i, "gh") {
			switch d.at(i + 2) {
			case 'p', 'o', 's', 'u', 'r':
			default:
				return -1
			}
			if d.at(i+3) != '_' {
				return -1
			}
			e := d.run(i+4, bUpper|bLower|bDigit, keyMax)
			if e-i < 4+36 {
				return -1
			}
			return min(e, i+keyMax)
		}
	case 'x': // Slack tokens
		if d.hasPrefix(i, "xox") {
			switch d.at(i + 3) {
			case 'b', 'p', 'a', 's':
			default:
				return -1
			}
			if d.at(i+4) != '-' {
				return -1
			}
			e := d.run(i+5, bUpper|bLower|bDigit|bDash, keyMax)
			if e-i < 5+10 {
				return -1
			}
			return min(e, i+keyMax)
		}
	case 'e':
		if d.hasPrefix(i, "eyJ") {
			return d.jwt(i)
		}
	}
	return -1
}

// generated reports a key body that mixes upper case, lower case and
// digits over 40 bytes or more.
func generated(b string) bool {
	if len(b) < 40 {
		return false
	}
	var k uint8
	for i := 0; i < len(b); i++ {
		k |= bcls[b[i]]
	}
	return k&bUpper != 0 && k&bLower != 0 && k&bDigit != 0
}

const bDash = bB64 // '-' has bB64 (with letters and digits: the Slack alphabet)

// jwt matches a JWS, header.payload.signature (RFC 7515 compact form;
// the signature may be empty), or a JWE, five parts of which the second
// may be empty (RFC 7516 §7.1, a header with "enc"), whose header
// decodes to a JSON object with "alg"; at most jwtMax bytes.
func (d *det) jwt(i int) int {
	a := d.b64run(i, jwtHeaderMax)
	if a-i > jwtHeaderMax || d.at(a) != '.' || (a-i)%4 == 1 {
		return -1
	}
	// the header's last base64 group first: a JSON object ends with '}'
	// (or whitespace), so most candidates inside a blob stop here
	r := (a - i) % 4
	if r == 0 {
		r = 4
	}
	last := d.s[a-r : a]
	tail, err := base64.RawURLEncoding.DecodeString(last)
	if err != nil || !strings.ContainsAny(string(tail), "} \t\r\n") {
		return -1
	}
	hdr, err := base64.RawURLEncoding.DecodeString(d.s[i:a])
	if err != nil {
		return -1
	}
	var h struct{ Alg, Enc json.RawMessage }
	if json.Unmarshal(hdr, &h) != nil || h.Alg == nil {
		return -1
	}
	jwe := h.Enc != nil
	// ends[k]: the end of the part after the header's k-th dot
	var ends [4]int
	n, p := 0, a
	for n < 4 && d.at(p) == '.' {
		q := d.b64run(p+1, jwtMax-(p+1-i))
		if q-i > jwtMax {
			return -1
		}
		ends[n] = q
		n++
		p = q
	}
	if jwe && n == 4 && ends[1] > ends[0]+1 && ends[2] > ends[1]+1 {
		return ends[3]
	}
	if n < 2 || ends[0] == a+1 {
		return -1
	}
	if n > 2 && ends[2] > ends[1]+1 {
		return -1 // a fourth part: not a JWS
	}
	if ends[1] == ends[0]+1 {
		return ends[0] + 1 // unsigned: header.payload.
	}
	return ends[1]
}

// nextDigitOrUpper is the offset of the first digit or upper-case letter
// at or after i (len(s) when none), remembered so that the anchors of one
// long run (sk-sk-sk-…) read it once, not once each.
func (d *det) nextDigitOrUpper(i int) int {
	if d.du[1] == 0 || i < d.du[0] || i >= d.du[1] {
		j := i
		for j < len(d.s) && bcls[d.s[j]]&(bDigit|bUpper) == 0 {
			j++
		}
		d.du = [2]int{i, j + 1}
	}
	return d.du[1] - 1
}

// b64run is the end of the run of base64url bytes from i, each run
// measured once: every "eyJ" inside one long run is a JWT candidate, and
// measuring the run again for each made a 1 MiB blob of them take
// seconds. A run reaching the end of the text reads past it (eot) only
// when it is at most max bytes long: a longer one decides its candidate
// whatever follows (no JWT header passes 1 KiB), so a stream holds no
// more than that of a base64 blob (it held the whole blob).
func (d *det) b64run(i, max int) int {
	if i < d.b64[0] || i >= d.b64[1] {
		j := i
		for j < len(d.s) && bcls[d.s[j]]&bB64 != 0 {
			j++
		}
		d.b64 = [2]int{i, j}
	}
	if d.b64[1] == len(d.s) && d.b64[1]-i <= max {
		d.eot = true
	}
	return d.b64[1]
}

// pem matches a PEM private key block from its BEGIN line to its END line;
// unterminated within pemMax bytes, to pemMax (or the end of the text).
// The armour is read as a reader would: four to eight dashes, spaces
// inside them, any case ("----- begin rsa private key -----"), and the
// label ending PRIVATE KEY (RSA, EC, OPENSSH, ENCRYPTED…) or PRIVATE KEY
// BLOCK (OpenPGP, RFC 4880 §6.2). i is the first dash.
func (d *det) pem(i int) int {
	if d.prev(i) == '-' {
		return -1 // the first dash tried it
	}
	k, ok := d.armour(i, "begin")
	if !ok {
		return -1
	}
	lim := i + pemMax
	// the END line: its first dash, from the BEGIN line's end (but not
	// again over a stretch known to hold none: a text of many BEGIN lines
	// is read once, not once per line)
	e, to := k, min(len(d.s), lim)
	if d.noEnd[0] <= e && e < d.noEnd[1] {
		e = d.noEnd[1]
	}
	found := false
	for e < to {
		x := strings.Index(d.s[e:to], "----")
		if x < 0 {
			break
		}
		e += x
		for e > k && d.s[e-1] == '-' {
			e--
		}
		m, ok := d.armour(e, "end")
		if ok && m <= lim {
			return m
		}
		found = found || ok
		for e < to && d.s[e] == '-' {
			e++
		}
	}
	if !found {
		d.noEnd = [2]int{k, to}
	}
	if lim > len(d.s) {
		d.at(len(d.s)) // unterminated: more text may end it
		return len(d.s)
	}
	return lim
}

// armour reads a PEM armour line's "-----BEGIN <label>-----" (word:
// "begin" or "end") from its first dash at i and returns its end. Four
// to 32 dashes; spaces, tabs and line breaks anywhere between the
// dashes and the words ("-----BEGIN  PRIVATE\tKEY-----", "BEGIN
// PRIVATE\nKEY": second attack pass A3), at most armourSpace bytes of
// them in a row.
func (d *det) armour(i int, word string) (int, bool) {
	j := i
	for d.at(j) == '-' && j-i < 32 {
		j++
	}
	if j-i < 4 {
		return 0, false
	}
	j = d.armourSpace(j)
	for k := 0; k < len(word); k++ {
		if d.at(j+k)|0x20 != word[k] {
			return 0, false
		}
	}
	j += len(word)
	// the label: its letters and digits, whatever separates its words
	// (whitespace, '_', a single '-', or nothing: a zero-width space
	// between them is dropped from the view; third attack pass B7)
	var label [64]byte
	n := 0
	for l0 := j; n < len(label) && j-l0 < 128; {
		if k := d.armourSpace(j); k > j {
			j = k
			continue
		}
		if c := d.at(j); c == '_' || c == '-' && d.at(j+1) != '-' {
			j++
			continue
		}
		if d.cls(j)&(bUpper|bLower|bDigit) == 0 {
			break
		}
		label[n] = d.s[j] | 0x20
		n++
		j++
	}
	l := string(label[:n])
	if !strings.HasSuffix(l, "privatekey") && !strings.HasSuffix(l, "privatekeyblock") {
		return 0, false
	}
	k := j
	for d.at(k) == '-' && k-j < 32 {
		k++
	}
	if k-j < 4 {
		return 0, false
	}
	return k, true
}

// armourSpace is the end of the run of whitespace from j inside an
// armour line (j when none), at most 8 bytes.
func (d *det) armourSpace(j int) int {
	k := j
	for k-j < 8 && isArmourSpace(d.at(k)) {
		k++
	}
	return k
}

func isArmourSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// putty matches a PuTTY private key file (.ppk) from its
// "PuTTY-User-Key-File-" header to the end of its Private-MAC line, or
// to pemMax; i is the dash after PuTTY.
func (d *det) putty(i int) int {
	if i < 5 || !strings.EqualFold(d.s[i-5:i], "putty") || !d.hasPrefixFold(i, "-user-key-file-") {
		return -1
	}
	lim := min(len(d.s), i-5+pemMax)
	// a key file has one header: the match ends before the next one, so
	// that repeated headers do not chain overlapping matches into one
	// hold of the whole stream (fourth attack pass C7)
	if k := indexFold(d.s[i:lim], "putty-user-key-file-", "pP"); k >= 0 {
		lim = i + k
	}
	// the MAC line, not searched again over a stretch known to hold
	// none: a text of many headers was searched 16 KiB per header
	// (third attack pass B18: 15 s per MiB)
	from := i
	if d.noMAC[0] <= from && from < d.noMAC[1] {
		from = min(d.noMAC[1], lim)
	}
	x := indexFold(d.s[from:lim], "private-mac:", "pP")
	if x < 0 {
		d.noMAC = [2]int{i, max(i, lim-len("private-mac:")+1)}
	}
	if x >= 0 {
		e := from + x + len("private-mac:")
		for e < lim && d.s[e] != '\n' && d.s[e] != '\r' {
			e++
		}
		if e < len(d.s) || d.final {
			return e
		}
	}
	if lim == len(d.s) {
		d.at(len(d.s))
	}
	return lim
}

// email matches local@domain around the '@' at at: the local part is the
// run of its bytes before the '@' (its last 64 at most, leading dots
// dropped); the domain two or more labels, the last one letters.
func (d *det) email(at int) (int, int) {
	k := localStart(d.s, at)
	for k < at && d.s[k] == '.' {
		k++
	}
	if k == at {
		return k, -1
	}
	j := at + 1
	for j-at <= 255 {
		if c := d.at(j); c < utf8.RuneSelf {
			if bcls[c]&bDom == 0 {
				break
			}
			j++
			continue
		}
		// an internationalised domain's letter (RFC 6531: exämple.com)
		r, sz := utf8.DecodeRuneInString(d.s[j:])
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			break
		}
		j += sz
	}
	if j-at > 255 {
		return k, -1
	}
	for j > at+1 && (d.s[j-1] == '.' || d.s[j-1] == '-') {
		j--
	}
	dom := d.s[at+1 : j]
	if len(dom) < 4 || j-k > emailMax {
		return k, -1
	}
	labels := 0
	for len(dom) > 0 {
		l := dom
		if x := strings.IndexByte(dom, '.'); x >= 0 {
			l, dom = dom[:x], dom[x+1:]
		} else {
			dom = ""
		}
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return k, -1
		}
		labels++
		if dom == "" && !tld(l) {
			return k, -1
		}
	}
	if labels < 2 {
		return k, -1
	}
	return k, j
}

// tld reports a top-level label: two or more letters (of any script:
// .рф), or an IDN's ASCII form (xn--p1ai).
func tld(l string) bool {
	if len(l) < 2 {
		return false
	}
	if len(l) > 4 && strings.EqualFold(l[:4], "xn--") {
		return true // the rest is [A-Za-z0-9-] already
	}
	for _, r := range l {
		if !unicode.IsLetter(r) {
			return false
		}
	}
	return true
}

// localStart is where the email local part that ends at s[at] (its '@')
// begins: at most emailLocalMax bytes back over [A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]
// and the letters and digits of any script (RFC 6531: jäne@, josé.garcía@;
// a local part cut at its first non-ASCII letter left the rest in clear).
func localStart(s string, at int) int {
	k := at
	for k > 0 && at-k < emailLocalMax {
		if c := s[k-1]; c < utf8.RuneSelf {
			if bcls[c]&bLocal == 0 {
				break
			}
			k--
			continue
		}
		r, sz := utf8.DecodeLastRuneInString(s[:k])
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) || at-(k-sz) > emailLocalMax {
			break
		}
		k -= sz
	}
	return k
}

// number: a digit at i that begins a number (the byte before is no
// letter, digit or '_'): cards, phones, IPv4.
func (d *det) number(i int) {
	p := d.prev(i)
	// a group after another (1.2.3.4.5, 12 4111…): no phone or address
	// starts inside a longer number, but a card may (cvv 737 4111…, exp
	// 12/28 4111…, a list of cards), and the card tried from the group
	// before may not be the reader's (555-123-4567 4111… holds a
	// Luhn-valid 14 digits): every group start is tried, the overlapping
	// matches redacted as one
	inRun := cardSep(p) && i >= 2 && bcls[d.s[i-2]]&bDigit != 0
	// One group of fewer than 13 digits not followed by separators and a
	// digit (most numbers of prose: 2024, 42 units, 12%) is neither a
	// card (13 digits or more), a phone (two groups or more, from here)
	// nor an IPv4 address (a dot and a digit after the group): nothing to
	// try. A group at the end of a text still to come is tried (and so
	// held).
	k := i + 1
	for k < len(d.s) && k-i < 13 && bcls[d.s[k]]&bDigit != 0 {
		k++
	}
	j := k
	for j < len(d.s) && j-k < 4 && cardSep(d.s[j]) {
		j++
	}
	if k-i < 13 && (j < len(d.s) || d.final) && (j == k || bcls[d.at(j)]&bDigit == 0) {
		return
	}
	// The digits from here, over groups joined by what may join a card's
	// (a superset of a phone's and an address's separators): a card needs
	// 13, a national phone 9, an address a dot (1,234.56 and 2024-03-01
	// are none). A run reaching the end of a text still to come is
	// tried, and so held.
	digits, dot, end := 0, false, false
	for x := i; ; {
		for x < len(d.s) && bcls[d.s[x]]&bDigit != 0 && digits < 20 {
			digits++
			x++
		}
		y := x
		for y < len(d.s) && y-x < 4 && cardSep(d.s[y]) {
			dot = dot || d.s[y] == '.'
			y++
		}
		if y == len(d.s) || x == len(d.s) {
			end = !d.final
			break
		}
		if y == x || bcls[d.s[y]]&bDigit == 0 || digits >= 20 {
			break
		}
		x = y
	}
	if d.want[kCard] && (digits >= 13 || end) {
		d.try(i, kCard, d.card)
	}
	if inRun {
		return
	}
	if d.want[kPhone] && p != '+' && p != '(' && (digits >= 9 || end) {
		d.try(i, kPhone, d.phone)
	}
	if d.want[kIPv4] && p != '.' && (dot || end) {
		d.try(i, kIPv4, d.ipv4)
	}
}

// card matches 13 to 19 digits from i, in groups (see the separators
// below), Luhn-valid with an issuer's prefix, not followed by a digit (a
// letter or '_' after it is a boundary: 4111…1111abc is a card), the
// longest such. The caller starts it where no digit is before i.
func (d *det) card(i int) int {
	var dg [19]byte
	n := 0
	best := -1
	j := i
	for {
		for d.cls(j)&bDigit != 0 {
			if n == 19 {
				return best
			}
			dg[n] = d.s[j]
			n++
			j++
		}
		if n >= 13 && d.cls(j)&bDigit == 0 && issuer(dg[:n]) && luhn(dg[:n]) {
			best = j
		}
		// Between groups: one to four separators (see cardSep:
		// "4111.1111.1111.1111", "4111 -- 1111", "4111_1111",
		// "(4111) (1111)", "4111    1111\t1111" are cards to a reader
		// too). Not a line break: a column of numbers is not a card.
		if cardSep(d.at(j)) {
			k := j + 1
			for k < j+4 && cardSep(d.at(k)) {
				k++
			}
			if d.cls(k)&bDigit != 0 {
				j = k
				continue
			}
		}
		return best
	}
}

// cardSep reports a byte that may separate a card number's groups: a
// space, a tab, '-', '.', '/', '_', '\\', '+', ':', '*', '~', a quote, a
// backtick, a bracket or a parenthesis. Not ',' or '|', which separate
// the numbers of a list or a table (where four of them would make a
// Luhn-valid run one time in ten), and not a line break.
func cardSep(c byte) bool {
	return cardSeps[c]
}

var cardSeps = func() (t [256]bool) {
	for _, c := range " \t-./_\\+:*~'\"`()[]" {
		t[c] = true
	}
	return
}()

// issuer reports a card issuer's prefix with one of its lengths (the
// networks' IIN ranges, as ISO/IEC 7812 registers them): Visa 4 (13, 16
// or 19 digits); Mastercard 51–55 and 2221–2720 (16); Amex 34, 37 (15);
// Diners 300–305, 309, 36, 38, 39 (14–19); JCB 3528–3589 (16–19);
// Discover 6011, 644–649, 65, UnionPay 62 and Maestro 50, 56–69 (13–19);
// Mir 2200–2204 (16, 19); RuPay 60, 65, 81, 82 (16); Troy 9792 and Humo
// 9860 (16). Left out: Maestro's 12-digit cards (the rule's cards are 13
// to 19 digits, and twelve digits are too many other numbers) and UATP
// (15 digits from 1: order numbers, timestamps and IMEIs are too).
// A Luhn-valid run of the wrong length (18 digits from 37, 14 from 55) is
// no card.
func issuer(dg []byte) bool {
	n := len(dg)
	p4 := int(dg[0]-'0')*1000 + int(dg[1]-'0')*100 + int(dg[2]-'0')*10 + int(dg[3]-'0')
	p2, p3 := p4/100, p4/10
	switch dg[0] {
	case '4':
		return n == 13 || n == 16 || n == 19
	case '5':
		if p2 >= 51 && p2 <= 55 {
			return n == 16
		}
		return true // Maestro 50, 56–59
	case '6':
		return true
	case '2':
		if p4 >= 2200 && p4 <= 2204 {
			// Mir: 16 or 19 digits (an 18-digit Chinese resident ID of
			// Jilin starts 2201)
			return n == 16 || n == 19
		}
		return p4 >= 2221 && p4 <= 2720 && n == 16
	case '8':
		return (p2 == 81 || p2 == 82) && n == 16 // RuPay
	case '9':
		return (p4 == 9792 || p4 == 9860) && n == 16 // Troy, Humo
	case '3':
		switch {
		case p2 == 34 || p2 == 37:
			return n == 15
		case p2 == 36 || p2 == 38 || p2 == 39 || p3 >= 300 && p3 <= 305 || p3 == 309:
			return n >= 14 // Diners Club International, 14 digits and more
		case p4 >= 3528 && p4 <= 3589:
			return n >= 16
		}
	}
	return false
}

func luhn(dg []byte) bool {
	sum := 0
	dbl := false
	for k := len(dg) - 1; k >= 0; k-- {
		v := int(dg[k] - '0')
		if dbl {
			v *= 2
			if v > 9 {
				v -= 9
			}
		}
		sum += v
		dbl = !dbl
	}
	return sum%10 == 0
}

// phone matches a telephone number at i. What counts:
//   - international: '+', a country code not starting with 0, 8 to 15
//     digits in all, in groups separated by single spaces, dashes or dots,
//     an optional (area) group: +44 20 7946 0958, +1 (555) 123-4567,
//     +33612345678;
//   - national, 9 to 12 digits in two or more groups with one kind of
//     separator, and either a parenthesised area code ((555) 123-4567), or
//     a leading trunk 0 (020 7946 0958, 06 12 34 56 78, 030-1234567), or
//     the North American 3-3-4 (555-123-4567, 555.123.4567, 555 123 4567).
//
// Never a plain number without separators (12345678901), a date
// (2024-01-15), a version (1.2.3) or an IPv4 address: too few digits, or
// not one of these shapes. The byte after it is no letter, digit or '_'.
func (d *det) phone(i int) int {
	j := i
	plus := d.at(j) == '+'
	if plus {
		j++
		if c := d.at(j); c < '1' || c > '9' {
			if c != '(' {
				return -1
			}
		}
	}
	var lens [16]int
	groups, digits := 0, 0
	paren := false
	var sep byte
	mixed := false
	parenGroup := func() bool {
		k := j + 1
		for d.cls(k)&bDigit != 0 && k-j <= 5 {
			k++
		}
		if k == j+1 || k-j > 5 || d.at(k) != ')' {
			return false
		}
		paren = true
		if groups < len(lens) {
			lens[groups] = k - j - 1
		}
		groups++
		digits += k - j - 1
		j = k + 1
		if c := d.at(j); (c == ' ' || c == '-') && d.cls(j+1)&bDigit != 0 {
			j++
		} else if d.cls(j)&bDigit == 0 {
			return false
		}
		return true
	}
	if d.at(j) == '(' && !parenGroup() {
		return -1
	}
	for {
		k := j
		for d.cls(k)&bDigit != 0 {
			k++
			if digits+k-j > 15 {
				return -1
			}
		}
		if k == j {
			return -1
		}
		if groups < len(lens) {
			lens[groups] = k - j
		}
		groups++
		digits += k - j
		j = k
		if c := d.at(j); plus && !paren && groups == 1 && c == ' ' && d.at(j+1) == '(' {
			j++
			if !parenGroup() {
				return -1
			}
			continue
		}
		if c := d.at(j); (c == ' ' || c == '-' || c == '.') && d.cls(j+1)&bDigit != 0 {
			if sep == 0 {
				sep = c
			} else if c != sep {
				mixed = true
			}
			j++
			continue
		}
		break
	}
	if d.cls(j)&bWord != 0 || groups > len(lens) {
		return -1
	}
	if plus {
		if digits < 8 {
			return -1
		}
		return j
	}
	if digits < 9 || digits > 12 || groups < 2 || mixed {
		return -1
	}
	switch {
	case paren && sep != '.':
	case d.s[i] == '0' && sep != '.':
	case groups == 3 && lens[0] == 3 && lens[1] == 3 && lens[2] == 4:
	default:
		return -1
	}
	return j
}

// ipv4 matches a dotted quad at i (octets 0–255, no leading zeros), not
// part of a longer dotted number.
func (d *det) ipv4(i int) int {
	j := i
	for part := 0; part < 4; part++ {
		if part > 0 {
			if d.at(j) != '.' {
				return -1
			}
			j++
		}
		k := j
		v := 0
		for d.cls(k)&bDigit != 0 {
			v = v*10 + int(d.s[k]-'0')
			k++
			if k-j > 3 {
				return -1
			}
		}
		if k == j || v > 255 || (k-j > 1 && d.s[j] == '0') {
			return -1
		}
		j = k
	}
	if d.cls(j)&bWord != 0 || (d.at(j) == '.' && d.cls(j+1)&bDigit != 0) {
		return -1
	}
	return j
}

// ipv6 examines the run of hex digits, ':' and '.' around the ':' at i
// (net/netip validates it: full, compressed, with an embedded IPv4) and
// returns the end of the run.
func (d *det) ipv6(i int) int {
	isV6 := func(c byte) bool { return bcls[c]&bHex != 0 || c == ':' || c == '.' }
	k := i
	for k > 0 && i-k <= v6Max && isV6(d.s[k-1]) {
		k--
	}
	d.eot = false
	e := i
	for e-k <= v6Max && isV6(d.at(e)) {
		e++
	}
	after := d.cls(e)
	if d.eot && !d.final {
		if k < d.hold {
			d.hold = k
		}
		return e
	}
	if e-k > v6Max || (k > 0 && (isV6(d.s[k-1]) || bcls[d.s[k-1]]&bWord != 0)) || after&bWord != 0 {
		return e
	}
	end := e
	for end > k && d.s[end-1] == '.' {
		end--
	}
	a := d.s[k:end]
	if strings.Count(a, ":") < 2 || strings.IndexAny(a, "0123456789") < 0 {
		return e // no address without a digit: a::b, std::map
	}
	if ip, err := netip.ParseAddr(a); err == nil && ip.Is6() {
		d.out = append(d.out, rawMatch{k, end, kIPv6})
	}
	return e
}

// iban matches an IBAN at i: a country code, two check digits and the
// country's length of letters and digits, in either case, one or two
// spaces, dashes, dots or tabs allowed between groups, mod-97 valid.
func (d *det) iban(i int) int {
	if d.cls(i+2)&bDigit == 0 || d.cls(i+3)&bDigit == 0 {
		return -1
	}
	cc := [2]byte{d.s[i] &^ 0x20, d.s[i+1] &^ 0x20} // upper case
	l := ibanLen[string(cc[:])]
	if l == 0 {
		return -1
	}
	const alnum = bUpper | bLower | bDigit
	var buf [34]byte
	n := 0
	j := i
	for n < l {
		c := d.at(j)
		if bcls[c]&alnum != 0 {
			if bcls[c]&bLower != 0 {
				c -= 'a' - 'A'
			}
			buf[n] = c
			n++
			j++
			continue
		}
		// between groups: one or two spaces, dashes, dots or tabs
		// (DE89-3704-…, "DE89  3704", a tab-separated form)
		if ibanSep(c) && n >= 4 {
			k := j + 1
			if ibanSep(d.at(k)) {
				k++
			}
			if d.cls(k)&alnum != 0 {
				j = k
				continue
			}
		}
		return -1
	}
	if d.cls(j)&bWord != 0 {
		return -1
	}
	// mod-97 of the BBAN followed by the country code and check digits,
	// letters as 10–35.
	r := 0
	for k := 0; k < l; k++ {
		c := buf[(k+4)%l]
		if c >= 'A' {
			v := int(c-'A') + 10
			r = (r*100 + v) % 97
		} else {
			r = (r*10 + int(c-'0')) % 97
		}
	}
	if r != 1 {
		return -1
	}
	return j
}

// ibanSep reports a byte that may separate an IBAN's groups.
func ibanSep(c byte) bool { return c == ' ' || c == '-' || c == '.' || c == '\t' }

// ibanStart reports whether an IBAN may begin at i, two letters before a
// digit: after no word byte, or glued to the word IBAN (IBANDE89…).
func (d *det) ibanStart(i int) bool {
	if i < 0 || bcls[d.s[i]]&(bUpper|bLower) == 0 || bcls[d.s[i+1]]&(bUpper|bLower) == 0 {
		return false
	}
	if bcls[d.prev(i)]&bWord == 0 {
		return true
	}
	return i >= 4 && strings.EqualFold(d.s[i-4:i], "iban") && bcls[d.prev(i-4)]&bWord == 0
}

// ibanLen is each IBAN country's length (SWIFT's registry).
var ibanLen = map[string]int{
	"AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27,
	"BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28,
	"EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
	"GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27,
	"JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25,
	"MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18,
	"NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33,
	"SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
	"TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}
