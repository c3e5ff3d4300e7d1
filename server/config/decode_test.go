package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flexway/flexway/server/config"
)

// base is a valid configuration that the tests below extend; lines matter:
// the tests name them.
const base = `server:
  http: 127.0.0.1:8080
identity:
  api_keys:
    - name: a
      key_sha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
      tenant: acme
ai:
  backends:
    main:
      url: https://llm.example.com/v1
`

// writeConfig writes content to flexway.yaml in a new directory and
// returns its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flexway.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// loadProblems loads content and returns the errors (as Problems) and the
// warnings; it fails the test on an error that is not Problems.
func loadProblems(t *testing.T, content string) (path string, errs, warnings config.Problems) {
	t.Helper()
	path = writeConfig(t, content)
	cfg, warnings, err := config.Load(path)
	if err == nil {
		if cfg == nil {
			t.Fatal("Load returned neither a Config nor an error")
		}
		return path, nil, warnings
	}
	if cfg != nil {
		t.Errorf("Load returned a Config with an error")
	}
	if !errors.As(err, &errs) {
		t.Fatalf("Load error is %T, want config.Problems: %v", err, err)
	}
	return path, errs, warnings
}

func TestLoadUnknownKey(t *testing.T) {
	tests := []struct {
		name     string
		content  string
		wantLine int
		wantPath string
		wantText string // Error() after "file:line: "
	}{
		{
			name:     "top level",
			content:  base + "telemetri: {prometheus: true}\n",
			wantLine: 12, wantPath: "telemetri",
			wantText: "unknown key telemetri (did you mean telemetry?)",
		},
		{
			name:     "nested in a map of backends",
			content:  base + "      timeuot: 30s\n",
			wantLine: 12, wantPath: "ai.backends.main.timeuot",
			wantText: "unknown key ai.backends.main.timeuot (did you mean timeout?)",
		},
		{
			name:     "deep in a map of backends",
			content:  base + "      circuit_breaker:\n        failures: 3\n        open: 10s\n",
			wantLine: 14, wantPath: "ai.backends.main.circuit_breaker.open",
			wantText: "unknown key ai.backends.main.circuit_breaker.open",
		},
		{
			name: "in a list item",
			content: strings.Replace(base, "      tenant: acme\n",
				"      tenant: acme\n    - name: b\n      key: env:B_KEY\n      tennant: globex\n", 1),
			wantLine: 10, wantPath: "identity.api_keys[1].tennant",
			wantText: "unknown key identity.api_keys[1].tennant (did you mean tenant?)",
		},
		{
			name:     "in a map within a map",
			content:  base + "  tenants:\n    acme:\n      agents:\n        bot:\n          budget: {eur_per_day: 5}\n",
			wantLine: 16, wantPath: "ai.tenants.acme.agents.bot.budget.eur_per_day",
			wantText: "unknown key ai.tenants.acme.agents.bot.budget.eur_per_day",
		},
		{
			name:     "under a quoted map key",
			content:  base + "    my.backend:\n      url: https://x.example.com\n      modles: [a]\n",
			wantLine: 14, wantPath: `ai.backends["my.backend"].modles`,
			wantText: `unknown key ai.backends["my.backend"].modles (did you mean models?)`,
		},
		{
			name:     "brought in by a merge key",
			content:  base + "    other:\n      <<: {url: https://y.example.com, retries: 3}\n",
			wantLine: 13, wantPath: "ai.backends.other.retries",
			wantText: "unknown key ai.backends.other.retries",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("B_KEY", "b")
			path, errs, _ := loadProblems(t, tt.content)
			p := findProblem(t, errs, tt.wantPath)
			if !errors.Is(p, config.ErrUnknownKey) {
				t.Errorf("errors.Is(%v, ErrUnknownKey) = false", p)
			}
			if p.Line != tt.wantLine {
				t.Errorf("line = %d, want %d", p.Line, tt.wantLine)
			}
			want := path + ":" + strconv.Itoa(tt.wantLine) + ": " + tt.wantText
			if got := p.Error(); got != want {
				t.Errorf("Error() =\n  %s\nwant\n  %s", got, want)
			}
		})
	}
}

// findProblem returns the problem at key path, failing the test if none.
func findProblem(t *testing.T, ps config.Problems, path string) config.Problem {
	t.Helper()
	for _, p := range ps {
		if p.Path == path {
			return p
		}
	}
	t.Fatalf("no problem at %s; got:\n%v", path, ps)
	return config.Problem{}
}

func TestLoadReportsEveryError(t *testing.T) {
	content := base +
		"      timeout: fast\n" + // 12: does not decode
		"      fallback: [nowhere]\n" + // 13: names no backend
		"      auth: {type: bearer, secret: hunter2}\n" + // 14: inline secret
		"      retries: 3\n" // 15: unknown key
	_, errs, _ := loadProblems(t, content)
	want := []struct {
		line int
		path string
		text string
	}{
		{12, "ai.backends.main.timeout", `invalid duration "fast"`},
		{13, "ai.backends.main.fallback[0]", `no backend "nowhere"`},
		{14, "ai.backends.main.auth.secret", "secrets are references: env:NAME or file:PATH"},
		{15, "ai.backends.main.retries", "unknown key"},
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(errs), len(want), errs)
	}
	for i, w := range want {
		p := errs[i]
		if p.Line != w.line || p.Path != w.path || !strings.Contains(p.Error(), w.text) {
			t.Errorf("problem %d = %v (line %d, path %s), want line %d, path %s, containing %q",
				i, p, p.Line, p.Path, w.line, w.path, w.text)
		}
	}
	if strings.Contains(errs.Error(), "hunter2") {
		t.Errorf("an inline secret's value was printed: %v", errs)
	}
}

func TestLoadDecodeErrors(t *testing.T) {
	tests := []struct {
		name     string
		content  string
		wantPath string
		wantLine int
		wantText string
	}{
		{
			name:     "integer expected",
			content:  base + "      circuit_breaker: {failures: many}\n",
			wantPath: "ai.backends.main.circuit_breaker.failures", wantLine: 12,
			wantText: `expected an integer, got "many"`,
		},
		{
			name:     "boolean expected",
			content:  base + "      external: maybe\n",
			wantPath: "ai.backends.main.external", wantLine: 12,
			wantText: `expected true or false, got "maybe"`,
		},
		{
			name:     "list expected",
			content:  base + "      models: large-1\n",
			wantPath: "ai.backends.main.models", wantLine: 12,
			wantText: `expected a list, got "large-1"`,
		},
		{
			name:     "mapping expected",
			content:  base + "  tenants: [acme]\n",
			wantPath: "ai.tenants", wantLine: 12,
			wantText: "expected a mapping, got a list",
		},
		{
			name:     "string expected",
			content:  base + "      default_model: {name: x}\n",
			wantPath: "ai.backends.main.default_model", wantLine: 12,
			wantText: "expected a string, got a mapping",
		},
		{
			name:     "duplicate key",
			content:  base + "      url: https://other.example.com/v1\n",
			wantPath: "ai.backends.main.url", wantLine: 12,
			wantText: "duplicate key (first at line 11)",
		},
		{
			name:     "size without a known unit",
			content:  base + "  vision: {max_image_bytes: 8mb}\n",
			wantPath: "ai.vision.max_image_bytes", wantLine: 12,
			wantText: `invalid size "8mb"`,
		},
		{
			name:     "duration without a unit",
			content:  base + "      idle_timeout: 30\n",
			wantPath: "ai.backends.main.idle_timeout", wantLine: 12,
			wantText: `invalid duration "30"`,
		},
		{
			name:     "explicit zero duration is not replaced by the default",
			content:  base + "      timeout: 0s\n",
			wantPath: "ai.backends.main.timeout", wantLine: 12,
			wantText: "must be positive",
		},
		{
			name:     "explicit zero soft is not replaced by the default",
			content:  base + "  budget: {soft: 0}\n",
			wantPath: "ai.budget.soft", wantLine: 12,
			wantText: "0 is not in (0, 1)",
		},
		{
			name:     "a fractional token cap is not truncated",
			content:  base + "  budget: {default: {tokens_per_day: 30.7}}\n",
			wantPath: "ai.budget.default.tokens_per_day", wantLine: 12,
			wantText: `expected an integer, got "30.7"`,
		},
		{
			name:     "an exponent is not an integer",
			content:  base + "  budget: {default: {tokens_per_month: 1e3}}\n",
			wantPath: "ai.budget.default.tokens_per_month", wantLine: 12,
			wantText: `expected an integer, got "1e3"`,
		},
		{
			name:     "unknown version",
			content:  "version: 2\n" + base,
			wantPath: "version", wantLine: 1,
			wantText: "unsupported version 2",
		},
		{
			name:     "explicit version 0",
			content:  "version: 0\n" + base,
			wantPath: "version", wantLine: 1,
			wantText: "unsupported version 0",
		},
		{
			name:     "unknown backend kind",
			content:  base + "      kind: openapi\n",
			wantPath: "ai.backends.main.kind", wantLine: 12,
			wantText: `unknown kind "openapi"`,
		},
		{
			name:     "missing key reported at its enclosing key's line",
			content:  base + "    my.backend: {models: [a]}\n",
			wantPath: `ai.backends["my.backend"].url`, wantLine: 12,
			wantText: "required",
		},
		{
			name:     "YAML syntax",
			content:  "server: {}\n\tai: {}\n",
			wantPath: "", wantLine: 2,
			wantText: "found character that cannot start any token",
		},
		{
			name:     "not a mapping",
			content:  "flexway\n",
			wantPath: "", wantLine: 1,
			wantText: `expected a mapping, got "flexway"`,
		},
		{
			name:     "a second document",
			content:  base + "---\nserver: {}\n",
			wantPath: "", wantLine: 12,
			wantText: "a second YAML document",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs, _ := loadProblems(t, tt.content)
			p := findProblem(t, errs, tt.wantPath)
			if p.Line != tt.wantLine {
				t.Errorf("line = %d, want %d (%v)", p.Line, tt.wantLine, p)
			}
			if !strings.Contains(p.Error(), tt.wantText) {
				t.Errorf("Error() = %q, want it to contain %q", p.Error(), tt.wantText)
			}
		})
	}
}

// A value that does not decode is reported once: validation does not add
// "required" for the zero it left behind.
func TestLoadDecodeErrorNotRepeatedByValidation(t *testing.T) {
	content := strings.Replace(base, "url: https://llm.example.com/v1", "url: [https://llm.example.com/v1]", 1)
	_, errs, _ := loadProblems(t, content)
	if len(errs) != 1 || errs[0].Path != "ai.backends.main.url" || !strings.Contains(errs[0].Error(), "expected a string") {
		t.Errorf("got %v, want one problem: ai.backends.main.url: expected a string", errs)
	}
}

func TestLoadEmptyFile(t *testing.T) {
	_, errs, _ := loadProblems(t, "# nothing yet\n")
	if len(errs) != 1 || errs[0].Path != "ai.backends" {
		t.Errorf("got %v, want one problem at ai.backends", errs)
	}
}

func TestLoadMergeKeys(t *testing.T) {
	content := base +
		"    cheap:\n" +
		"      <<: &remote {url: https://cheap.example.com/v1, timeout: 10s}\n" +
		"      timeout: 20s\n" +
		"    other:\n" +
		"      <<: *remote\n"
	cfg, _, err := config.Load(writeConfig(t, content+"  backend: main\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		backend string
		wantURL string
		wantDur string
	}{
		{name: "written key wins over merged", backend: "cheap", wantURL: "https://cheap.example.com/v1", wantDur: "20s"},
		{name: "merged via alias", backend: "other", wantURL: "https://cheap.example.com/v1", wantDur: "10s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := cfg.AI.Backends[tt.backend]
			if b.URL != tt.wantURL || b.Timeout.String() != tt.wantDur {
				t.Errorf("%s: url %q timeout %v, want %q %s", tt.backend, b.URL, b.Timeout, tt.wantURL, tt.wantDur)
			}
		})
	}
}

func TestLoadResolvesRelativePaths(t *testing.T) {
	content := `server:
  tls: {cert_file: tls/cert.pem, key_file: /etc/flexway/key.pem, client_ca_file: ./tls/ca.pem}
  admin_key: file:secrets/admin
identity:
  api_keys:
    - {name: a, key: file:secrets/a, tenant: acme}
ai:
  budget:
    store: {path: data/ledger.db}
  grpc:
    descriptor_sets: [protos/ocr.binpb, /abs/other.binpb]
  backends:
    main:
      url: https://llm.example.com/v1
      auth: {type: token_file, path: tokens/main}
      tls: {ca_file: ca.pem, cert_file: client.pem, key_file: client-key.pem}
audit:
  path: "-"
`
	path := writeConfig(t, content)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(filepath.Join(dir, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, value := range map[string]string{"admin": "admin-value\n", "a": "a-value"} {
		if err := os.WriteFile(filepath.Join(dir, "secrets", name), []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	main := cfg.AI.Backends["main"]
	in := func(p ...string) string { return filepath.Join(append([]string{dir}, p...)...) }
	runChecks(t, []check{
		{"server.tls.cert_file", cfg.Server.TLS.CertFile, in("tls", "cert.pem")},
		{"server.tls.key_file (absolute)", cfg.Server.TLS.KeyFile, "/etc/flexway/key.pem"},
		{"server.tls.client_ca_file", cfg.Server.TLS.ClientCAFile, in("tls", "ca.pem")},
		{"server.admin_key ref", cfg.Server.AdminKey.Ref(), "file:" + in("secrets", "admin")},
		{"server.admin_key value", resolve(t, cfg.Server.AdminKey), "admin-value"},
		{"api_keys[0] hash", cfg.Identity.APIKeys[0].Hash(), sha256Of("a-value")},
		{"store.path", cfg.AI.Budget.Store.Path, in("data", "ledger.db")},
		{"descriptor_sets", cfg.AI.GRPC.DescriptorSets, []string{in("protos", "ocr.binpb"), "/abs/other.binpb"}},
		{"token_file path (never read at load)", main.Auth.Path, in("tokens", "main")},
		{"backend tls", main.TLS, config.BackendTLS{CAFile: in("ca.pem"), CertFile: in("client.pem"), KeyFile: in("client-key.pem")}},
		{"audit.path - stays stdout", cfg.Audit.Path, "-"},
	})
}

// TestLoadBackendURLCredentials: the URL and tls problems the backend would
// also refuse when built are reported by Load, all at once, each with its
// line and key path, and without repeating the credentials.
func TestLoadBackendURLCredentials(t *testing.T) {
	content := base +
		"    azure:\n" + // 12
		"      url: https://res.example.com/openai?api-version=2024-10-21&api-key=Q-SECRET\n" + // 13
		"    onprem:\n" + // 14
		"      url: http://svc:pw-SECRET@10.0.0.5:8000/v1\n" + // 15
		"      external: false\n" + // 16
		"      tls: {ca_file: ca.pem}\n" + // 17
		"  backend: main\n"
	path, errs, _ := loadProblems(t, content)
	want := []string{
		path + `:13: ai.backends.azure.url: query parameter "api-key": credentials may not be written in a URL query; use auth (type header or bearer) with a secret reference`,
		path + ":15: ai.backends.onprem.url: user info is not allowed in a URL; use auth",
		path + ":17: ai.backends.onprem.tls: tls needs an https url",
	}
	if got := errs.Error(); got != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if strings.Contains(errs.Error(), "SECRET") {
		t.Errorf("a credential of a URL was printed: %v", errs)
	}
}

// TestLoadTokenFileWarning: a token_file that cannot be opened at load is a
// warning at its path (it may be mounted later), never an error; one that
// can is not reported.
func TestLoadTokenFileWarning(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		path     string
		wantText string // empty: no warning
	}{
		{name: "readable", path: token},
		{name: "missing", path: filepath.Join(dir, "absent"), wantText: "the token file cannot be read now (stat " + filepath.Join(dir, "absent") + ": no such file or directory)"},
		{name: "a directory", path: dir, wantText: dir + " is not a regular file"},
		{name: "relative, resolved beside the file", path: "tokens/main", wantText: "tokens/main: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			content := base + "      auth: {type: token_file, path: " + tt.path + "}\n" // 12
			path, errs, warnings := loadProblems(t, content)
			if errs != nil {
				t.Fatalf("a token file made Load fail: %v", errs)
			}
			if tt.wantText == "" {
				if len(warnings) != 0 {
					t.Errorf("warnings = %v, want none", warnings)
				}
				return
			}
			if len(warnings) != 1 {
				t.Fatalf("warnings = %v, want one", warnings)
			}
			w := warnings[0]
			prefix := path + ":12: warning: ai.backends.main.auth.path: "
			if got := w.Error(); !strings.HasPrefix(got, prefix) || !strings.Contains(got, tt.wantText) {
				t.Errorf("warning =\n  %s\nwant it to start with %q and contain %q", got, prefix, tt.wantText)
			}
		})
	}
}

// TestLoadRedisStorePath: a redis store's own files (state and journal)
// default to ./flexway-data/redis-ledger beside the configuration, and a
// path given is resolved like the embedded ledger's.
func TestLoadRedisStorePath(t *testing.T) {
	for _, tc := range []struct{ store, want string }{
		{"{type: redis, url: \"redis://127.0.0.1:6379/0\"}", filepath.Join("flexway-data", "redis-ledger")},
		{"{type: redis, url: \"redis://127.0.0.1:6379/0\", path: state/replica-a}", filepath.Join("state", "replica-a")},
	} {
		path := writeConfig(t, base+"  budget:\n    store: "+tc.store+"\n")
		cfg, _, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := cfg.AI.Budget.Store.Path, filepath.Join(filepath.Dir(path), tc.want); got != want {
			t.Errorf("store %s: path %q, want %q", tc.store, got, want)
		}
	}
}
