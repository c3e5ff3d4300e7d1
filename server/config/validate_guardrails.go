package config

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// checkGuardrails checks a policy's guardrails section.
//
// Errors: an unknown type; an action other than deny, redact or log, or
// none on a text rule; redact on json_schema or webhook; an unknown pii
// entity; a banned rule without words, or an empty word; a regex rule
// without a pattern, or one RE2 refuses or that matches the empty
// string; a schema on a response json_schema rule, none on a prompt one,
// a schema file that cannot be read or is not JSON; a webhook without an
// http(s) URL, with user info in it, a negative timeout or an on_error
// other than deny or allow; a key that the rule's type does not read.
//
// Warnings: a guardrails section with no rule.
func checkGuardrails(col *collector, path string, g Guardrails) {
	if len(g.Prompt) == 0 && len(g.Response) == 0 {
		col.warnf(path, "has no prompt or response rule: it checks nothing")
	}
	for i, r := range g.Prompt {
		checkGuardrailRule(col, indexPath(path+".prompt", i), r, true)
	}
	for i, r := range g.Response {
		checkGuardrailRule(col, indexPath(path+".response", i), r, false)
	}
}

func checkGuardrailRule(col *collector, path string, r GuardrailRule, prompt bool) {
	text := false
	switch r.Type {
	case GuardrailPII, GuardrailSecrets, GuardrailInjection, GuardrailBanned, GuardrailRegex:
		text = true
	case GuardrailJSONSchema, GuardrailWebhook:
	case "":
		col.errorf(path+".type", "required: pii, secrets, injection, banned, regex, json_schema or webhook")
		return
	default:
		col.errorf(path+".type", "unknown rule type %q: want pii, secrets, injection, banned, regex, json_schema or webhook", r.Type)
		return
	}
	switch r.Action {
	case GuardrailDeny, GuardrailLog:
	case GuardrailRedact:
		if !text {
			col.errorf(path+".action", "a %s rule cannot redact: want deny or log", r.Type)
		}
	case "":
		if text {
			col.errorf(path+".action", "required: deny, redact or log")
		}
	default:
		col.errorf(path+".action", "unknown action %q: want deny, redact or log", r.Action)
	}
	unused := func(key string, set bool) {
		if set {
			col.errorf(path+"."+key, "a %s rule does not read %s", r.Type, key)
		}
	}
	unused("entities", r.Type != GuardrailPII && r.Entities != nil)
	unused("words", r.Type != GuardrailBanned && r.Words != nil)
	unused("phrases", r.Type != GuardrailInjection && r.Phrases != nil)
	unused("pattern", r.Type != GuardrailRegex && r.Pattern != "")
	unused("schema", r.Type != GuardrailJSONSchema && r.Schema != nil)
	notHook := r.Type != GuardrailWebhook
	unused("url", notHook && r.URL != "")
	unused("timeout", notHook && r.Timeout != 0)
	unused("on_error", notHook && r.OnError != "")
	unused("external", notHook && r.External != nil)

	switch r.Type {
	case GuardrailPII:
		for i, e := range r.Entities {
			if !slices.Contains(PIIEntities, e) {
				col.errorf(indexPath(path+".entities", i), "unknown entity %q: want one of %s", e, strings.Join(PIIEntities, ", "))
			}
		}
	case GuardrailBanned:
		if len(r.Words) == 0 {
			col.errorf(path+".words", "required: the words or phrases to refuse")
		}
		for i, w := range r.Words {
			if strings.TrimSpace(w) == "" {
				col.errorf(indexPath(path+".words", i), "empty word")
			}
		}
	case GuardrailInjection:
		for i, w := range r.Phrases {
			if strings.TrimSpace(w) == "" {
				col.errorf(indexPath(path+".phrases", i), "empty phrase")
			}
		}
	case GuardrailRegex:
		if r.Pattern == "" {
			col.errorf(path+".pattern", "required: an RE2 pattern")
			break
		}
		re, err := regexp.Compile(r.Pattern)
		if err != nil {
			col.errorf(path+".pattern", "not an RE2 pattern: %v", err)
		} else if re.MatchString("") {
			col.errorf(path+".pattern", "%q matches the empty string: it would match everywhere", r.Pattern)
		}
	case GuardrailJSONSchema:
		switch {
		case !prompt && r.Schema != nil:
			col.errorf(path+".schema", "a response json_schema rule checks the request's response_format schema: it takes no schema")
		case prompt && r.Schema == nil:
			col.errorf(path+".schema", "required: the schema the last user message's content must be valid against (inline, or file:<path>)")
		case prompt && r.Schema.File != "":
			raw, err := os.ReadFile(r.Schema.File)
			if err != nil {
				col.errorf(path+".schema", "cannot read %s: %v", r.Schema.File, err)
			} else if !json.Valid(raw) {
				col.errorf(path+".schema", "%s is not JSON", r.Schema.File)
			}
		}
	case GuardrailWebhook:
		u, err := url.Parse(r.URL)
		switch {
		case r.URL == "":
			col.errorf(path+".url", "required: the http or https URL the texts are POSTed to")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			col.errorf(path+".url", "%q is not an http or https URL", r.URL)
		case u.User != nil:
			col.errorf(path+".url", "holds user info: put no credential in a webhook's URL (it is named in logs)")
		}
		if r.Timeout < 0 {
			col.errorf(path+".timeout", "must not be negative")
		}
		switch r.OnError {
		case "", GuardrailDeny, "allow":
		default:
			col.errorf(path+".on_error", "unknown on_error %q: want deny or allow", r.OnError)
		}
	}
}

// checkPromptLogging checks a policy's prompt_logging section.
//
// Errors: enabled without a path. Warnings: enabled (prompts are then
// collected), and include_sensitive on top of it.
func checkPromptLogging(col *collector, path, policy string, l PromptLogging) {
	if !l.Enabled {
		return
	}
	if strings.TrimSpace(l.Path) == "" {
		col.errorf(path+".path", "required when enabled: the JSON-lines file the prompts are written to")
	}
	col.warnf(path, "policy %q collects prompts and answers of its calls in %s: make sure that is allowed, and that the file is protected", policy, l.Path)
	if l.IncludeSensitive {
		col.warnf(path+".include_sensitive", "sensitive calls' prompts and answers are collected too")
	}
}

// checkPromptLogPaths refuses a prompt log that would write where it must
// never: the audit's file (prompts are never in the audit), the ledger's
// files (ai.budget.store.path and the files named after it), standard
// output or error, or a device.
func (c *Config) checkPromptLogPaths(col *collector) {
	audit := filepath.Clean(c.Audit.Path)
	store := filepath.Clean(c.AI.Budget.Store.Path)
	for i, p := range c.AI.Policies {
		l := p.PromptLogging
		if l == nil || !l.Enabled || strings.TrimSpace(l.Path) == "" {
			continue
		}
		path := indexPath("ai.policies", i) + ".prompt_logging.path"
		lp := filepath.Clean(l.Path)
		switch {
		case l.Path == "-" || filepath.Base(l.Path) == "-" || strings.HasPrefix(lp, "/dev/") || strings.HasPrefix(lp, "/proc/"):
			col.errorf(path, "%s is not a file: prompts go to their own file, never to standard output, standard error or a device", l.Path)
		case c.Audit.Path != "-" && lp == audit:
			col.errorf(path, "%s is audit.path: prompts are never written to the audit", l.Path)
		case c.AI.Budget.Store.Path != "" && (lp == store || strings.HasPrefix(lp, store+".")):
			col.errorf(path, "%s is the ledger's (ai.budget.store.path %s): a prompt log must have a file of its own", l.Path, c.AI.Budget.Store.Path)
		}
	}
}

// checkLoggingTies warns where two policies of one level that can select
// the same call disagree on prompt_logging: the first declared decides
// for such a call, which the operator may not expect.
func (ai AI) checkLoggingTies(col *collector) {
	for j, b := range ai.Policies {
		if b.PromptLogging == nil {
			continue
		}
		for i := 0; i < j; i++ {
			a := ai.Policies[i]
			if a.PromptLogging == nil || a.PromptLogging.Enabled == b.PromptLogging.Enabled ||
				a.Match.Level() != b.Match.Level() || !overlap(a.Match, b.Match) {
				continue
			}
			col.warnf(indexPath("ai.policies", j)+".prompt_logging",
				"policy %q (enabled: %v) and policy %q (enabled: %v) are of one level and may select the same call: for it the first declared, %q, decides",
				b.Name, b.PromptLogging.Enabled, a.Name, a.PromptLogging.Enabled, a.Name)
			break
		}
	}
}

// overlap reports whether one call can be selected by both matches: no
// field set in both differs.
func overlap(a, b PolicyMatch) bool {
	same := func(x, y string) bool { return x == "" || y == "" || x == y }
	return same(a.Listener, b.Listener) && same(a.Operation, b.Operation) && same(a.Model, b.Model) &&
		same(a.Tenant, b.Tenant) && same(a.Agent, b.Agent)
}
