package config_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/flexway/flexway/server/config"
)

func TestParseSecret(t *testing.T) {
	tests := []struct {
		name       string
		ref        string
		wantInline bool
	}{
		{name: "env", ref: "env:MAIN_TOKEN"},
		{name: "file", ref: "file:/run/secrets/main"},
		{name: "relative file", ref: "file:secrets/main"},
		{name: "empty is no secret", ref: ""},
		{name: "inline value", ref: "sk-live-1234", wantInline: true},
		{name: "env without a name", ref: "env:", wantInline: true},
		{name: "env with a bad name", ref: "env:1TOKEN", wantInline: true},
		{name: "env with a value", ref: "env:TOKEN=abc", wantInline: true},
		{name: "file without a path", ref: "file:", wantInline: true},
		{name: "prefix is case sensitive", ref: "ENV:TOKEN", wantInline: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := config.ParseSecret(tt.ref)
			if got := errors.Is(err, config.ErrInlineSecret); got != tt.wantInline {
				t.Fatalf("ParseSecret(%q) error = %v, want inline error %v", tt.ref, err, tt.wantInline)
			}
			if err != nil {
				if strings.Contains(err.Error(), "sk-live") {
					t.Errorf("error repeats the inline value: %v", err)
				}
				return
			}
			if s.Ref() != tt.ref || s.IsZero() != (tt.ref == "") {
				t.Errorf("Ref() = %q, IsZero() = %v", s.Ref(), s.IsZero())
			}
		})
	}
}

func TestSecretResolve(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Setenv("FLEXWAY_TEST_SET", "s3cret")
	t.Setenv("FLEXWAY_TEST_EMPTY", "")
	tests := []struct {
		name    string
		ref     string
		want    string
		wantErr string // substring; "" for success
	}{
		{name: "env", ref: "env:FLEXWAY_TEST_SET", want: "s3cret"},
		{name: "env not set", ref: "env:FLEXWAY_TEST_UNSET", wantErr: "env FLEXWAY_TEST_UNSET is not set"},
		{name: "env empty", ref: "env:FLEXWAY_TEST_EMPTY", wantErr: "env FLEXWAY_TEST_EMPTY is empty"},
		{name: "file", ref: "file:" + write("plain", "tok"), want: "tok"},
		{name: "file trailing newline trimmed", ref: "file:" + write("nl", "tok\n"), want: "tok"},
		{name: "file trailing CRLF trimmed", ref: "file:" + write("crlf", "tok\r\n"), want: "tok"},
		{name: "file inner whitespace kept", ref: "file:" + write("inner", " t o k\n"), want: " t o k"},
		{name: "file missing", ref: "file:" + filepath.Join(dir, "missing"), wantErr: "no such file or directory"},
		{name: "file empty", ref: "file:" + write("empty", "\n"), wantErr: "is empty"},
		{name: "zero secret", ref: "", wantErr: "no secret configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := config.ParseSecret(tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Resolve()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, config.ErrSecretUnavailable) {
					t.Fatalf("Resolve() = %q, %v; want an ErrSecretUnavailable containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Resolve() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// afterKey returns base with text inserted after the first API key, where
// either another list item or another identity key can go.
func afterKey(text string) string {
	return strings.Replace(base, "      tenant: acme\n", "      tenant: acme\n"+text, 1)
}

// inServer returns base with text added to the server block.
func inServer(text string) string {
	return strings.Replace(base, "  http: 127.0.0.1:8080\n", "  http: 127.0.0.1:8080\n"+text, 1)
}

func TestLoadSecrets(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		content  string
		wantPath string // with wantText "", the file must load
		wantText string
	}{
		{
			name:     "api key env not set names the key path",
			content:  afterKey("    - {name: b, key: env:GLOBEX_KEY, tenant: globex}\n"),
			wantPath: "identity.api_keys[1].key",
			wantText: "flexway.yaml:8: identity.api_keys[1].key: env GLOBEX_KEY is not set",
		},
		{
			name:     "inline api key refused",
			content:  afterKey("    - {name: b, key: sk-live-1234, tenant: globex}\n"),
			wantPath: "identity.api_keys[1].key",
			wantText: "identity.api_keys[1].key: secrets are references: env:NAME or file:PATH",
		},
		{
			name:     "inline number refused",
			content:  inServer("  admin_key: 12345\n"),
			wantPath: "server.admin_key",
			wantText: "server.admin_key: secrets are references",
		},
		{
			name:     "backend auth secret resolved at load",
			content:  base + "      auth: {type: bearer, secret: env:MAIN_TOKEN}\n",
			wantPath: "ai.backends.main.auth.secret",
			wantText: "env MAIN_TOKEN is not set",
		},
		{
			name:     "audit hash key resolved at load",
			content:  base + "audit: {hash_key: file:missing-audit-key}\n",
			wantPath: "audit.hash_key",
			wantText: "missing-audit-key: no such file or directory",
		},
		{
			name:     "relay key resolved at load",
			content:  afterKey("  relays: [{name: edge, key: env:EDGE_KEY, identity_headers: {tenant: Flexway-Tenant}}]\n"),
			wantPath: "identity.relays[0].key",
			wantText: "env EDGE_KEY is not set",
		},
		{
			name: "two api keys with the same value",
			env:  map[string]string{"KEY_A": "same", "KEY_B": "same"},
			content: afterKey("    - {name: b, key: env:KEY_A, tenant: acme}\n" +
				"    - {name: c, key: env:KEY_B, tenant: acme}\n"),
			wantPath: "identity.api_keys[2]",
			wantText: "identity.api_keys[2]: same key as identity.api_keys[1]",
		},
		{
			name:     "api key by reference equal to another's key_sha256",
			env:      map[string]string{"KEY_P": "password"}, // base's key_sha256 is SHA-256("password")
			content:  afterKey("    - {name: b, key: env:KEY_P, tenant: acme}\n"),
			wantPath: "identity.api_keys[1]",
			wantText: "same key as identity.api_keys[0]",
		},
		{
			name:    "token file never read at load",
			content: base + "      auth: {type: token_file, path: /nonexistent/token}\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, errs, _ := loadProblems(t, tt.content)
			if tt.wantText == "" {
				if errs != nil {
					t.Fatalf("Load: %v", errs)
				}
				return
			}
			p := findProblem(t, errs, tt.wantPath)
			if !strings.Contains(p.Error(), tt.wantText) {
				t.Errorf("Error() = %q, want it to contain %q", p.Error(), tt.wantText)
			}
			if strings.Contains(errs.Error(), "sk-live") || strings.Contains(errs.Error(), "12345") {
				t.Errorf("an inline secret's value was printed: %v", errs)
			}
		})
	}
}

// A loaded Secret holds its value; no way of printing a Config shows it.
func TestSecretNeverPrintsValue(t *testing.T) {
	t.Setenv("FLEXWAY_ADMIN_KEY", "VALUE-admin-0001")
	t.Setenv("MAIN_TOKEN", "VALUE-main-0002")
	content := strings.Replace(base, "  http: 127.0.0.1:8080\n", "  http: 127.0.0.1:8080\n  admin_key: env:FLEXWAY_ADMIN_KEY\n", 1) +
		"      auth: {type: bearer, secret: env:MAIN_TOKEN}\n"
	cfg, _, err := config.Load(writeConfig(t, content))
	if err != nil {
		t.Fatal(err)
	}
	if v := resolve(t, cfg.Server.AdminKey); v != "VALUE-admin-0001" {
		t.Fatalf("admin key = %q", v)
	}
	jsonText, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	yamlText, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		text string
	}{
		{name: "%v", text: fmt.Sprintf("%v", *cfg)},
		{name: "%+v", text: fmt.Sprintf("%+v", *cfg)},
		{name: "%#v", text: fmt.Sprintf("%#v", *cfg)},
		{name: "%s of the secret", text: fmt.Sprintf("%s", cfg.Server.AdminKey)},
		{name: "json", text: string(jsonText)},
		{name: "yaml", text: string(yamlText)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.Contains(tt.text, "VALUE-") {
				t.Errorf("printed a secret's value:\n%s", tt.text)
			}
			if !strings.Contains(tt.text, "env:FLEXWAY_ADMIN_KEY") {
				t.Errorf("the reference is missing:\n%s", tt.text)
			}
		})
	}
}
