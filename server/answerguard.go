package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/guardrail"
	"github.com/flexway/flexway/server/guardrail/jsonschema"
	"github.com/flexway/flexway/server/guardrail/webhook"
	"github.com/flexway/flexway/server/jsonstring"
	"github.com/flexway/flexway/server/policy"
	"github.com/flexway/flexway/server/toolcalls"
)

// Response guardrails: stage 13 of DESIGN.md's AI pipeline, between the
// adapters' decode and the front. The text rules (st.Policies' response
// Scanner) check every choice's content, reasoning_content, refusal and
// tool call arguments; on a stream, one [guardrail.Holder] per text
// channel holds back what a rule could still match. The whole rules
// (json_schema, webhook) judge the final answer: on a stream they make it
// arrive at once, buffered up to the answer bound ([Options.MaxAnswerBytes]).
// A call whose policies have no response rule gets no guard at all (nil):
// nothing is allocated, nothing is held back.

// DefaultMaxAnswerBytes is [Options.MaxAnswerBytes] when it is not set:
// config's default of ai.vision.max_body_bytes (24 MiB).
const DefaultMaxAnswerBytes = 24 << 20

// The text channels of one choice.
const (
	chanContent uint8 = iota
	chanReasoning
	chanRefusal
	chanTool
	// chanReasoningAlt is the delta's "reasoning", the name OpenRouter
	// and vLLM give reasoning_content: held back like it.
	chanReasoningAlt
)

// channelField is the delta field of a text channel other than content
// and tool calls.
func channelField(kind uint8) string {
	switch kind {
	case chanRefusal:
		return "refusal"
	case chanReasoningAlt:
		return "reasoning"
	}
	return "reasoning_content"
}

// guardChannel is one text channel of a streamed answer.
type guardChannel struct {
	choice int32
	kind   uint8
	tool   int // the tool call's index, for chanTool
	h      *guardrail.Holder
	unesc  *jsonstring.Unescaper // chanTool: the arguments' strings, decoded before the holder
	name   string                // the tool call's function name, when seen
	all    strings.Builder
	out    string    // released in the chunk being rewritten
	hit    bool      // out is to be written into the chunk
	done   bool      // flushed
	leaf   *leafSpec // chanLeaf: the field
	member string    // chanLeaf: the member of the object or entry ("" for the field itself)
}

// answerGuard applies the response rules to one call's answer; for a
// stream, to one attempt's stream (a fallback starts a new one). Not safe
// for concurrent use.
type answerGuard struct {
	ctx      context.Context
	log      *slog.Logger
	st       *call.State
	sc       *guardrail.Scanner
	whole    []*policy.WholeRule
	schema   *jsonschema.Schema // the request's response_format schema
	tools    *jsonschema.Tools  // the request's tools
	reqErr   error              // the request's schema does not compile
	rawTools string             // the request's tools JSON, for a webhook
	max      int64              // buffered answer bound, in bytes
	chans    []*guardChannel
	byKey    map[chanKey]*guardChannel
	occ      []leafOcc // the chunk's strings of held-back fields
	found    []guardrail.Match
	buffer   bool    // whole rules: the stream is released at its end
	finished []int32 // the choices whose finish_reason has come
	bytes    int64
	last     *flexwayv1.ChatCompletionChunk
	ordered  []*flexwayv1.ChatCompletionChunk // buffered chunks, when buffer
}

// checkedAnswerGuard is [Core.newAnswerGuard], refusing before anything
// is sent upstream a request whose response_format or tools schema a
// response json_schema rule of its policies would have to check and that
// does not compile: 400 invalid_request (checking after the call would
// have paid for an answer the caller cannot get). Compiled schemas are
// cached, so a stream's guard made again per attempt does not compile
// them again.
func (c *Core) checkedAnswerGuard(ctx context.Context, st *call.State, req *flexwayv1.CreateChatCompletionRequest) (*answerGuard, error) {
	g := c.newAnswerGuard(ctx, st, req)
	if g != nil && g.reqErr != nil {
		return nil, faults.Wrap(faults.InvalidRequest, g.reqErr, "response_format or tools: the schema does not compile")
	}
	return g, nil
}

// newAnswerGuard returns the guard of st's response rules for req, nil
// when the call's policies have none.
func (c *Core) newAnswerGuard(ctx context.Context, st *call.State, req *flexwayv1.CreateChatCompletionRequest) *answerGuard {
	sc := st.Policies.Scanner(guardrail.Response)
	whole := st.Policies.WholeRules(guardrail.Response)
	if sc == nil && len(whole) == 0 {
		return nil
	}
	g := &answerGuard{ctx: ctx, log: c.log, st: st, sc: sc, whole: whole, max: c.opts.MaxAnswerBytes, rawTools: req.GetExtraFields()["tools"]}
	if g.max <= 0 {
		g.max = DefaultMaxAnswerBytes
	}
	for _, w := range whole {
		switch w.Type {
		case config.GuardrailJSONSchema:
			if g.schema == nil && g.tools == nil && g.reqErr == nil {
				g.schema, g.reqErr = jsonschema.FromResponseFormat(req.GetExtraFields()["response_format"])
				if g.reqErr == nil {
					g.tools, g.reqErr = jsonschema.FromTools(req.GetExtraFields()["tools"])
				}
			}
			if g.schema != nil || g.tools != nil || g.reqErr != nil {
				g.buffer = true
			}
		case config.GuardrailWebhook:
			g.buffer = true
		}
	}
	return g
}

// verdict records m's rule in the audit and returns the refusal when the
// rule denies (and is not a shadow policy's).
func (g *answerGuard) verdict(policyName, ruleType string, action guardrail.Action, shadow bool) error {
	a := action.String()
	if shadow && action != guardrail.Log {
		a = "would_" + a
	}
	g.st.AddGuardrail(call.GuardrailVerdict{Policy: policyName, Rule: ruleType, Phase: guardrail.Response.String(), Action: a})
	if action == guardrail.Deny && !shadow {
		return faults.New(faults.GuardrailViolation, "policy %q refuses the answer: guardrail %s", policyName, ruleType)
	}
	return nil
}

// matches records every match of ms; the first denial is returned.
func (g *answerGuard) matches(ms []guardrail.Match) error {
	var deny error
	for _, m := range ms {
		if err := g.verdict(m.Rule.Policy, m.Rule.Type, m.Rule.Action, m.Rule.Shadow); err != nil && deny == nil {
			deny = err
		}
	}
	return deny
}

// text checks one whole text with the text rules: what the client may
// get (redacted) or the refusal.
func (g *answerGuard) text(s string) (string, error) {
	if g.sc == nil || s == "" {
		return s, nil
	}
	g.found = g.sc.Find(s, g.found[:0])
	if len(g.found) == 0 {
		return s, nil
	}
	if err := g.matches(g.found); err != nil {
		return "", err
	}
	return guardrail.Redacted(s, g.found), nil
}

// jsonText decodes a raw JSON string field (reasoning_content, refusal);
// ok is false for anything but a string (null).
func jsonText(raw string) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal([]byte(raw), &s) != nil {
		return "", false
	}
	return s, true
}

// quote is s as a JSON string.
func quote(s string) string { return string(jsonstring.Append(nil, s)) }

// extras checks every string inside the raw JSON fields (but skip) with
// the text rules, in place ([answerGuard.field]). A denial is returned.
func (g *answerGuard) extras(fields map[string]string, skip string) error {
	if g.sc == nil {
		return nil
	}
	for k, raw := range fields {
		if k == skip {
			continue
		}
		r, err := g.field(raw)
		if err != nil {
			return err
		}
		if r != raw {
			fields[k] = r
		}
	}
	return nil
}

// field checks every string inside one raw JSON field value, decoded (\u
// escapes inside them too: a field may hold JSON in a string), and
// returns the value with the redactions spliced in (raw itself when
// nothing changed); a value that is not JSON is checked as text.
func (g *answerGuard) field(raw string) (string, error) {
	if g.sc == nil || raw == "null" {
		return raw, nil
	}
	vs, err := jsonstring.Values(raw)
	if err != nil {
		return g.text(raw)
	}
	return g.values(raw, vs, nil)
}

// values checks vs, the strings of raw, decoded, but those starting at
// an offset of skip (held back by a channel), and returns raw with the
// redactions spliced in (raw itself when nothing changed).
func (g *answerGuard) values(raw string, vs []jsonstring.Value, skip []int) (string, error) {
	var changed []jsonstring.Value
	var texts []string
	for _, v := range vs {
		if slices.Contains(skip, v.Start) {
			continue
		}
		u := jsonstring.Unescape(v.Text)
		r, err := g.text(u)
		if err != nil {
			return "", err
		}
		if r != u {
			changed, texts = append(changed, v), append(texts, r)
		}
	}
	if changed == nil {
		return raw, nil
	}
	return jsonstring.Splice(raw, changed, texts), nil
}

// callStrings checks the strings of a stream delta's tool calls but
// their arguments (ids, types, names, unknown fields: the arguments go
// through their channel's hold-back), chunk by chunk like the delta's
// other fields; it returns raw with the redactions spliced in, raw
// itself when nothing changed. calls are Parse's for raw.
func (g *answerGuard) callStrings(raw string, calls []toolcalls.Call) (string, error) {
	other := false
	for _, c := range calls {
		other = other || c.Other
	}
	if !other || g.sc == nil {
		return raw, nil // arguments only: nothing else to check
	}
	vs, err := jsonstring.Values(raw)
	if err != nil {
		return raw, nil // Parse read it: never
	}
	skip := make([]int, 0, len(calls))
	for _, c := range calls {
		if c.Start >= 0 {
			skip = append(skip, c.Start)
		}
	}
	return g.values(raw, vs, skip)
}

// dropLogprobs sets a choice's logprobs to null when the answer has text
// rules: they spell out each token's text and bytes, which a redaction
// (or a hold-back) would otherwise give away.
func (g *answerGuard) dropLogprobs(fields map[string]string) {
	if g.sc == nil {
		return
	}
	if v, ok := fields["logprobs"]; ok && v != "null" {
		fields["logprobs"] = "null"
	}
}

// checkJSON applies the response rules to a JSON answer, in place:
// redactions rewrite resp; a denial is returned (403).
func (g *answerGuard) checkJSON(resp *flexwayv1.ChatCompletion) error {
	if err := g.extras(resp.GetExtraFields(), ""); err != nil {
		return err
	}
	for _, ch := range resp.GetChoices() {
		// the choice's own unknown fields first: a choice with no
		// message may hold one by another spelling ("Message"), which a
		// client decoding with encoding/json reads as the message
		if err := g.extras(ch.GetExtraFields(), "logprobs"); err != nil {
			return err
		}
		g.dropLogprobs(ch.GetExtraFields())
		m := ch.GetMessage()
		if m == nil {
			continue
		}
		switch c := m.Content.(type) {
		case *flexwayv1.ChatMessage_Text:
			s, err := g.text(c.Text)
			if err != nil {
				return err
			}
			c.Text = s
		case *flexwayv1.ChatMessage_Parts:
			for _, p := range c.Parts.GetParts() {
				if p.GetType() == "text" {
					s, err := g.text(p.GetText())
					if err != nil {
						return err
					}
					p.Text = &s
				}
			}
		}
		// reasoning_content, refusal, function_call, audio, annotations,
		// reasoning… : every string, modelled or not.
		// tool_calls too: every string of them (arguments decoded, ids,
		// names), whatever their shape.
		if err := g.extras(m.GetExtraFields(), ""); err != nil {
			return err
		}
	}
	if len(g.whole) == 0 {
		return nil
	}
	var texts []answerText
	for i, ch := range resp.GetChoices() {
		m := ch.GetMessage()
		loc := "choices[" + strconv.Itoa(i) + "].message."
		calls := false
		if raw, ok := m.GetExtraFields()["tool_calls"]; ok {
			args, _ := toolcalls.Parse(raw, nil) // another shape: no call to judge
			for _, a := range args {
				calls = calls || a.Start >= 0
			}
		}
		// With a schema to meet, an answer that is no text and calls no
		// tool is judged too (as ""): content null does not meet it.
		if s := messageText(m); s != "" || m.GetText() != "" || g.schema != nil && !calls {
			texts = append(texts, answerText{loc: loc + "content", text: s, content: true, set: func(s string) { m.Content = &flexwayv1.ChatMessage_Text{Text: s} }})
		}
		for _, f := range [...]string{"reasoning_content", "reasoning", "refusal"} {
			if s, ok := jsonText(m.GetExtraFields()[f]); ok {
				texts = append(texts, answerText{loc: loc + f, text: s, set: func(s string) { m.ExtraFields[f] = quote(s) }})
			}
		}
		if raw, ok := m.GetExtraFields()["tool_calls"]; ok {
			args, _ := toolcalls.Parse(raw, nil)
			for k, a := range args {
				if a.Start < 0 {
					continue
				}
				texts = append(texts, answerText{loc: loc + "tool_calls[" + strconv.Itoa(k) + "].function.arguments", text: a.Arguments, tool: a.Name, isTool: true,
					set: func(s string) {
						raw := m.ExtraFields["tool_calls"]
						args, _ := toolcalls.Parse(raw, nil)
						ts := make([]string, len(args))
						for j := range args {
							ts[j] = args[j].Arguments
						}
						ts[k] = s
						m.ExtraFields["tool_calls"] = toolcalls.Splice(raw, args, ts)
					}})
			}
		}
	}
	return g.checkWhole(texts)
}

// messageText is a message's content as one text: its string, or its
// text parts joined.
func messageText(m *flexwayv1.ChatMessage) string {
	if p := m.GetParts(); p != nil {
		var b strings.Builder
		for _, part := range p.GetParts() {
			if part.GetType() == "text" {
				b.WriteString(part.GetText())
			}
		}
		return b.String()
	}
	return m.GetText()
}

// answerText is one text of a final answer for the whole rules: where it
// is (a webhook location), what it is, and how a replacement is written.
type answerText struct {
	loc     string
	text    string
	content bool   // a choice's content (json_schema: response_format)
	isTool  bool   // a tool call's arguments (json_schema: the tool's parameters)
	tool    string // the tool call's function name
	set     func(string)
}

// checkWhole applies the whole rules to the final answer's texts, after
// the text rules: json_schema validates each content against the
// request's response_format schema and each tool call's arguments against
// its tool; a webhook sees every text and may deny or replace some.
func (g *answerGuard) checkWhole(texts []answerText) error {
	for _, w := range g.whole {
		switch w.Type {
		case config.GuardrailJSONSchema:
			if g.reqErr != nil {
				return faults.Wrap(faults.InvalidRequest, g.reqErr, "response_format or tools: the schema does not compile")
			}
			failed := false
			for _, t := range texts {
				switch {
				case t.content && g.schema != nil:
					failed = failed || g.schema.Validate(t.text) != nil
				case t.isTool && g.tools != nil:
					failed = failed || g.tools.Validate(t.tool, t.text) != nil
				}
			}
			if failed {
				if err := g.verdict(w.Policy, w.Type, w.Action, w.Shadow); err != nil {
					return err
				}
			}
		case config.GuardrailWebhook:
			if err := g.webhook(w, texts); err != nil {
				return err
			}
		}
	}
	return nil
}

// webhook asks w's service about texts and applies its verdict.
func (g *answerGuard) webhook(w *policy.WholeRule, texts []answerText) error {
	req := webhook.Request{Phase: guardrail.Response, Sensitive: g.st.Sensitive, Metadata: webhook.Metadata{
		Tenant: g.st.Tenant, Agent: g.st.Agent, Policy: w.Policy, Operation: g.st.Operation, Phase: guardrail.Response.String(), RequestID: g.st.RequestID,
	}}
	if g.rawTools != "" {
		req.Tools = json.RawMessage(g.rawTools)
	}
	for _, t := range texts {
		req.Texts = append(req.Texts, webhook.Text{Role: "assistant", Location: t.loc, Text: t.text})
	}
	v, err := w.Webhook.Check(g.ctx, req)
	if err != nil && !errors.Is(err, webhook.ErrSensitive) {
		// The error names the webhook's URL without user info and query,
		// never a text.
		g.log.WarnContext(g.ctx, "guardrail webhook failed: its on_error verdict applies", "policy", w.Policy, "phase", "response",
			"request_id", g.st.RequestID, "verdict", v.Action.String(), "error", err.Error())
	}
	switch v.Action {
	case webhook.Allow:
		return nil
	case webhook.Replace:
		if err := g.verdict(w.Policy, w.Type, guardrail.Redact, w.Shadow); err != nil || w.Shadow {
			return err
		}
		for _, r := range v.Texts {
			for _, t := range texts {
				if t.loc == r.Location {
					t.set(r.Text)
				}
			}
		}
		return nil
	default:
		err := g.verdict(w.Policy, w.Type, w.Action, w.Shadow)
		if fe := faults.As(err); fe != nil && v.Reason != "" {
			// The operator's words to the caller, as in the prompt phase.
			fe.Message += ": " + v.Reason
		}
		return err
	}
}

// errAnswerTooLong is the refusal of a stream whose answer passes the
// bound the whole rules buffer.
func (g *answerGuard) errAnswerTooLong() error {
	return faults.New(faults.GuardrailViolation, "the answer passes %d bytes, the most a json_schema or webhook rule of the call's policies buffers to judge it whole", g.max)
}

// chanKey identifies a channel: its choice, kind, tool call index or
// entry, and for a leaf channel its field and member.
type chanKey struct {
	choice int32
	kind   uint8
	tool   int
	leaf   *leafSpec
	member string
}

// maxChannels bounds the text channels of one answer: choices times
// their tool calls and entries. An upstream that sends more ends the
// stream with an upstream error (third attack pass B13: 8,000 entries,
// each a channel every chunk walked, took 11 s).
const maxChannels = 512

// channel returns the channel (choice, kind, tool), made on first use.
func (g *answerGuard) channel(choice int32, kind uint8, tool int) *guardChannel {
	return g.channelOf(chanKey{choice: choice, kind: kind, tool: tool}, kind == chanTool)
}

// channelOf returns the channel of k, made on first use (with an
// unescaper when json).
func (g *answerGuard) channelOf(k chanKey, json bool) *guardChannel {
	if c, ok := g.byKey[k]; ok {
		return c
	}
	c := &guardChannel{choice: k.choice, kind: k.kind, tool: k.tool, leaf: k.leaf, member: k.member, h: g.sc.NewHolder()}
	if json {
		c.unesc = new(jsonstring.Unescaper)
	}
	if g.byKey == nil {
		g.byKey = map[chanKey]*guardChannel{}
	}
	g.byKey[k] = c
	g.chans = append(g.chans, c)
	return c
}

// errTooManyChannels is the refusal of an answer past maxChannels.
func errTooManyChannels() error {
	return faults.New(faults.UpstreamError, "the upstream sent more than %d tool calls and reasoning entries in one answer, more than the response guardrails hold back", maxChannels)
}

// push adds s to c; what c releases is added to c.out.
func (g *answerGuard) push(c *guardChannel, s string) error {
	if c.unesc != nil {
		s = c.unesc.Push(s)
	}
	rel, found := c.h.Push(s)
	if err := g.matches(found); err != nil {
		return err
	}
	c.out += rel
	c.hit = true
	if g.buffer {
		c.all.WriteString(rel)
	}
	return nil
}

// flush ends c; what it still held is added to c.out.
func (g *answerGuard) flush(c *guardChannel) error {
	if c.done {
		return nil
	}
	c.done = true
	if u := c.unesc; u != nil {
		if rest := u.Flush(); rest != "" {
			c.unesc = nil // rest is an escape never completed: as is
			err := g.push(c, rest)
			c.unesc = u
			if err != nil {
				return err
			}
		}
	}
	rel, found := c.h.Flush()
	if err := g.matches(found); err != nil {
		return err
	}
	if rel != "" {
		c.out += rel
		c.hit = true
		if g.buffer {
			c.all.WriteString(rel)
		}
	}
	return nil
}

// chunk rewrites one upstream chunk in place: each text channel's text is
// pushed and replaced by what its holder releases; at a choice's
// finish_reason its holders are flushed into the chunk. drop is set when
// the chunk carried only held text (nothing to send). A denial is
// returned: nothing of the chunk may be sent.
func (g *answerGuard) chunk(ch *flexwayv1.ChatCompletionChunk) (drop bool, err error) {
	g.last = ch
	g.occ = g.occ[:0]
	before := hasContent(ch)
	keep := false // the chunk carries something besides held text
	var args []toolcalls.Call
	// A member the decoder matches exactly, spelled in another case
	// ("Choices", "Delta"), which encoding/json clients read as the real
	// one: checked chunk by chunk, a key split across two chunks of it
	// passed (fifth attack pass D4). The stream ends, unsent.
	for k := range ch.GetExtraFields() {
		if f := otherSpelling(k, "choices"); f != "" {
			return false, faults.New(faults.UpstreamError, "the upstream sent %q for %s, which the response guardrails cannot hold back", k, f)
		}
	}
	for _, choice := range ch.GetChoices() {
		if _, ok := choice.GetExtraFields()["message"]; ok {
			// a JSON answer's member in a stream chunk: a client that
			// reads it would join what is checked chunk by chunk (sixth
			// attack pass E3)
			return false, faults.New(faults.UpstreamError, "the upstream sent a message in a stream chunk, which the response guardrails cannot hold back")
		}
		for k := range choice.GetExtraFields() {
			if f := otherSpelling(k, "delta", "message", "index", "finish_reason"); f != "" {
				return false, faults.New(faults.UpstreamError, "the upstream sent %q for %s, which the response guardrails cannot hold back", k, f)
			}
		}
	}
	// The chunk's and each choice's other unknown fields (a legacy
	// "text"), chunk by chunk like a delta's.
	if err := g.extras(ch.GetExtraFields(), ""); err != nil {
		return false, err
	}
	for _, choice := range ch.GetChoices() {
		idx, d := choice.GetIndex(), choice.GetDelta()
		if slices.Contains(g.finished, idx) && (deltaHasText(d) || leafAfterFinish(choice.GetExtraFields(), true)) {
			// its channels were flushed at the finish: text now would
			// start a fresh hold-back, a card split across the finish
			// released in two halves (attack pass)
			return false, faults.New(faults.UpstreamError, "the upstream sent text for choice %d after its finish_reason", idx)
		}
		g.dropLogprobs(choice.GetExtraFields())
		for k, v := range choice.GetExtraFields() {
			if k == "logprobs" {
				continue
			}
			var err error
			if sp := leafFor(k, true, v); sp != nil && g.sc != nil {
				err = g.leafField(idx, sp, choice.ExtraFields, k)
			} else if r, ferr := g.field(v); ferr != nil {
				err = ferr
			} else if r != v {
				choice.ExtraFields[k] = r
			}
			if err != nil {
				return false, err
			}
		}
		if d == nil {
			if err := g.endChoice(idx, choice.FinishReason != nil); err != nil {
				return false, err
			}
			if g.pending(idx, false) {
				d = &flexwayv1.ChatMessage{}
				choice.Delta = d
				g.write(idx, d, "", nil)
			}
			var df *map[string]string
			if d != nil {
				df = &d.ExtraFields
			}
			g.writeLeaves(idx, df, &choice.ExtraFields)
			continue
		}
		for k := range d.GetExtraFields() {
			if f := heldSpelling(k); f != "" {
				// "Refusal", "Tool_Calls": a Go client reads them as the
				// fields, which are held back; spelled so they would be
				// checked chunk by chunk (fourth attack pass C4)
				return false, faults.New(faults.UpstreamError, "the upstream sent %q for %s, which the response guardrails cannot hold back", k, f)
			}
		}
		keep = keep || d.GetRole() != ""
		if s := d.GetText(); s != "" {
			if err := g.push(g.channel(idx, chanContent, 0), s); err != nil {
				return false, err
			}
		}
		for _, p := range d.GetParts().GetParts() {
			if p.GetType() == "text" && p.GetText() != "" {
				c := g.channel(idx, chanContent, 0)
				if err := g.push(c, p.GetText()); err != nil {
					return false, err
				}
				out := c.out
				p.Text, c.out, c.hit = &out, "", false
			}
		}
		if s, ok := jsonText(d.GetExtraFields()["reasoning_content"]); ok && s != "" {
			if err := g.push(g.channel(idx, chanReasoning, 0), s); err != nil {
				return false, err
			}
		}
		if s, ok := jsonText(d.GetExtraFields()["refusal"]); ok && s != "" {
			if err := g.push(g.channel(idx, chanRefusal, 0), s); err != nil {
				return false, err
			}
		}
		if raw, ok := d.GetExtraFields()["reasoning"]; ok && g.reasoningShapes(idx, raw) {
			// a string, then an object (or the reverse): two channels
			// for one field, whose flush would overwrite one with the
			// other (third attack pass B17)
			return false, faults.New(faults.UpstreamError, "the upstream sent reasoning for choice %d as a string and as an object, which the response guardrails cannot hold back", idx)
		}
		if s, ok := jsonText(d.GetExtraFields()["reasoning"]); ok && s != "" {
			if err := g.push(g.channel(idx, chanReasoningAlt, 0), s); err != nil {
				return false, err
			}
		}
		// The delta's other fields (a legacy function_call, audio…),
		// chunk by chunk: a match split across two chunks of them is not
		// seen (the channels above hold back; these do not).
		for k, v := range d.GetExtraFields() {
			switch k {
			case "reasoning_content", "refusal", "tool_calls":
				continue
			case "reasoning":
				if _, ok := jsonText(v); ok {
					continue // a string: its channel holds it back
				}
			}
			if sp := leafFor(k, false, v); sp != nil && g.sc != nil {
				if err := g.leafField(idx, sp, d.ExtraFields, k); err != nil {
					return false, err
				}
				continue
			}
			r, err := g.field(v)
			if err != nil {
				return false, err
			}
			if r != v {
				d.ExtraFields[k] = r
			}
		}
		raw, hasTools := d.GetExtraFields()["tool_calls"]
		args = args[:0]
		if hasTools {
			var perr error
			if args, perr = deltaCalls(raw, args); perr != nil {
				// Not OpenAI's shape: its arguments cannot join their
				// channel's hold-back, and checked alone, chunk by
				// chunk, a key split across this chunk and the next
				// passed whole (attack pass). The stream ends here, its
				// chunk unsent.
				return false, faults.Wrap(faults.UpstreamError, perr, "the upstream sent tool_calls of another shape than OpenAI's, which the response guardrails cannot hold back")
			} else if raw, err = g.callStrings(raw, args); err != nil {
				return false, err
			} else if raw != d.ExtraFields["tool_calls"] {
				d.ExtraFields["tool_calls"] = raw
				args, _ = deltaCalls(raw, args[:0])
			}
			for _, a := range args {
				c := g.channel(idx, chanTool, a.Index)
				if a.Name != "" {
					c.name = a.Name
				}
				if a.Start >= 0 {
					if err := g.push(c, a.Arguments); err != nil {
						return false, err
					}
				}
				if a.Other {
					keep = true // the call's id or name must go out
				}
			}
		}
		if err := g.endChoice(idx, choice.FinishReason != nil); err != nil {
			return false, err
		}
		g.write(idx, d, raw, args)
		g.writeLeaves(idx, &d.ExtraFields, &choice.ExtraFields)
	}
	if before && !keep && !hasContent(ch) {
		return true, nil
	}
	return false, nil
}

// unindexed is the channel of a stream delta's tool calls that carry no
// "index" (OpenAI always sends one; some compatible upstreams do not).
// They are one channel, in the order they come: a client keys a missing
// index alike (openai-node accumulates tool_calls[undefined]), so an
// entry's position, which differs from chunk to chunk, would split what
// the client joins (second attack pass A12).
const unindexed = -1

// deltaCalls is [toolcalls.Parse] for a stream delta: a call without an
// index gets [unindexed], not its position.
func deltaCalls(raw string, dst []toolcalls.Call) ([]toolcalls.Call, error) {
	n := len(dst)
	dst, err := toolcalls.Parse(raw, dst)
	for i := n; i < len(dst); i++ {
		if dst[i].Unindexed {
			dst[i].Index = unindexed
		}
	}
	return dst, err
}

// reasoningShapes reports whether raw, a delta's reasoning for choice
// idx, has another shape than the reasoning held so far: a string after
// an object's channel, or an object after the string's.
func (g *answerGuard) reasoningShapes(idx int32, raw string) bool {
	_, isString := jsonText(raw)
	isObject := leafFor("reasoning", false, raw) != nil
	for _, c := range g.chans {
		if c.choice != idx {
			continue
		}
		if isString && c.kind == chanLeaf && c.leaf.field == "reasoning" || isObject && c.kind == chanReasoningAlt {
			return true
		}
	}
	return false
}

// heldSpelling is the held-back delta field that k spells in another
// case, "" when it spells none (or the field itself).
func heldSpelling(k string) string {
	return otherSpelling(k, "content", "refusal", "reasoning_content", "reasoning", "tool_calls")
}

// otherSpelling is the member of fields that k spells in another case,
// "" when it spells none (or the member itself).
func otherSpelling(k string, fields ...string) string {
	for _, f := range fields {
		if k != f && strings.EqualFold(k, f) {
			return f
		}
	}
	return ""
}

// endChoice ends a choice's part of a chunk: past maxChannels the stream
// is refused; at its finish_reason (finished) its channels are flushed.
func (g *answerGuard) endChoice(idx int32, finished bool) error {
	if len(g.chans) > maxChannels {
		return errTooManyChannels()
	}
	if finished {
		g.finished = append(g.finished, idx)
		return g.flushChoice(idx)
	}
	return nil
}

// flushChoice flushes every channel of choice idx (its finish_reason).
func (g *answerGuard) flushChoice(idx int32) error {
	for _, c := range g.chans {
		if c.choice == idx {
			if err := g.flush(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// pending reports whether a channel of choice idx has text to write:
// a leaf channel of the choice itself with choiceLeaves, any other
// otherwise.
func (g *answerGuard) pending(idx int32, choiceLeaves bool) bool {
	for _, c := range g.chans {
		if c.choice == idx && c.hit && (c.kind == chanLeaf && c.leaf.choice) == choiceLeaves {
			return true
		}
	}
	return false
}

// deltaHasText reports whether d carries text a channel holds back:
// content, text parts, reasoning, a refusal, tool calls or a held-back
// field ([leafSpecs]).
func deltaHasText(d *flexwayv1.ChatMessage) bool {
	if d.GetText() != "" || len(d.GetParts().GetParts()) > 0 || leafAfterFinish(d.GetExtraFields(), false) {
		return true
	}
	for _, f := range [...]string{"reasoning_content", "reasoning", "refusal", "tool_calls"} {
		if v, ok := d.GetExtraFields()[f]; ok && v != "null" && v != `""` && v != "[]" {
			return true
		}
	}
	return false
}

// write sets the delta's text fields of choice idx to what its channels
// released (c.out), raw and args being its tool_calls as received.
func (g *answerGuard) write(idx int32, d *flexwayv1.ChatMessage, raw string, args []toolcalls.Call) {
	var toolTexts []string
	var extra []string
	for _, c := range g.chans {
		if c.choice != idx || !c.hit || c.kind == chanLeaf {
			continue // leaf channels: writeLeaves
		}
		switch c.kind {
		case chanContent:
			if c.out == "" && d.GetText() == "" {
				break
			}
			if t, ok := d.Content.(*flexwayv1.ChatMessage_Text); ok {
				t.Text = c.out // the chunk's own wrapper: no allocation
			} else if d.GetParts() == nil {
				d.Content = &flexwayv1.ChatMessage_Text{Text: c.out}
			} else if c.out != "" {
				out := c.out
				d.GetParts().Parts = append(d.GetParts().Parts, &flexwayv1.ContentPart{Type: "text", Text: &out})
			}
		case chanReasoning, chanRefusal, chanReasoningAlt:
			f := channelField(c.kind)
			if d.ExtraFields == nil {
				d.ExtraFields = map[string]string{}
			}
			if _, ok := d.ExtraFields[f]; ok || c.out != "" {
				d.ExtraFields[f] = quote(c.out)
			}
		case chanTool:
			// Every entry of this call in the delta went through the
			// channel (a delta may carry two with one index: the name's,
			// then the first arguments): what it released goes in the
			// first, the others are emptied, so no entry's arguments go
			// out unread.
			i := -1
			for j, a := range args {
				if a.Index != c.tool || a.Start < 0 {
					continue
				}
				if toolTexts == nil {
					toolTexts = make([]string, len(args))
					for j := range args {
						toolTexts[j] = args[j].Arguments
					}
				}
				if i < 0 {
					i = j
					toolTexts[j] = c.out
				} else {
					toolTexts[j] = ""
				}
			}
			if i < 0 && c.out != "" {
				index := ""
				if c.tool != unindexed {
					index = `"index":` + strconv.Itoa(c.tool) + ","
				}
				extra = append(extra, `{`+index+`"function":{"arguments":`+quote(c.out)+`}}`)
			}
		}
		c.out, c.hit = "", false
	}
	if toolTexts != nil {
		raw = toolcalls.Splice(raw, args, toolTexts)
	}
	if len(extra) > 0 {
		if raw == "" || raw == "null" {
			raw = "[" + strings.Join(extra, ",") + "]"
		} else {
			raw = strings.TrimRight(raw, " \t\r\n")
			raw = raw[:len(raw)-1] + "," + strings.Join(extra, ",") + "]"
			if strings.HasPrefix(strings.TrimLeft(raw[1:], " \t\r\n"), ",") {
				raw = "[" + strings.TrimLeft(raw[1:], " \t\r\n")[1:]
			}
		}
	}
	if toolTexts != nil || len(extra) > 0 {
		if d.ExtraFields == nil {
			d.ExtraFields = map[string]string{}
		}
		d.ExtraFields["tool_calls"] = raw
	}
}

// end flushes every channel not yet flushed (a stream that ended without
// a choice's finish_reason): the chunk carrying what they held, or nil.
func (g *answerGuard) end() (*flexwayv1.ChatCompletionChunk, error) {
	// the chunk built here carries no string of the last chunk's fields
	// (their spans are of that chunk: writing into them panicked, third
	// attack pass B2)
	g.occ = g.occ[:0]
	var out *flexwayv1.ChatCompletionChunk
	for _, c := range g.chans {
		if c.done {
			continue
		}
		if err := g.flush(c); err != nil {
			return nil, err
		}
		if !c.hit {
			continue
		}
		if out == nil {
			l := g.last
			out = &flexwayv1.ChatCompletionChunk{Id: l.GetId(), Object: l.GetObject(), Created: l.GetCreated(), Model: l.GetModel()}
		}
		var choice *flexwayv1.ChatCompletionChunkChoice
		for _, ch := range out.Choices {
			if ch.Index == c.choice {
				choice = ch
			}
		}
		if choice == nil {
			choice = &flexwayv1.ChatCompletionChunkChoice{Index: c.choice, Delta: &flexwayv1.ChatMessage{}}
			out.Choices = append(out.Choices, choice)
		}
		g.write(c.choice, choice.Delta, "", nil)
		g.writeLeaves(c.choice, &choice.Delta.ExtraFields, &choice.ExtraFields)
	}
	return out, nil
}

// streamTexts are a buffered stream's final texts for the whole rules;
// a replacement rewrites the buffered chunks.
func (g *answerGuard) streamTexts() []answerText {
	var texts []answerText
	for _, c := range g.chans {
		loc := "choices[" + strconv.Itoa(int(c.choice)) + "].message."
		t := answerText{text: c.all.String()}
		switch c.kind {
		case chanContent:
			t.loc, t.content = loc+"content", true
		case chanReasoning, chanRefusal, chanReasoningAlt:
			t.loc = loc + channelField(c.kind)
		case chanTool:
			t.loc, t.isTool, t.tool = loc+"tool_calls["+strconv.Itoa(c.tool)+"].function.arguments", true, c.name
		case chanLeaf:
			t.loc = leafLoc(c)
		}
		t.set = func(s string) { g.replace(c, s) }
		texts = append(texts, t)
	}
	if g.schema == nil {
		return texts
	}
	// With a schema to meet, a choice that streamed no text and called no
	// tool is judged too (as ""): an empty answer does not meet it.
	judged := map[int32]bool{}
	for _, c := range g.chans {
		if c.kind == chanContent || c.kind == chanTool {
			judged[c.choice] = true
		}
	}
	for _, ch := range g.ordered {
		for _, choice := range ch.GetChoices() {
			if i := choice.GetIndex(); !judged[i] {
				judged[i] = true
				texts = append(texts, answerText{loc: "choices[" + strconv.Itoa(int(i)) + "].message.content", content: true, set: func(string) {}})
			}
		}
	}
	return texts
}

// replace sets channel c's text in the buffered chunks to s: the first
// chunk that carries it gets s whole, the others nothing.
func (g *answerGuard) replace(c *guardChannel, s string) {
	if c.kind == chanLeaf {
		g.replaceLeaf(c, s)
		return
	}
	first := true
	for _, ch := range g.ordered {
		for _, choice := range ch.GetChoices() {
			if choice.GetIndex() != c.choice || choice.GetDelta() == nil {
				continue
			}
			d := choice.Delta
			var carried bool
			switch c.kind {
			case chanContent:
				carried = d.GetText() != "" || (first && d.GetParts() == nil && (choice.FinishReason != nil))
				if d.GetText() != "" {
					if first {
						d.Content = &flexwayv1.ChatMessage_Text{Text: s}
					} else {
						d.Content = &flexwayv1.ChatMessage_Text{Text: ""}
					}
				}
			case chanReasoning, chanRefusal, chanReasoningAlt:
				f := channelField(c.kind)
				if v, ok := jsonText(d.GetExtraFields()[f]); ok && v != "" {
					carried = true
					if first {
						d.ExtraFields[f] = quote(s)
					} else {
						d.ExtraFields[f] = `""`
					}
				}
			case chanTool:
				raw, ok := d.GetExtraFields()["tool_calls"]
				if !ok {
					continue
				}
				args, _ := deltaCalls(raw, nil)
				ts := make([]string, len(args))
				for j, a := range args {
					ts[j] = a.Arguments
					if a.Index == c.tool && a.Start >= 0 {
						carried = true
						if first {
							ts[j] = s
						} else {
							ts[j] = ""
						}
					}
				}
				d.ExtraFields["tool_calls"] = toolcalls.Splice(raw, args, ts)
			}
			if carried {
				first = false
			}
		}
	}
}

// release ends a buffered stream: the whole rules judge the final answer,
// then every chunk buffered is returned to be sent (or the refusal).
func (g *answerGuard) release() ([]*flexwayv1.ChatCompletionChunk, error) {
	if err := g.checkWhole(g.streamTexts()); err != nil {
		return nil, err
	}
	return g.ordered, nil
}
