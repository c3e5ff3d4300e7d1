package policy

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/guardrail"
	"github.com/flexway/flexway/server/guardrail/jsonschema"
	"github.com/flexway/flexway/server/guardrail/webhook"
)

// WholeRule is a guardrail rule that judges a whole text rather than
// spans of it (json_schema, webhook): on a stream it makes the answer
// arrive at once. Shared read-only by every call.
type WholeRule struct {
	// Policy is the declaring policy's name; Index the rule's position in
	// its phase's list.
	Policy string
	Index  int
	// Phase is the list the rule is in.
	Phase guardrail.Phase
	// Type is config.GuardrailJSONSchema or config.GuardrailWebhook.
	Type string
	// Action is guardrail.Deny or guardrail.Log: what a failed schema or a
	// webhook's deny does.
	Action guardrail.Action
	// Shadow is set for a rule of a policy in governance.mode shadow: its
	// verdicts are reported (would_deny) and change nothing.
	Shadow bool
	// Schema is a prompt json_schema rule's schema; nil for a response
	// one (the request's response_format schema is checked).
	Schema *jsonschema.Schema
	// Webhook is a webhook rule's client.
	Webhook *webhook.Client
}

// Logging is the prompt_logging section that decides for a call: that of
// its most specific policy with the section.
type Logging struct {
	// Policy names the policy.
	Policy string
	config.PromptLogging
}

// guards is what a set of policies checks and logs, joined once.
type guards struct {
	prompt, response           *guardrail.Scanner
	wholePrompt, wholeResponse []*WholeRule
	logging                    *Logging // nil: no policy has the section
}

func (g *guards) scanner(phase guardrail.Phase) *guardrail.Scanner {
	if g == nil {
		return nil
	}
	if phase == guardrail.Response {
		return g.response
	}
	return g.prompt
}

func (g *guards) whole(phase guardrail.Phase) []*WholeRule {
	if g == nil {
		return nil
	}
	if phase == guardrail.Response {
		return g.wholeResponse
	}
	return g.wholePrompt
}

// has reports whether any policy of ps has guardrails or prompt logging.
func hasGuards(ps []*Policy) bool {
	for _, p := range ps {
		if p.guards != nil {
			return true
		}
	}
	return false
}

// joinGuards joins the guards of ps, most specific first: every text rule
// in one scanner per phase, every whole rule, and the first logging
// section. Nil when none has any.
func joinGuards(ps []*Policy) *guards {
	if !hasGuards(ps) {
		return nil
	}
	if len(ps) == 1 {
		return ps[0].guards
	}
	var g guards
	var prompt, response []*guardrail.Scanner
	for _, p := range ps {
		pg := p.guards
		if pg == nil {
			continue
		}
		prompt = append(prompt, pg.prompt)
		response = append(response, pg.response)
		g.wholePrompt = append(g.wholePrompt, pg.wholePrompt...)
		g.wholeResponse = append(g.wholeResponse, pg.wholeResponse...)
		if g.logging == nil {
			g.logging = pg.logging
		}
	}
	g.prompt = guardrail.Join(prompt...)
	g.response = guardrail.Join(response...)
	return &g
}

// compileGuards compiles a policy's guardrails and prompt_logging; nil
// when it has neither. Errors name the rule's key path.
func compileGuards(i int, cp config.Policy, shadow bool) (*guards, error) {
	if cp.Guardrails == nil && (cp.PromptLogging == nil) {
		return nil, nil
	}
	g := &guards{}
	if l := cp.PromptLogging; l != nil {
		g.logging = &Logging{Policy: cp.Name, PromptLogging: *l}
	}
	if gr := cp.Guardrails; gr != nil {
		var err error
		if g.prompt, g.wholePrompt, err = compilePhase(i, cp.Name, guardrail.Prompt, gr.Prompt, shadow); err != nil {
			return nil, err
		}
		if g.response, g.wholeResponse, err = compilePhase(i, cp.Name, guardrail.Response, gr.Response, shadow); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func compilePhase(i int, name string, phase guardrail.Phase, rules []config.GuardrailRule, shadow bool) (*guardrail.Scanner, []*WholeRule, error) {
	var specs []guardrail.Spec
	var whole []*WholeRule
	for j, r := range rules {
		path := fmt.Sprintf("ai.policies[%d].guardrails.%s[%d]", i, phase, j)
		action, ok := guardrail.ParseAction(r.Action)
		if !ok {
			return nil, nil, fmt.Errorf("%s.action: unknown action %q", path, r.Action)
		}
		switch r.Type {
		case config.GuardrailJSONSchema, config.GuardrailWebhook:
			w := &WholeRule{Policy: name, Index: j, Phase: phase, Type: r.Type, Action: action, Shadow: shadow}
			if r.Type == config.GuardrailJSONSchema && r.Schema != nil {
				var err error
				if r.Schema.File != "" {
					w.Schema, err = jsonschema.CompileFile(r.Schema.File)
				} else {
					w.Schema, err = jsonschema.CompileJSON(r.Schema.JSON)
				}
				if err != nil {
					return nil, nil, fmt.Errorf("%s.schema: %w", path, err)
				}
			}
			if r.Type == config.GuardrailWebhook {
				onError := webhook.Deny
				if r.OnError == "allow" {
					onError = webhook.Allow
				}
				w.Webhook = &webhook.Client{URL: r.URL, Timeout: r.Timeout.Std(), OnError: onError, External: r.IsExternal()}
			}
			whole = append(whole, w)
		default:
			specs = append(specs, guardrail.Spec{
				Policy: name, Index: j, Phase: phase, Type: r.Type,
				Entities: r.Entities, Words: r.Words, Phrases: r.Phrases, Pattern: r.Pattern,
				Action: action, Shadow: shadow,
			})
		}
	}
	s, err := guardrail.Compile(specs)
	if err != nil {
		return nil, nil, fmt.Errorf("ai.policies[%d].guardrails.%s: %w", i, phase, err)
	}
	return s, whole, nil
}

// joinCache holds the guards of the policy sets made of more than one
// match shape, by their policies' indices, so that a call pays the join
// (tens of milliseconds: the automaton is rebuilt) once per distinct set
// in the process's life. Bounded: past maxJoins sets, a set is joined per
// call (correct, slow; a configuration would need over a thousand
// distinct overlapping guarded combinations to get there).
type joinCache struct {
	m  sync.Map // string → *guards
	n  int      // entries, under mu
	mu sync.Mutex
}

const maxJoins = 1024

func (c *joinCache) get(ps []*Policy) *guards {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(strconv.Itoa(p.Index))
		b.WriteByte(',')
	}
	key := b.String()
	if g, ok := c.m.Load(key); ok {
		return g.(*guards)
	}
	g := joinGuards(ps)
	c.mu.Lock()
	if c.n < maxJoins {
		if prev, loaded := c.m.LoadOrStore(key, g); loaded {
			g = prev.(*guards)
		} else {
			c.n++
		}
	}
	c.mu.Unlock()
	return g
}

// MustCompile is [Compile] for configurations known to compile (tests,
// literals): it panics on Compile's error.
func MustCompile(ps []config.Policy) *Table {
	t, err := Compile(ps)
	if err != nil {
		panic(err)
	}
	return t
}

// Guarded reports whether some policy of the table has a guardrail rule
// for phase: when none has, the phase's stage is left out of the call's
// path altogether (a call pays nothing for it).
func (t *Table) Guarded(phase guardrail.Phase) bool {
	for _, p := range t.policies {
		if g := p.guards; g != nil && (g.scanner(phase) != nil || len(g.whole(phase)) > 0) {
			return true
		}
	}
	return false
}
