package guardrail

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
}

// Match is one span a rule found.
type Match struct {
	// Start and End are byte offsets into the original text given to
	// [Scanner.Find] (End exclusive).
	Start, End int
	// Entity is what a redaction writes: [REDACTED:<Entity>] (a pii
	// entity, "secret", "injection", "banned" or "regex").
	Entity string
	// Rule is the rule that matched.
	Rule *Rule
}

// Scanner runs a set of compiled text rules over a text in one pass. It
// is safe for concurrent use.
type Scanner struct {
	rules []*Rule
}

// Compile compiles specs into one Scanner. Its error names the rule
// (policy, phase, index) and what is wrong (an unknown type or entity, a
// bad RE2 pattern, an empty banned list).
func Compile(specs []Spec) (*Scanner, error) {
	panic("guardrail.Compile: not built yet")
}

// Join returns a Scanner that runs every non-nil scanner of ss, as if
// their rules had been compiled together; nil when none is non-nil.
func Join(ss ...*Scanner) *Scanner {
	panic("guardrail.Join: not built yet")
}

// Rules returns the scanner's rules. Read-only.
func (s *Scanner) Rules() []*Rule { return s.rules }

// Find appends to dst the matches of the scanner's rules in text, sorted
// by Start (then by End, longest first). Matches of different rules may
// overlap. Its time is linear in len(text).
func (s *Scanner) Find(text string, dst []Match) []Match {
	panic("guardrail.Scanner.Find: not built yet")
}

// Redacted returns text with the span of every match of ms whose rule's
// action is Redact (and not Shadow) replaced by [REDACTED:<entity>];
// overlapping spans are merged into one, with the entity of the first. ms
// is sorted as Find returns it. Text is returned unchanged when no such
// match exists.
func Redacted(text string, ms []Match) string {
	panic("guardrail.Redacted: not built yet")
}

// Holder applies a Scanner to one channel of a streamed text. It holds back
// every byte a rule could still match when more text arrives, and releases
// only text no rule can still change: a match split across pushes is found
// whole, and redacted whole, before any of it is released. Concatenating
// every release of a stream, Flush's included, gives exactly
// Redacted(whole, s.Find(whole, nil)), wherever the stream was split. Not
// safe for concurrent use: one per channel of one call.
type Holder struct {
	s *Scanner
}

// NewHolder returns a Holder over s for one channel.
func (s *Scanner) NewHolder() *Holder { return &Holder{s: s} }

// Push adds chunk to the channel. release is the text that may now go to
// the client, redacted; found are the matches in it, and any match with a
// Deny action found so far in the held text too (a denial is reported as
// soon as it is seen; the caller then ends the stream and releases
// nothing more).
func (h *Holder) Push(chunk string) (release string, found []Match) {
	panic("guardrail.Holder.Push: not built yet")
}

// Flush ends the channel: release is every byte still held, redacted, and
// found its matches.
func (h *Holder) Flush() (release string, found []Match) {
	panic("guardrail.Holder.Flush: not built yet")
}
