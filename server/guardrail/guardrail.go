package guardrail

import (
	"slices"
	"strings"
)

// Action is what a rule does with a match (a guardrail rule's `action`).
type Action uint8

// The actions.
const (
	// Deny refuses the call: 403 guardrail_violation before anything is
	// sent upstream (prompt phase) or to the client (response phase).
	Deny Action = iota + 1
	// Redact replaces the matched span with [REDACTED:<entity>].
	Redact
	// Log lets the call go on; the audit records the match.
	Log
)

// String is the action's configuration name: deny, redact or log.
func (a Action) String() string {
	switch a {
	case Deny:
		return "deny"
	case Redact:
		return "redact"
	case Log:
		return "log"
	}
	return "unknown"
}

// ParseAction is the Action named s (deny, redact, log).
func ParseAction(s string) (Action, bool) {
	switch s {
	case "deny":
		return Deny, true
	case "redact":
		return Redact, true
	case "log":
		return Log, true
	}
	return 0, false
}

// Phase is when a rule runs: on the prompt (before the call) or on the
// response (the answer, streams included).
type Phase uint8

// The phases.
const (
	Prompt Phase = iota + 1
	Response
)

// String is the phase's name in the audit line and metrics: prompt or
// response.
func (p Phase) String() string {
	if p == Response {
		return "response"
	}
	return "prompt"
}

// The text rule types a [Scanner] runs (a guardrail rule's `type`).
// json_schema and webhook judge a whole text and are not scanner rules.
const (
	TypePII       = "pii"
	TypeSecrets   = "secrets"
	TypeInjection = "injection"
	TypeBanned    = "banned"
	TypeRegex     = "regex"
)

// The pii entities (a pii rule's `entities`), also the <entity> of their
// redactions.
const (
	EntityEmail      = "email"
	EntityPhone      = "phone"
	EntityCreditCard = "credit_card"
	EntityIBAN       = "iban"
	EntityIPv4       = "ipv4"
	EntityIPv6       = "ipv6"
)

// Spec is one text rule as configured, ready to compile.
type Spec struct {
	// Policy is the name of the policy that declares the rule.
	Policy string
	// Index is the rule's position in its policy's phase list.
	Index int
	// Phase is the list the rule is in.
	Phase Phase
	// Type is TypePII, TypeSecrets, TypeInjection, TypeBanned or
	// TypeRegex.
	Type string
	// Entities are a pii rule's entities (Entity*); empty: all of them.
	Entities []string
	// Words are a banned rule's words or phrases, matched on word
	// boundaries after normalisation.
	Words []string
	// Phrases are an injection rule's operator phrases, added to the
	// maintained list; normalised like it.
	Phrases []string
	// Pattern is a regex rule's RE2 pattern, matched on the NFKC form of
	// the text (not case-folded: use (?i)).
	Pattern string
	// Action is what the rule does with a match.
	Action Action
	// Shadow is set for a rule of a policy in governance.mode shadow: its
	// matches are reported (would_deny) and change nothing.
	Shadow bool
}

// Rule is a compiled rule, shared read-only by every call; matches point
// to it.
type Rule struct {
	// Spec is the rule as configured.
	Spec
	rx *rxRule
}

// Match is one span a rule found.
type Match struct {
	// Start and End are byte offsets into the original text given to
	// [Scanner.Find] (End exclusive); for a [Holder], offsets into the
	// whole stream of its channel (every chunk pushed, concatenated).
	// Both are on rune boundaries of the original text.
	Start, End int
	// Entity is what a redaction writes: [REDACTED:<Entity>] (a pii
	// entity, "secret", "injection", "banned" or "regex").
	Entity string
	// Rule is the rule that matched.
	Rule *Rule
}

// Scanner runs a set of compiled text rules over a text in one pass. It
// is safe for concurrent use. A nil *Scanner has no rules: it finds
// nothing and its Holders hold nothing back.
type Scanner struct {
	rules []*Rule
	eng   engine
}

// Compile compiles specs into one Scanner (nil, nil for no specs). Its
// error names the rule (policy, phase, index) and what is wrong (an
// unknown type or entity, a bad RE2 pattern or one that matches the empty
// string, an empty banned list, no action).
func Compile(specs []Spec) (*Scanner, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	return compile(specs)
}

// Join returns a Scanner that runs every non-nil scanner of ss, as if
// their rules had been compiled together (the same *Rule values); nil
// when none is non-nil, the scanner itself when only one is. Joining
// builds the banned/injection automaton anew: callers join once per
// policy set, not per call.
func Join(ss ...*Scanner) *Scanner {
	var only *Scanner
	k := 0
	for _, s := range ss {
		if s != nil && len(s.rules) > 0 {
			only = s
			k++
		}
	}
	if k <= 1 {
		return only
	}
	var rules []*Rule
	for _, s := range ss {
		if s != nil {
			rules = append(rules, s.rules...)
		}
	}
	return newScanner(rules)
}

// Rules returns the scanner's rules. Read-only.
func (s *Scanner) Rules() []*Rule {
	if s == nil {
		return nil
	}
	return s.rules
}

// Find appends to dst the matches of the scanner's rules in text, sorted
// by Start (then by End, longest first; then in rule order). Matches of
// different rules may overlap; a rule's matches may too (two phrases of
// one injection list). Its time is linear in len(text). text need not be
// valid UTF-8 (invalid bytes match nothing). JSON \u escapes are not
// decoded here: callers check the decoded strings.
func (s *Scanner) Find(text string, dst []Match) []Match {
	if s == nil || len(s.rules) == 0 || len(text) == 0 {
		return dst
	}
	n := len(dst)
	dst, _ = s.scan(text, true, dst, nil)
	sortMatches(dst[n:])
	return dst
}

func sortMatches(ms []Match) {
	slices.SortStableFunc(ms, func(a, b Match) int {
		if a.Start != b.Start {
			return a.Start - b.Start
		}
		return b.End - a.End
	})
}

// Redacted returns text with the span of every match of ms whose rule's
// action is Redact (and not Shadow) replaced by [REDACTED:<entity>];
// overlapping spans are merged into one, with the entity of the first. ms
// is sorted as Find returns it. Text is returned unchanged when no such
// match exists.
func Redacted(text string, ms []Match) string {
	var b strings.Builder
	last := 0 // text written up to here
	end := -1 // the current merged span's end
	for _, m := range ms {
		if m.Rule == nil || m.Rule.Action != Redact || m.Rule.Shadow {
			continue
		}
		if m.Start < end {
			end = max(end, m.End)
			continue
		}
		if end >= 0 {
			last = end
		}
		if b.Len() == 0 {
			b.Grow(len(text))
		}
		b.WriteString(text[last:m.Start])
		b.WriteString("[REDACTED:")
		b.WriteString(m.Entity)
		b.WriteString("]")
		end = m.End
	}
	if end < 0 {
		return text
	}
	b.WriteString(text[end:])
	return b.String()
}
