package config

import (
	"encoding/json"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Guardrails is a policy's guardrails section (ai.policies[].guardrails):
// the rules checked on the prompt, before the call, and on the answer.
// Every matching policy's rules apply; any deny wins.
type Guardrails struct {
	// Prompt rules check every message of the request (every role, text
	// parts, tool call arguments; an embeddings call's input) before
	// anything is sent upstream.
	Prompt []GuardrailRule `yaml:"prompt"`
	// Response rules check the answer; on a stream without releasing a
	// byte a rule may still match.
	Response []GuardrailRule `yaml:"response"`
}

// GuardrailRule is one rule of a guardrails phase.
type GuardrailRule struct {
	// Type is pii, secrets, injection, banned, regex, json_schema or
	// webhook (GuardrailType*).
	Type string `yaml:"type"`
	// Action is deny, redact or log. Required for pii, secrets,
	// injection, banned and regex; json_schema takes deny (the default)
	// or log; a webhook's own answer says deny or replace, and its
	// action, deny (the default) or log, is what a deny answer does.
	Action string `yaml:"action"`
	// Entities are a pii rule's entities: email, phone, credit_card,
	// iban, ipv4, ipv6; absent: all of them.
	Entities []string `yaml:"entities"`
	// Words are a banned rule's words or phrases (required).
	Words []string `yaml:"words"`
	// Phrases are an injection rule's phrases, added to the maintained
	// list.
	Phrases []string `yaml:"phrases"`
	// Pattern is a regex rule's RE2 pattern (required), compiled at load.
	Pattern string `yaml:"pattern"`
	// Schema is a prompt json_schema rule's JSON Schema: inline, or
	// "file:<path>". A response json_schema rule takes none: it checks
	// the request's response_format schema.
	Schema *GuardrailSchema `yaml:"schema"`
	// URL is a webhook rule's http or https URL (required).
	URL string `yaml:"url"`
	// Timeout bounds a webhook's answer; default 1s.
	Timeout Duration `yaml:"timeout"`
	// OnError is a webhook's verdict when it fails to answer (or when a
	// sensitive call's text may not be sent to it): deny (the default) or
	// allow.
	OnError string `yaml:"on_error"`
	// External is false for a webhook inside the organisation: only then
	// does a sensitive call's text go to it. Absent: true.
	External *bool `yaml:"external"`
}

// The guardrail rule types (ai.policies[].guardrails.*[].type).
const (
	GuardrailPII        = "pii"
	GuardrailSecrets    = "secrets"
	GuardrailInjection  = "injection"
	GuardrailBanned     = "banned"
	GuardrailRegex      = "regex"
	GuardrailJSONSchema = "json_schema"
	GuardrailWebhook    = "webhook"
)

// The guardrail actions (ai.policies[].guardrails.*[].action).
const (
	GuardrailDeny   = "deny"
	GuardrailRedact = "redact"
	GuardrailLog    = "log"
)

// PIIEntities are the entities a pii rule may name, in the order a rule
// without entities checks them.
var PIIEntities = []string{"email", "phone", "credit_card", "iban", "ipv4", "ipv6"}

// DefaultWebhookTimeout is a webhook rule's timeout when none is set.
const DefaultWebhookTimeout = Duration(1e9)

// IsExternal reports whether the webhook is external (the default).
func (r GuardrailRule) IsExternal() bool { return r.External == nil || *r.External }

// GuardrailSchema is a json_schema rule's schema: inline (JSON holds it,
// encoded from the YAML value) or from a file (File).
type GuardrailSchema struct {
	// File is the path after "file:", relative to the working directory.
	File string
	// JSON is the inline schema as JSON.
	JSON json.RawMessage
}

// UnmarshalYAML implements [yaml.Unmarshaler]: a "file:<path>" scalar or
// a mapping (the schema itself).
func (s *GuardrailSchema) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		path, ok := strings.CutPrefix(n.Value, "file:")
		if !ok || strings.TrimSpace(path) == "" {
			return fmt.Errorf("expected a JSON Schema mapping or file:<path>, got %q", n.Value)
		}
		s.File = strings.TrimSpace(path)
		return nil
	case yaml.MappingNode:
		var v map[string]any
		if err := n.Decode(&v); err != nil {
			return err
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("the schema is not JSON: %v", err)
		}
		s.JSON = raw
		return nil
	}
	return fmt.Errorf("expected a JSON Schema mapping or file:<path>, got %s", nodeKind(n))
}

// MarshalYAML implements [yaml.Marshaler].
func (s GuardrailSchema) MarshalYAML() (any, error) {
	if s.File != "" {
		return "file:" + s.File, nil
	}
	var v any
	if err := json.Unmarshal(s.JSON, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// PromptLogging is a policy's prompt_logging section: off unless Enabled.
// The most specific matching policy that has the section decides for a
// call.
type PromptLogging struct {
	// Enabled turns the prompt log on for the policy's calls.
	Enabled bool `yaml:"enabled"`
	// Path is the JSON-lines file (required when enabled), created 0600
	// and rotated like the audit.
	Path string `yaml:"path"`
	// IncludeSensitive logs sensitive calls too; false: they are not
	// logged.
	IncludeSensitive bool `yaml:"include_sensitive"`
}
