package config_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexway/flexway/server/config"
)

// TestLoadGuardrailErrors: every error of a guardrails section, with its
// key path and line.
func TestLoadGuardrailErrors(t *testing.T) {
	rule := func(r string) string {
		return "    - name: p\n      guardrails:\n        prompt:\n          - " + r + "\n"
	}
	resp := func(r string) string {
		return "    - name: p\n      guardrails:\n        response:\n          - " + r + "\n"
	}
	const at = "ai.policies[0].guardrails.prompt[0]"
	runPolicyCases(t, []policyCase{
		{"no type", rule("{action: deny}"), at + ".type", "33: " + at + ".type: required: pii, secrets, injection, banned, regex, json_schema or webhook"},
		{"unknown type", rule("{type: toxicity, action: deny}"), at + ".type", `33: ` + at + `.type: unknown rule type "toxicity": want pii, secrets, injection, banned, regex, json_schema or webhook`},
		{"no action on a text rule", rule("{type: secrets}"), at + ".action", "33: " + at + ".action: required: deny, redact or log"},
		{"unknown action", rule("{type: secrets, action: block}"), at + ".action", `33: ` + at + `.action: unknown action "block": want deny, redact or log`},
		{"json_schema cannot redact", resp("{type: json_schema, action: redact}"), "ai.policies[0].guardrails.response[0].action", "33: ai.policies[0].guardrails.response[0].action: a json_schema rule cannot redact: want deny or log"},
		{"unknown entity", rule("{type: pii, entities: [email, ssn], action: redact}"), at + ".entities[1]", `33: ` + at + `.entities[1]: unknown entity "ssn": want one of email, phone, credit_card, iban, ipv4, ipv6`},
		{"banned without words", rule("{type: banned, action: deny}"), at + ".words", "33: " + at + ".words: required: the words or phrases to refuse"},
		{"bad regex", rule("{type: regex, pattern: 'a(b', action: deny}"), at + ".pattern", "33: " + at + ".pattern: not an RE2 pattern: error parsing regexp: missing closing ): `a(b`"},
		{"look-around is not RE2", rule("{type: regex, pattern: '(?!x)y', action: deny}"), at + ".pattern", "33: " + at + ".pattern: not an RE2 pattern: error parsing regexp: invalid or unsupported Perl syntax: `(?!`"},
		{"regex matching the empty string", rule("{type: regex, pattern: 'a*', action: redact}"), at + ".pattern", `33: ` + at + `.pattern: "a*" matches the empty string: it would match everywhere`},
		{"key the type does not read", rule("{type: secrets, words: [x], action: deny}"), at + ".words", "33: " + at + ".words: a secrets rule does not read words"},
		{"schema on a response json_schema", resp("{type: json_schema, schema: {type: object}}"), "ai.policies[0].guardrails.response[0].schema", "33: ai.policies[0].guardrails.response[0].schema: a response json_schema rule checks the request's response_format schema: it takes no schema"},
		{"prompt json_schema without schema", rule("{type: json_schema}"), at + ".schema", "33: " + at + ".schema: required: the schema the last user message's content must be valid against (inline, or file:<path>)"},
		{"schema neither mapping nor file:", rule("{type: json_schema, schema: object}"), at + ".schema", `33: ` + at + `.schema: expected a JSON Schema mapping or file:<path>, got "object"`},
		{"webhook without url", rule("{type: webhook}"), at + ".url", "33: " + at + ".url: required: the http or https URL the texts are POSTed to"},
		{"webhook url not http", rule("{type: webhook, url: 'ftp://x/check'}"), at + ".url", `33: ` + at + `.url: "ftp://x/check" is not an http or https URL`},
		{"webhook url with user info", rule("{type: webhook, url: 'https://u:pw@x/check'}"), at + ".url", "33: " + at + ".url: holds user info: put no credential in a webhook's URL (it is named in logs)"},
		{"webhook on_error", rule("{type: webhook, url: 'http://x/check', on_error: retry}"), at + ".on_error", `33: ` + at + `.on_error: unknown on_error "retry": want deny or allow`},
		{"empty guardrails", "    - name: p\n      guardrails: {}\n", "ai.policies[0].guardrails", "31: warning: ai.policies[0].guardrails: has no prompt or response rule: it checks nothing"},
	})
}

// TestLoadPromptLogging: enabled prompt logging is a warning naming the
// policy and its (absolute) file, include_sensitive a second one; enabled
// without a path is an error; disabled is silent.
func TestLoadPromptLogging(t *testing.T) {
	path, errs, warnings := loadProblems(t, policyBase+`    - name: p
      match: {tenant: acme}
      prompt_logging: {enabled: true, path: prompts.jsonl, include_sensitive: true}
`)
	if len(errs) != 0 || len(warnings) != 2 {
		t.Fatalf("errors %v, warnings %v; want 2 warnings", errs, warnings)
	}
	dir := filepath.Dir(path)
	want := `policy "p" collects prompts and answers of its calls in ` + filepath.Join(dir, "prompts.jsonl") + ": make sure that is allowed, and that the file is protected"
	if warnings[0].Path != "ai.policies[0].prompt_logging" || warnings[0].Err.Error() != want {
		t.Errorf("warning = %s: %v; want ai.policies[0].prompt_logging: %s", warnings[0].Path, warnings[0].Err, want)
	}
	if warnings[1].Path != "ai.policies[0].prompt_logging.include_sensitive" {
		t.Errorf("second warning at %s", warnings[1].Path)
	}

	_, errs, _ = loadProblems(t, policyBase+"    - name: p\n      prompt_logging: {enabled: true}\n")
	if len(errs) != 1 || errs[0].Path != "ai.policies[0].prompt_logging.path" {
		t.Errorf("errors %v; want one at ai.policies[0].prompt_logging.path", errs)
	}
	_, errs, warnings = loadProblems(t, policyBase+"    - name: p\n      prompt_logging: {enabled: false}\n")
	if len(errs) != 0 || len(warnings) != 0 {
		t.Errorf("disabled: errors %v, warnings %v; want none", errs, warnings)
	}
}

// TestLoadGuardrailValues: a guardrails section loads with its values,
// defaults (json_schema and webhook deny, webhook 1s and on_error deny),
// an inline schema as JSON and a file: schema resolved against the
// configuration's directory (and read: a missing or non-JSON file is an
// error).
func TestLoadGuardrailValues(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "order.json"), []byte(`{"type":"object","required":["sku"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "flexway.yaml")
	src := policyBase + `    - name: p
      guardrails:
        prompt:
          - {type: pii, entities: [credit_card], action: redact}
          - {type: json_schema, schema: "file:order.json"}
          - {type: json_schema, schema: {type: object, properties: {n: {type: integer}}}}
          - {type: webhook, url: "http://127.0.0.1:9/check", external: false}
        response:
          - {type: json_schema}
          - {type: webhook, url: "http://127.0.0.1:9/check", timeout: 250ms, on_error: allow, action: log}
`
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Load(cfgPath)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	g := cfg.AI.Policies[0].Guardrails
	var inline any
	if err := json.Unmarshal(g.Prompt[2].Schema.JSON, &inline); err != nil {
		t.Fatalf("inline schema: %v", err)
	}
	runChecks(t, []check{
		{"pii", []any{g.Prompt[0].Type, g.Prompt[0].Entities, g.Prompt[0].Action}, []any{"pii", []string{"credit_card"}, "redact"}},
		{"file schema", []any{g.Prompt[1].Schema.File, g.Prompt[1].Action}, []any{filepath.Join(dir, "order.json"), "deny"}},
		{"inline schema", inline, map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}}},
		{"webhook defaults", []any{g.Prompt[3].Action, g.Prompt[3].Timeout.Std(), g.Prompt[3].OnError, g.Prompt[3].IsExternal()}, []any{"deny", time.Second, "deny", false}},
		{"response json_schema", []any{g.Response[0].Action, g.Response[0].Schema == nil}, []any{"deny", true}},
		{"response webhook", []any{g.Response[1].Action, g.Response[1].Timeout.Std(), g.Response[1].OnError, g.Response[1].IsExternal()}, []any{"log", 250 * time.Millisecond, "allow", true}},
	})

	if err := os.WriteFile(filepath.Join(dir, "order.json"), []byte(`{not json`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := config.Load(cfgPath); err == nil {
		t.Errorf("Load with a schema file that is not JSON: no error")
	}
}

// TestLoadPromptLogPathsRefused: a prompt log path that is the audit's
// file, the ledger's (or a file named after it), standard output or a
// device is a load error; they loaded before (attack pass: prompts landed
// in audit.jsonl and in ledger.db).
func TestLoadPromptLogPathsRefused(t *testing.T) {
	for name, p := range map[string]string{
		"audit":   "audit.jsonl",
		"ledger":  "ledger.db",
		"journal": "ledger.db.journal.0000000000000001",
		"stdout":  "-",
		"device":  "/dev/stdout",
	} {
		t.Run(name, func(t *testing.T) {
			src := policyBase + "    - name: p\n      prompt_logging: {enabled: true, path: " + p + "}\n" +
				"  budget:\n    store: {type: embedded, path: ledger.db}\naudit:\n  path: audit.jsonl\n"
			_, errs, _ := loadProblems(t, src)
			if len(errs) != 1 || errs[0].Path != "ai.policies[0].prompt_logging.path" {
				t.Fatalf("errors %v; want one at ai.policies[0].prompt_logging.path", errs)
			}
		})
	}
}

// TestLoadPromptLoggingTie: two policies of one level that may select the
// same call and disagree on prompt_logging are a warning naming the one
// that decides (attack pass: declaration order decided, silently); a
// more specific policy turning it off is no tie.
func TestLoadPromptLoggingTie(t *testing.T) {
	_, errs, warnings := loadProblems(t, policyBase+`    - name: on
      match: {tenant: acme}
      prompt_logging: {enabled: true, path: p.jsonl}
    - name: off
      match: {tenant: acme, operation: ai.chatCompletions}
      prompt_logging: {enabled: false}
    - name: quiet-bot
      match: {tenant: acme, agent: support-bot}
      prompt_logging: {enabled: false}
`)
	var ties []string
	for _, w := range warnings {
		if strings.Contains(w.Err.Error(), "decides") {
			ties = append(ties, w.Path+": "+w.Err.Error())
		}
	}
	want := `ai.policies[1].prompt_logging: policy "off" (enabled: false) and policy "on" (enabled: true) are of one level and may select the same call: for it the first declared, "on", decides`
	if len(errs) != 0 || len(ties) != 1 || ties[0] != want {
		t.Fatalf("errors %v, ties %q; want %s", errs, ties, want)
	}
}
