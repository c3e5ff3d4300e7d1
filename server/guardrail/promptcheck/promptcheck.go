package promptcheck

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/guardrail"
	"github.com/flexway/flexway/server/guardrail/jsonschema"
	"github.com/flexway/flexway/server/guardrail/webhook"
	"github.com/flexway/flexway/server/jsonstring"
	"github.com/flexway/flexway/server/toolcalls"
)

// Checker runs the prompt phase. The zero Checker is ready to use; it is
// safe for concurrent use.
type Checker struct {
	// Logger receives a warning when a webhook rule's exchange fails (the
	// rule's policy, its URL without user info or query, and the error:
	// never a text); nil discards.
	Logger *slog.Logger
}

// Check runs the prompt guardrails of st.Policies over req, a
// *flexwayv1.CreateChatCompletionRequest or *flexwayv1.CreateEmbeddingRequest
// (any other message passes), as the package doc says: it rewrites req
// in place where a rule redacts or a webhook replaces, records the
// verdicts in st, and returns the refusal, a *faults.Error with reason
// guardrail_violation, when a rule refuses the prompt (req may then be
// partly rewritten: it must not be sent), or invalid_request (param
// messages[i].tool_calls) for a message's tool_calls that are not JSON,
// which the HTTP front never passes but a gRPC caller may send. A call whose policies have no
// prompt rule returns nil at once, without allocating. ctx bounds the
// webhooks' exchanges (each also by its own timeout).
func (k Checker) Check(ctx context.Context, st *call.State, req any) error {
	if st == nil || !st.Policies.Guarded(guardrail.Prompt) {
		return nil
	}
	var c checking
	switch r := req.(type) {
	case *flexwayv1.CreateChatCompletionRequest:
		if err := c.chat(r); err != nil {
			return err
		}
		c.tools = json.RawMessage(r.GetExtraFields()["tools"])
	case *flexwayv1.CreateEmbeddingRequest:
		c.embeddings(r)
	default:
		return nil
	}
	c.st, c.log = st, k.Logger
	err := c.run(ctx)
	for _, v := range c.verdicts {
		if err != nil && v.Action == guardrail.Redact.String() {
			continue // nothing was redacted: nothing is sent
		}
		st.AddGuardrail(v)
	}
	if err != nil {
		return err
	}
	c.write(req)
	return nil
}

// kind is where a text is in its request.
type kind uint8

const (
	content kind = iota // messages[i].content, a string
	part                // messages[i].content[j].text
	name                // messages[i].name
	extra               // a string inside a field Flexway does not model (refusal, reasoning_content, function_call, audio, tools, metadata, …)
	input               // input, one string
	inputs              // input[j]
)

// text is one text of the request and where it goes back.
type text struct {
	kind kind
	role string
	// msg is the message's index (inputs: the input's); idx the part's
	// or the tool call's.
	msg, idx int
	text     string
	changed  bool
	// fields, key and val are an extra text's map of raw JSON fields
	// (a part's, a message's, the request's), its key there and the
	// string's span in that field's value.
	fields map[string]string
	key    string
	prefix string // the location of the map's owner: "messages[1].content[0]", "" for the request
	val    jsonstring.Value
}

// location is the text's location in the caller's request.
func (t *text) location() string {
	m := "messages[" + strconv.Itoa(t.msg) + "]"
	switch t.kind {
	case content:
		return m + ".content"
	case part:
		return m + ".content[" + strconv.Itoa(t.idx) + "].text"
	case name:
		return m + ".name"
	case extra:
		if t.prefix == "" {
			return t.key + t.val.Path
		}
		return t.prefix + "." + t.key + t.val.Path
	case input:
		return "input"
	default:
		return "input[" + strconv.Itoa(t.msg) + "]"
	}
}

// checking is one call's prompt phase.
type checking struct {
	st       *call.State
	log      *slog.Logger
	texts    []text
	tools    json.RawMessage
	chatCall bool
	lastUser int // the last user message's index; -1: none
	verdicts []call.GuardrailVerdict
	ms       []guardrail.Match // across's matches, reused
	// pending are the redactions of the parts of messages with two parts
	// or more, applied with the matches across the parts (acrossParts):
	// a match of a part and one across the parts redact their union
	pending []textCut
}

// textCut is a redaction of c.texts[t]'s bytes [s, e), by with.
type textCut struct {
	t, s, e int
	with    string
}

// chat collects the texts of a chat request; its error refuses tool_calls
// that are not JSON (a gRPC caller's mistake: the HTTP front checks it).
func (c *checking) chat(r *flexwayv1.CreateChatCompletionRequest) error {
	c.chatCall, c.lastUser = true, -1
	for i, m := range r.GetMessages() {
		role := m.GetRole()
		if role == "user" {
			c.lastUser = i
		}
		switch ct := m.GetContent().(type) {
		case *flexwayv1.ChatMessage_Text:
			c.texts = append(c.texts, text{kind: content, role: role, msg: i, text: ct.Text})
		case *flexwayv1.ChatMessage_Parts:
			for j, p := range ct.Parts.GetParts() {
				if p.Text != nil {
					c.texts = append(c.texts, text{kind: part, role: role, msg: i, idx: j, text: p.GetText()})
				}
				c.extras(role, i, "messages["+strconv.Itoa(i)+"].content["+strconv.Itoa(j)+"]", p.GetExtraFields())
			}
		}
		extra := m.GetExtraFields()
		if m.Name != nil {
			c.texts = append(c.texts, text{kind: name, role: role, msg: i, text: m.GetName()})
		}
		if raw, ok := extra["tool_calls"]; ok {
			// Read as OpenAI's API reads it, or refused: a shape it does
			// not have is one a translation or a lenient upstream may
			// read another way. Its strings (arguments, ids, names,
			// anything else) are then checked with the message's others.
			if _, err := toolcalls.Parse(raw, nil); err != nil {
				fe := faults.New(faults.InvalidRequest, "messages[%d].%s", i, err.Error())
				fe.Param = "messages[" + strconv.Itoa(i) + "].tool_calls"
				return fe
			}
		}
		c.extras(role, i, "messages["+strconv.Itoa(i)+"]", extra)
	}
	c.extras("", -1, "", r.GetExtraFields())
	return nil
}

// extras collects every string inside the raw JSON fields of a part, a
// message or the request (fields; a message's tool_calls too, its
// arguments located as messages[i].tool_calls[j].function.arguments):
// whatever the upstream gets is checked, whether Flexway models it or not
// (refusal, reasoning_content, a legacy function_call, audio, tools'
// descriptions, metadata, user, stop, prediction, an unknown field).
// The strings are checked decoded, \u escapes inside them too: a field
// may hold JSON in a string (function_call.arguments). A field's value
// that is not JSON (a gRPC caller's) is checked as text.
func (c *checking) extras(role string, msg int, prefix string, fields map[string]string) {
	if len(fields) == 0 {
		return
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		raw := fields[k]
		if raw == "null" || raw == "true" || raw == "false" {
			continue // nothing a rule reads (a number may be a card)
		}
		vs, err := jsonstring.Values(raw)
		if err != nil {
			vs = []jsonstring.Value{{Start: 0, End: len(raw), Text: raw, Path: ""}}
		}
		for _, v := range vs {
			c.texts = append(c.texts, text{kind: extra, role: role, msg: msg, text: jsonstring.Unescape(v.Text), fields: fields, key: k, prefix: prefix, val: v})
		}
	}
}

// embeddings collects the input strings of an embeddings request.
func (c *checking) embeddings(r *flexwayv1.CreateEmbeddingRequest) {
	defer c.extras("", -1, "", r.GetExtraFields())
	switch in := r.GetInput().GetInput().(type) {
	case *flexwayv1.EmbeddingInput_Text:
		c.texts = append(c.texts, text{kind: input, text: in.Text})
	case *flexwayv1.EmbeddingInput_Texts:
		for j, s := range in.Texts.GetValues() {
			c.texts = append(c.texts, text{kind: inputs, msg: j, text: s})
		}
	}
}

// note records a verdict once.
func (c *checking) note(policy, rule, action string) {
	v := call.GuardrailVerdict{Policy: policy, Rule: rule, Phase: guardrail.Prompt.String(), Action: action}
	for _, have := range c.verdicts {
		if have == v {
			return
		}
	}
	c.verdicts = append(c.verdicts, v)
}

// enforce records the verdict of a match of r and reports whether r acts
// on it (a shadow policy's rule only reports).
func (c *checking) enforce(r *guardrail.Rule) bool {
	c.note(r.Policy, r.Type, verdictAction(r.Action, r.Shadow))
	return !r.Shadow
}

// verdictAction is the verdict's action for a rule's action: the action
// itself, or would_<action> for a shadow policy's deny and redact.
func verdictAction(a guardrail.Action, shadow bool) string {
	if shadow && a != guardrail.Log {
		return "would_" + a.String()
	}
	return a.String()
}

// refuse is the refusal by policy's rule of type rule; detail, when set,
// says why without quoting a text.
func refuse(policy, rule, detail string) *faults.Error {
	if detail != "" {
		return faults.New(faults.GuardrailViolation, "policy %.64q refuses the prompt: guardrail %s: %s", policy, rule, detail)
	}
	return faults.New(faults.GuardrailViolation, "policy %.64q refuses the prompt: guardrail %s", policy, rule)
}

// run applies the text rules, then the whole rules.
func (c *checking) run(ctx context.Context) error {
	if err := c.scan(c.st.Policies.Scanner(guardrail.Prompt)); err != nil {
		return err
	}
	for _, w := range c.st.Policies.WholeRules(guardrail.Prompt) {
		var err error
		switch w.Type {
		case config.GuardrailJSONSchema:
			err = c.schema(w.Policy, w.Schema, w.Action, w.Shadow)
		case config.GuardrailWebhook:
			err = c.webhook(ctx, w.Policy, w.Webhook, w.Action, w.Shadow)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// scan applies the text rules of sc to every text: the first enforced
// deny match refuses (after every text is scanned, so that every rule
// that matched is recorded); redactions are applied otherwise.
func (c *checking) scan(sc *guardrail.Scanner) error {
	if sc == nil {
		return nil
	}
	var deny *guardrail.Rule
	var ms []guardrail.Match
	// the parts of a message with two or more are redacted with the
	// matches across them, the union of both (acrossParts): redacted
	// first, a part's match hid a larger one across the parts (the tail
	// of an IBAN split over two parts is a phone alone: second attack
	// pass A9), and redacted after, a match across the parts cut one of a
	// part (an email from a card's last group and "@example.com" in the
	// next part: third attack pass B8)
	parted := c.partedMessages()
	for i := range c.texts {
		t := &c.texts[i]
		ms = sc.Find(t.text, ms[:0])
		redact := false
		for _, m := range ms {
			r := m.Rule
			if !c.enforce(r) {
				continue
			}
			switch r.Action {
			case guardrail.Deny:
				if deny == nil {
					deny = r
				}
			case guardrail.Redact:
				redact = true
			}
		}
		if redact && deny == nil {
			if t.kind == part && parted[t.msg] {
				for _, m := range ms {
					if m.Rule.Action == guardrail.Redact && !m.Rule.Shadow {
						c.pending = append(c.pending, textCut{i, m.Start, m.End, "[REDACTED:" + m.Entity + "]"})
					}
				}
				continue
			}
			t.text, t.changed = guardrail.Redacted(t.text, ms), true
		}
	}
	if deny == nil {
		deny = c.acrossParts(sc)
	}
	if deny == nil {
		deny = c.acrossMessages(sc)
	}
	if deny != nil {
		return refuse(deny.Policy, deny.Type, "")
	}
	return nil
}

// partedMessages reports, by message index, the messages with two text
// parts or more.
func (c *checking) partedMessages() map[int]bool {
	var parted map[int]bool
	for i := 1; i < len(c.texts); i++ {
		if c.texts[i].kind == part && c.texts[i-1].kind == part && c.texts[i].msg == c.texts[i-1].msg {
			if parted == nil {
				parted = map[int]bool{}
			}
			parted[c.texts[i].msg] = true
		}
	}
	return parted
}

// acrossParts checks the text parts of each message joined, as the
// upstreams that join them (Anthropic's and Gemini's translations) and
// the model read them: a match that spans two parts ("4111 1111 " and
// "1111 1111") is one. It returns the first denying rule, nil when none.
func (c *checking) acrossParts(sc *guardrail.Scanner) *guardrail.Rule {
	for i := 0; i < len(c.texts); {
		j := i
		for j < len(c.texts) && c.texts[j].kind == part && c.texts[j].msg == c.texts[i].msg {
			j++
		}
		if j-i < 2 {
			i = max(j, i+1)
			continue
		}
		// joined as the Anthropic and Gemini translations join them (no
		// separator: "4111 1111 " | "1111 1111" is one card), and as
		// chat templates render them (a line break: "ignore all" |
		// "previous instructions" is one phrase)
		for _, sep := range []string{"", "\n"} {
			var b strings.Builder
			pieces := make([]piece, 0, j-i)
			for k := i; k < j; k++ {
				if k > i {
					b.WriteString(sep)
				}
				pieces = append(pieces, piece{t: k, from: 0, to: len(c.texts[k].text), at: b.Len()})
				b.WriteString(c.texts[k].text)
			}
			// the parts' own redactions go with the first join's
			var own []textCut
			if sep == "" {
				for _, x := range c.pending {
					if x.t >= i && x.t < j {
						own = append(own, x)
					}
				}
			}
			if r := c.across(sc, b.String(), pieces, false, false, 0, -1, own); r != nil {
				return r
			}
		}
		i = j
	}
	return nil
}

// window is how far into each of two adjacent messages acrossMessages
// reads, in characters as the rules count them (guardrail.TailStart: a
// run of whitespace once, ignorable characters and combining marks not
// at all, so padding cannot push a phrase out of it): more than the
// longest injection phrase (under 100). Only a match that a line break
// does not end can cross the boundary (a phrase, an operator's regex); a
// longer one split across two messages is not seen there. Each boundary
// costs a scan of about 2×128 bytes of ordinary text.
const window = 128

// walkBytes bounds, in bytes, how far acrossMessages reads each way from
// a boundary, whatever the characters count: a phrase split across two
// messages and padded with more than 1 KiB of what the rules do not
// count, or read as one space, is not seen there (one message's own text
// is read whole). Each boundary costs a scan of at most 2 KiB: 10,000
// short messages of ten combining marks and a letter take about 2 s
// (12 s with 4 KiB and marks weighed through NFKD: fourth attack pass
// C5).
const walkBytes = 1 << 10

// acrossMessages checks each boundary between two adjacent messages with
// text (content, or text parts): the last window characters of the first and
// the first window characters of the second, joined by a line break, as the
// model reads one after the other. A phrase split across them ("please
// ignore all" | "previous instructions") is one; a card is not (a line
// break ends its groups). It runs after acrossParts and the texts' own
// checks. It returns the first
// denying rule, nil when none.
func (c *checking) acrossMessages(sc *guardrail.Scanner) *guardrail.Rule {
	// units[k]: the indices in c.texts of one message's texts, in order
	units := make([][]int, 0, 8)
	for i := range c.texts {
		t := &c.texts[i]
		if t.kind != content && t.kind != part || t.text == "" {
			continue
		}
		if guardrail.Blank(t.text) {
			// nothing but what the rules do not count (zero-width
			// characters, marks) or read as a space: no phrase ends in
			// it; walked over at every boundary, 4,000 such messages took
			// 10 s (third attack pass B11), and 126 messages of one space
			// each pushed a phrase out of the window, where the rules
			// read the run of them as one space (fourth attack pass C2).
			// The window joins over it.
			continue
		}
		if n := len(units); n > 0 && c.texts[units[n-1][0]].msg == t.msg {
			units[n-1] = append(units[n-1], i)
		} else {
			units = append(units, []int{i})
		}
	}
	// each text's blank edges, measured once: a message is visited by
	// up to 2×window boundaries, and its blank run was rescanned by each
	// (fifth attack pass D5: 130 messages of a letter and 15,000 marks
	// took 5.7 s)
	edges := blankEdges{ends: make(map[textID]int), starts: make(map[textID]int)}
	pieces := make([]piece, 0, 8)
	b := make([]byte, 0, 2*window+1)
	type span struct{ v, i, from, to int }
	var tail []span
	for u := 1; u < len(units); u++ {
		pieces, b, tail = pieces[:0], b[:0], tail[:0]
		// the tail: back from the last text of unit u-1, and on into the
		// units before while the window is not full (three short
		// messages "please ignore all" | "previous" | "instructions")
		need, cutStart, budget := window, false, walkBytes
	back:
		for v := u - 1; v >= 0; v-- {
			for k := len(units[v]) - 1; k >= 0; k-- {
				i := units[v][k]
				// the blank run ending a text reads as the line break
				// joining it to the next: left out of the window, it
				// spends none of the budget (fourth attack pass C3:
				// 5,000 spaces after "ignore all" pushed the phrase out)
				// and the blank run starting it too (sixth attack pass
				// E1: 1 KiB of spaces before a part's first word)
				text := c.texts[i].text
				text = text[:edges.end(i, text)]
				lead := edges.start(i, text)
				from := lead + runeStart(text[lead:], max(0, len(text)-lead-budget))
				st, got := guardrail.TailStart(text[from:], need)
				st += from
				need -= got
				budget -= len(text) - st
				tail = append(tail, span{v, i, st, len(text)})
				if st > lead || need == 0 || budget <= 0 {
					cutStart = st > lead || k > 0 || v > 0
					break back
				}
			}
		}
		lo := -1 // the first piece of unit u-1
		for k := len(tail) - 1; k >= 0; k-- {
			sp := tail[k]
			if k < len(tail)-1 {
				// a line break between messages, and between one's text
				// parts too, as chat templates render them ("ignore all"
				// then parts "previous", "instructions" passed glued)
				b = append(b, '\n')
			}
			if sp.v == u-1 && lo < 0 {
				lo = len(pieces)
			}
			pieces = append(pieces, piece{t: sp.i, from: sp.from, to: sp.to, at: len(b)})
			b = append(b, c.texts[sp.i].text[sp.from:sp.to]...)
		}
		b = append(b, '\n')
		hi := len(pieces) // the first piece of unit u
		// the head: unit u, and on into the units after while the window
		// is not full
		need, cutEnd, budget := window, false, walkBytes
	fwd:
		for v := u; v < len(units); v++ {
			if v > u {
				b = append(b, '\n')
			}
			for k, i := range units[v] {
				if k > 0 {
					b = append(b, '\n')
				}
				// blank runs at both edges left out, as the tail's (fifth
				// attack pass D1: a middle message ending in 1 KiB of
				// spaces spent the head's budget before the next one)
				text := c.texts[i].text
				text = text[:edges.end(i, text)]
				lead := edges.start(i, text)
				whole := len(text)
				text = text[:lead+runeStart(text[lead:], min(len(text)-lead, budget))]
				end, got := guardrail.HeadEnd(text[lead:], need)
				end += lead
				need -= got
				budget -= end - lead
				pieces = append(pieces, piece{t: i, from: lead, to: end, at: len(b)})
				b = append(b, text[lead:end]...)
				if end < whole || (need == 0 || budget <= 0) && (k < len(units[v])-1 || v < len(units)-1) {
					cutEnd = true
					break fwd
				}
				if need == 0 || budget <= 0 {
					break fwd
				}
			}
		}
		if r := c.across(sc, string(b), pieces, cutStart, cutEnd, lo, hi, nil); r != nil {
			return r
		}
	}
	return nil
}

// blankEdges remembers where a text's blank end begins and where its
// blank start ends, by the text's bytes (a redaction across a boundary
// makes a new string, measured again).
type blankEdges struct{ ends, starts map[textID]int }

// textID names a string by its bytes' address and length.
type textID struct {
	p *byte
	n int
}

func idOf(s string) textID { return textID{unsafe.StringData(s), len(s)} }

func (e blankEdges) end(_ int, text string) int { return memo(e.ends, text, guardrail.BlankEnd) }

// start is BlankStart of text (a text up to its blank end).
func (e blankEdges) start(_ int, text string) int {
	return memo(e.starts, text, guardrail.BlankStart)
}

// memo is f(text), remembered in m by the text's identity.
func memo(m map[textID]int, text string, f func(string) int) int {
	id := idOf(text)
	if v, ok := m[id]; ok {
		return v
	}
	v := f(text)
	m[id] = v
	return v
}

// runeStart is i, moved back to the start of the rune it is in.
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// piece is bytes [from, to) of c.texts[t], at offset at of a joined text.
type piece struct{ t, from, to, at int }

// across applies sc to joined, the pieces' bytes in order (with, between
// them, separators that belong to none), and acts on the matches that
// span two pieces or more (those within one were checked with it): a
// deny is returned; a redaction writes [REDACTED:<entity>] in the first
// piece it touches and removes the rest of its span from the others.
// cutStart and cutEnd say joined begins or ends inside a longer text: a
// match touching that edge may be a cut word, and is left alone. own are
// redactions of the pieces' texts found in each alone, applied with the
// matches across them (overlapping ones merged, the first tag kept). With hi
// >= 0 (a boundary between messages, the head's first piece), only a
// match from a piece at lo or after (the message just before it) into
// the head is acted on: one that spans several boundaries is acted on
// once, at its first.
func (c *checking) across(sc *guardrail.Scanner, joined string, pieces []piece, cutStart, cutEnd bool, lo, hi int, own []textCut) *guardrail.Rule {
	pieceOf := func(off int) int { // the piece holding joined byte off, or the one before it
		// pieces are in order of at: a binary search (a walk from the
		// first piece per match made a message of 60,000 parts, each with
		// an email, take 7 s: third attack pass B12)
		k := sort.Search(len(pieces), func(k int) bool { return pieces[k].at > off })
		return max(k-1, 0)
	}
	type cut = textCut
	cuts := own
	c.ms = sc.Find(joined, c.ms[:0])
	for _, m := range c.ms {
		if cutStart && m.Start == 0 || cutEnd && m.End == len(joined) {
			continue
		}
		first, last := pieceOf(m.Start), pieceOf(m.End-1)
		if first == last {
			continue // within one piece: checked already
		}
		if hi >= 0 && !(lo <= first && first < hi && hi <= last) {
			continue // not across this boundary from the text just before it: another window's
		}
		r := m.Rule
		if !c.enforce(r) {
			continue
		}
		switch r.Action {
		case guardrail.Deny:
			return r
		case guardrail.Redact:
			tag := "[REDACTED:" + m.Entity + "]"
			for k := first; k <= last; k++ {
				p := pieces[k]
				s, e := max(m.Start, p.at), min(m.End, p.at+p.to-p.from)
				if s >= e {
					continue // the match only touches its separator
				}
				cuts = append(cuts, cut{p.t, s - p.at + p.from, e - p.at + p.from, tag})
				tag = ""
			}
		}
	}
	// Per text, overlapping cuts merged into one (the first tag kept),
	// then applied from the end so that earlier offsets hold.
	slices.SortStableFunc(cuts, func(a, b cut) int {
		if a.t != b.t {
			return a.t - b.t
		}
		return a.s - b.s
	})
	var merged []cut
	for _, x := range cuts {
		if n := len(merged); n > 0 && merged[n-1].t == x.t && x.s <= merged[n-1].e {
			merged[n-1].e = max(merged[n-1].e, x.e)
			if merged[n-1].with == "" {
				merged[n-1].with = x.with
			}
			continue
		}
		merged = append(merged, x)
	}
	for n := len(merged) - 1; n >= 0; n-- {
		x := merged[n]
		t := &c.texts[x.t]
		t.text, t.changed = t.text[:x.s]+x.with+t.text[x.e:], true
	}
	return nil
}

// lastUserContent is the content of the chat's last user message as it
// stands (a string, or its text parts joined); "" when there is none.
func (c *checking) lastUserContent() string {
	var b strings.Builder
	for i := range c.texts {
		t := &c.texts[i]
		if t.msg == c.lastUser && (t.kind == content || t.kind == part) {
			b.WriteString(t.text)
		}
	}
	return b.String()
}

// schema applies a json_schema rule: the last user message's content
// must be JSON valid against s. An embeddings call, or a rule without a
// schema, is not checked.
func (c *checking) schema(policy string, s *jsonschema.Schema, action guardrail.Action, shadow bool) error {
	if !c.chatCall || s == nil {
		return nil
	}
	err := s.Validate(c.lastUserContent())
	if err == nil {
		return nil
	}
	c.note(policy, config.GuardrailJSONSchema, verdictAction(action, shadow))
	if shadow || action != guardrail.Deny {
		return nil
	}
	return refuse(policy, config.GuardrailJSONSchema, err.Error())
}

// webhook applies a webhook rule: its service is asked about every text
// as it stands; a deny refuses (or is logged), a replace rewrites.
func (c *checking) webhook(ctx context.Context, policy string, wc *webhook.Client, action guardrail.Action, shadow bool) error {
	if wc == nil {
		return nil
	}
	// Every text but the request's tools, which the webhook gets whole,
	// and the tool calls' ids, types and names.
	texts := make([]webhook.Text, 0, len(c.texts))
	at := make([]int, 0, len(c.texts)) // texts[k] is c.texts[at[k]]
	for i := range c.texts {
		t := &c.texts[i]
		if t.kind == extra && t.prefix == "" && t.key == "tools" {
			continue
		}
		if t.kind == extra && t.key == "tool_calls" && (t.val.Key || !strings.HasSuffix(strings.ToLower(t.val.Path), ".function.arguments")) {
			continue // a tool call's id, type and name: the rules check them, the webhook gets the arguments
		}
		texts = append(texts, webhook.Text{Role: t.role, Location: t.location(), Text: t.text})
		at = append(at, i)
	}
	st := c.st
	v, err := wc.Check(ctx, webhook.Request{
		Phase: guardrail.Prompt, Texts: texts, Tools: c.tools, Sensitive: st.Sensitive,
		Metadata: webhook.Metadata{Tenant: st.Tenant, Agent: st.Agent, Policy: policy, Operation: st.Operation, RequestID: st.RequestID},
	})
	if err != nil && c.log != nil && !errors.Is(err, webhook.ErrSensitive) {
		// The error names the webhook's URL without user info and query,
		// never a text.
		c.log.WarnContext(ctx, "guardrail webhook failed: its on_error verdict applies", "policy", policy, "request_id", st.RequestID,
			"verdict", v.Action.String(), "error", err.Error())
	}
	switch v.Action {
	case webhook.Allow:
		return nil
	case webhook.Replace:
		if shadow {
			c.note(policy, config.GuardrailWebhook, verdictAction(guardrail.Redact, true))
			return nil
		}
		c.note(policy, config.GuardrailWebhook, guardrail.Redact.String())
		for _, r := range v.Texts {
			for k := range texts {
				if texts[k].Location == r.Location {
					c.texts[at[k]].text, c.texts[at[k]].changed = r.Text, true
					break
				}
			}
		}
		return nil
	}
	// Deny: the answer's, or the on_error verdict of a failed exchange.
	c.note(policy, config.GuardrailWebhook, verdictAction(action, shadow))
	if shadow || action != guardrail.Deny {
		return nil
	}
	return refuse(policy, config.GuardrailWebhook, v.Reason)
}

// write puts the changed texts back into req.
func (c *checking) write(req any) {
	switch r := req.(type) {
	case *flexwayv1.CreateChatCompletionRequest:
		c.writeChat(r)
	case *flexwayv1.CreateEmbeddingRequest:
		for i := range c.texts {
			t := &c.texts[i]
			if !t.changed {
				continue
			}
			switch in := r.GetInput().GetInput().(type) {
			case *flexwayv1.EmbeddingInput_Text:
				in.Text = t.text
			case *flexwayv1.EmbeddingInput_Texts:
				in.Texts.Values[t.msg] = t.text
			}
		}
	}
}

func (c *checking) writeChat(r *flexwayv1.CreateChatCompletionRequest) {
	for i := 0; i < len(c.texts); i++ {
		t := &c.texts[i]
		if t.kind == extra {
			// One field's strings, contiguous: the changed ones spliced in
			// together.
			var vs []jsonstring.Value
			var texts []string
			j := i
			for ; j < len(c.texts) && c.texts[j].kind == extra && c.texts[j].key == t.key && c.texts[j].prefix == t.prefix; j++ {
				if c.texts[j].changed {
					vs = append(vs, c.texts[j].val)
					texts = append(texts, c.texts[j].text)
				}
			}
			if vs != nil {
				raw := t.fields[t.key]
				if vs[0].Path == "" && vs[0].Start == 0 && vs[0].End == len(raw) && !vs[0].Number && (raw == "" || raw[0] != '"') {
					t.fields[t.key] = texts[0] // a value that was not JSON: text as text
				} else {
					t.fields[t.key] = jsonstring.Splice(raw, vs, texts)
				}
			}
			i = j - 1
			continue
		}
		m := r.Messages[t.msg]
		if !t.changed {
			continue
		}
		switch t.kind {
		case content:
			m.Content = &flexwayv1.ChatMessage_Text{Text: t.text}
		case part:
			s := t.text
			m.GetParts().Parts[t.idx].Text = &s
		case name:
			s := t.text
			m.Name = &s
		}
	}
}
