package server

import (
	"slices"
	"strconv"
	"strings"

	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/jsonstring"
)

// chanLeaf is a text channel of a streamed field Flexway does not model
// but a client concatenates across chunks ([leafSpecs]): held back like
// content, so a key split across two chunks of it is found whole.
const chanLeaf uint8 = chanReasoningAlt + 1

// leafSpec is one streamed field whose strings are increments of a text,
// by the name upstreams give it. Its other strings (a name, a type, a
// signature) are checked chunk by chunk, like any unmodelled field.
type leafSpec struct {
	// field is the delta's member (the choice's, with choice).
	field  string
	choice bool
	// open is the first byte of the shapes held back: '"' (the field is
	// the text), '{' (an object with members), '[' (an array of objects,
	// each with an integer "index", the entry's identity across chunks,
	// as OpenRouter sends reasoning_details; entries without one are one
	// text). Another shape is checked
	// chunk by chunk.
	open byte
	// members are the text members of the object or of each entry.
	members []string
	// json: the text is JSON (a function's arguments), read through an
	// unescaper before the holder like a tool call's.
	json bool
}

// leafSpecs are the fields held back besides content, reasoning_content,
// reasoning, refusal and tool_calls (second attack pass A11):
//   - a choice's "text": the legacy completions stream's answer;
//   - the delta's "function_call": the legacy (pre-tools) function call,
//     whose arguments the OpenAI SDKs still accumulate;
//   - the delta's "reasoning" when it is an object ({"text": …});
//   - the delta's "reasoning_details": OpenRouter's reasoning stream,
//     entries with "text" (reasoning.text) or "summary"
//     (reasoning.summary), identified by their "index".
var leafSpecs = []*leafSpec{
	{field: "text", choice: true, open: '"', members: []string{""}},
	{field: "function_call", open: '{', members: []string{"arguments"}, json: true},
	{field: "reasoning", open: '{', members: []string{"text"}},
	{field: "reasoning_details", open: '[', members: []string{"text", "summary"}},
}

// leafFor is the spec of fields[name] when it is held back (its shape is
// the spec's), else nil.
func leafFor(name string, choice bool, raw string) *leafSpec {
	for _, sp := range leafSpecs {
		if strings.EqualFold(sp.field, name) && sp.choice == choice {
			if r := strings.TrimLeft(raw, " \t\r\n"); r != "" && r[0] == sp.open {
				return sp
			}
			return nil
		}
	}
	return nil
}

// leafOcc is one string of a held-back field in the chunk being
// rewritten: its channel, and where the field is.
type leafOcc struct {
	c      *guardChannel
	fields map[string]string
	key    string // the field's name as the chunk spells it
	v      jsonstring.Value
}

// leafChannel returns the channel of (choice, spec, entry, member).
func (g *answerGuard) leafChannel(choice int32, sp *leafSpec, entry int, member string) *guardChannel {
	return g.channelOf(chanKey{choice: choice, kind: chanLeaf, tool: entry, leaf: sp, member: member}, sp.json)
}

// leafField pushes the text strings of fields[sp.field] to their channels
// and checks its other strings chunk by chunk (redactions spliced in
// now; the channels' releases are written by writeLeaves). Array entries
// without an integer index share one channel, in the order they come
// (what a client that concatenates them reads). A denial is returned.
func (g *answerGuard) leafField(choice int32, sp *leafSpec, fields map[string]string, key string) error {
	for k, v := range fields {
		if k != key && leafFor(k, sp.choice, v) == sp {
			// "function_call" and "Function_call" in one delta: which one
			// a client reads is its own choice
			return faults.New(faults.UpstreamError, "the upstream sent %s twice in one chunk, spelled %q and %q, which the response guardrails cannot hold back", sp.field, key, k)
		}
	}
	raw := fields[key]
	vs, err := jsonstring.Values(raw)
	if err != nil {
		r, err := g.text(raw)
		if err == nil && r != raw {
			fields[key] = r
		}
		return err
	}
	var texts []int // starts of the text strings
	type slot struct {
		entry  string // the entry's path
		member string
	}
	var seen []slot
	for _, v := range vs {
		entry, member, ok := leafPath(sp, v, vs)
		if !ok {
			continue
		}
		if entry == badIndex {
			return faults.New(faults.UpstreamError, "the upstream sent a %s entry whose index is no integer from 0 to 65536, which the response guardrails cannot hold back", sp.field)
		}
		// one text per member: a duplicated key ("text" twice, "Text" and
		// "text") is read first-wins by some clients and last-wins by
		// others, so no hold-back can be what all of them read
		sl := slot{v.Path[:max(0, strings.LastIndexByte(v.Path, '.'))], member}
		if slices.Contains(seen, sl) {
			return faults.New(faults.UpstreamError, "the upstream sent a %s with its %s twice, which the response guardrails cannot hold back", sp.field, member)
		}
		seen = append(seen, sl)
		c := g.leafChannel(choice, sp, entry, member)
		if t, ok := typeOf(vs, v); ok {
			c.name = t
		}
		if err := g.push(c, v.Text); err != nil {
			return err
		}
		g.occ = append(g.occ, leafOcc{c: c, fields: fields, key: key, v: v})
		texts = append(texts, v.Start)
	}
	r, err := g.values(raw, vs, texts)
	if err != nil {
		return err
	}
	if r != raw {
		// spans of the text strings moved: find them again
		fields[key] = r
		nv, _ := jsonstring.Values(r)
		k := len(g.occ) - len(texts)
		for _, v := range nv {
			if _, _, ok := leafPath(sp, v, nv); ok {
				g.occ[k].v = v
				k++
			}
		}
	}
	return nil
}

// leafPath reports whether v is a text string of sp, with its entry (the
// entry's "index", -1 when it has none; 0 for a field that is not an
// array) and member.
func leafPath(sp *leafSpec, v jsonstring.Value, vs []jsonstring.Value) (int, string, bool) {
	if v.Key || v.Number {
		return 0, "", false
	}
	switch sp.open {
	case '"':
		return 0, "", v.Path == ""
	case '{':
		for _, m := range sp.members {
			// member names in any case: encoding/json clients match them
			// so (third attack pass B3)
			if len(v.Path) > 1 && v.Path[0] == '.' && strings.EqualFold(v.Path[1:], m) {
				return 0, m, true
			}
		}
		return 0, "", false
	}
	// "[k].member"
	if len(v.Path) < 4 || v.Path[0] != '[' {
		return 0, "", false
	}
	end := strings.IndexByte(v.Path, ']')
	if end < 0 || end+1 >= len(v.Path) || v.Path[end+1] != '.' {
		return 0, "", false
	}
	k := slices.IndexFunc(sp.members, func(m string) bool { return strings.EqualFold(v.Path[end+2:], m) })
	if k < 0 {
		return 0, "", false
	}
	entry := -1
	prefix := v.Path[:end+1]
	for _, w := range vs {
		if w.Key || len(w.Path) != len(prefix)+len(".index") || !strings.HasPrefix(w.Path, prefix) || !strings.EqualFold(w.Path[len(prefix):], ".index") {
			continue
		}
		i, err := strconv.Atoi(w.Text)
		if !w.Number || err != nil || i < 0 || i > 1<<16 {
			// "1.0" or "1", which a client may key as entry 1: no channel
			// can say which entry it joins (third attack pass B4)
			return badIndex, sp.members[k], true
		}
		entry = i
	}
	return entry, sp.members[k], true
}

// badIndex is leafPath's entry for an entry whose index is no integer
// from 0 to 65536.
const badIndex = -2

// typeOf is the "type" string of the array entry v is in, if any.
func typeOf(vs []jsonstring.Value, v jsonstring.Value) (string, bool) {
	if !strings.HasPrefix(v.Path, "[") {
		return "", false
	}
	p := v.Path[:strings.IndexByte(v.Path, ']')+1] + ".type"
	for _, w := range vs {
		if w.Path == p && !w.Key && !w.Number {
			return w.Text, true
		}
	}
	return "", false
}

// writeLeaves writes what the leaf channels of choice released into the
// chunk: into the first string of the channel in it (the others emptied,
// so no text goes out unread), else as a member or entry added to the
// field (a flush at the finish). delta and cf are the choice's delta's
// and the choice's fields.
func (g *answerGuard) writeLeaves(idx int32, delta, cf *map[string]string) {
	type edit struct {
		vs    []jsonstring.Value
		texts []string
	}
	edits := map[*map[string]string]map[string]*edit{}
	// the chunk's strings by channel, once
	var byChan map[*guardChannel][]int
	for k, o := range g.occ {
		if byChan == nil {
			byChan = map[*guardChannel][]int{}
		}
		byChan[o.c] = append(byChan[o.c], k)
	}
	for _, c := range g.chans {
		if c.kind != chanLeaf || c.choice != idx || !c.hit {
			continue
		}
		fp := delta
		if c.leaf.choice {
			fp = cf
		}
		if fp == nil {
			continue // no delta: pending made one for any text to write
		}
		first := true
		for _, k := range byChan[c] {
			o := g.occ[k]
			if edits[fp] == nil {
				edits[fp] = map[string]*edit{}
			}
			e := edits[fp][o.key]
			if e == nil {
				e = &edit{}
				edits[fp][o.key] = e
			}
			t := ""
			if first {
				t, first = c.out, false
			}
			e.vs, e.texts = append(e.vs, o.v), append(e.texts, t)
		}
		if first && c.out != "" {
			if *fp == nil {
				*fp = map[string]string{}
			}
			(*fp)[c.leaf.field] = addLeaf(c, (*fp)[c.leaf.field])
		}
		c.out, c.hit = "", false
	}
	for fp, byField := range edits {
		for f, e := range byField {
			// in raw's order for Splice
			ord := make([]int, len(e.vs))
			for i := range ord {
				ord[i] = i
			}
			slices.SortFunc(ord, func(a, b int) int { return e.vs[a].Start - e.vs[b].Start })
			vs, ts := make([]jsonstring.Value, len(ord)), make([]string, len(ord))
			for i, k := range ord {
				vs[i], ts[i] = e.vs[k], e.texts[k]
			}
			(*fp)[f] = jsonstring.Splice((*fp)[f], vs, ts)
		}
	}
}

// addLeaf returns raw (the field as the chunk carries it, "" when absent)
// with c's released text added: the text itself, a member of the
// object, or an entry of the array (with the entry's type and index).
func addLeaf(c *guardChannel, raw string) string {
	sp := c.leaf
	q := quote(c.out)
	switch sp.open {
	case '"':
		return q
	case '{':
		member := strconv.Quote(c.member) + ":" + q
		r := strings.TrimRight(raw, " \t\r\n")
		if !strings.HasPrefix(strings.TrimLeft(r, " \t\r\n"), "{") {
			return "{" + member + "}"
		}
		body := strings.TrimSpace(r[strings.IndexByte(r, '{')+1 : len(r)-1])
		if body == "" {
			return "{" + member + "}"
		}
		return r[:len(r)-1] + "," + member + "}"
	}
	var entry string
	if c.tool >= 0 {
		entry = `"index":` + strconv.Itoa(c.tool) + ","
	}
	if c.name != "" {
		entry += `"type":` + quote(c.name) + ","
	}
	entry = "{" + entry + strconv.Quote(c.member) + ":" + q + "}"
	r := strings.TrimSpace(raw)
	if !strings.HasPrefix(r, "[") {
		return "[" + entry + "]"
	}
	if strings.TrimSpace(r[1:len(r)-1]) == "" {
		return "[" + entry + "]"
	}
	return r[:len(r)-1] + "," + entry + "]"
}

// leafLoc is where a leaf channel's text is in the final answer, for a
// webhook or a schema error.
func leafLoc(c *guardChannel) string {
	loc := "choices[" + strconv.Itoa(int(c.choice)) + "]."
	if !c.leaf.choice {
		loc += "message."
	}
	loc += c.leaf.field
	if c.leaf.open == '[' && c.tool >= 0 {
		loc += "[" + strconv.Itoa(c.tool) + "]"
	}
	if c.member != "" {
		loc += "." + c.member
	}
	return loc
}

// replaceLeaf sets leaf channel c's text in the buffered chunks to s: the
// first string of it gets s whole, the others nothing.
func (g *answerGuard) replaceLeaf(c *guardChannel, s string) {
	first := true
	for _, ch := range g.ordered {
		for _, choice := range ch.GetChoices() {
			if choice.GetIndex() != c.choice {
				continue
			}
			fields := choice.GetExtraFields()
			if !c.leaf.choice {
				fields = choice.GetDelta().GetExtraFields()
			}
			key := ""
			for k, v := range fields {
				if leafFor(k, c.leaf.choice, v) == c.leaf {
					key = k
				}
			}
			raw, ok := fields[key]
			if !ok {
				continue
			}
			vs, err := jsonstring.Values(raw)
			if err != nil {
				continue
			}
			var hit []jsonstring.Value
			var ts []string
			for _, v := range vs {
				entry, member, ok := leafPath(c.leaf, v, vs)
				if !ok || entry != c.tool || member != c.member {
					continue
				}
				t := ""
				if first {
					t, first = s, false
				}
				hit, ts = append(hit, v), append(ts, t)
			}
			if hit != nil {
				fields[key] = jsonstring.Splice(raw, hit, ts)
			}
		}
	}
}

// leafAfterFinish reports whether fields (a choice's or its delta's)
// carry text of a held-back field: after the choice's finish_reason it
// would start a fresh hold-back.
func leafAfterFinish(fields map[string]string, choice bool) bool {
	for k, raw := range fields {
		sp := leafFor(k, choice, raw)
		if sp == nil {
			continue
		}
		vs, err := jsonstring.Values(raw)
		if err != nil {
			return true
		}
		for _, v := range vs {
			if _, _, ok := leafPath(sp, v, vs); ok && v.Text != "" {
				return true
			}
		}
	}
	return false
}
