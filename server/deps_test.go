package server_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/flexway/flexway"

// TestDependencyDirection guards DESIGN.md's dependency rules: edges depend
// on the core, never the reverse, and the pure packages stay pure.
func TestDependencyDirection(t *testing.T) {
	rules := []struct {
		from string
		to   target
		why  string
	}{
		{"server", dir("transcoder"), "the core never depends on the HTTP front; the front calls the core"},
		{"server", dir("interceptors"), "the core never depends on the interceptors; they fill the call state the core reads"},
		{"server/ledger", dir("server/backends"), "the ledger never calls a model"},
		{"server/routing", dir("server/backends"), "route planning is pure: no network"},
		{"server/config", dir("server/routing"), "config imports none of the packages it configures"},
		{"server/config", dir("server/ledger"), "config imports none of the packages it configures"},
		{"server/config", dir("server/backends"), "config imports none of the packages it configures"},
		{"server/config", dir("server/auditlog"), "config imports none of the packages it configures"},
		{"server/auditlog", dir("server/openaiwire"), "the audit log writes metadata lines, never the OpenAI wire format"},
		{"server/cache", dir("server/config"), "the cache's parts take their settings as Options; config imports none of the packages it configures"},
		{"server/cache", dir("server/backends"), "the cache's parts never call a model (the embedding call is the wiring's)"},
		{"server/cache", pkg("server"), "the cache's parts are domain packages the services package calls"},
		{"interceptors", pkg("server"), "edges import the core's domain packages (server/call, server/metering), never the services package"},
		{"transcoder", pkg("server"), "edges import the core's domain packages (server/call, server/metering), never the services package"},
	}
	cmd := exec.Command("go", "list", "-json=ImportPath,Deps", "../...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for _, r := range rules {
			if !under(rel, r.from) {
				continue
			}
			checked++
			for _, d := range p.Deps {
				if strings.HasPrefix(d, module) && r.to.matches(strings.TrimPrefix(strings.TrimPrefix(d, module), "/")) {
					t.Errorf("%s imports %s: %s", p.ImportPath, d, r.why)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package matched the rules: the test checks nothing")
	}
}

// under reports whether pkg is dir or one of its subpackages.
func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

// target is what a rule forbids importing: one package, or a directory
// (the package there and every subpackage).
type target struct {
	path  string
	exact bool
}

// pkg is the package at path alone, not its subpackages.
func pkg(path string) target { return target{path: path, exact: true} }

// dir is the package at path and its subpackages.
func dir(path string) target { return target{path: path} }

// matches reports whether p, a path relative to the module, is t.
func (t target) matches(p string) bool {
	if t.exact {
		return p == t.path
	}
	return under(p, t.path)
}

// TestRuleMatcher: each kind of rule can fail. An exact rule on the
// services package matches it alone, not its domain packages; a directory
// rule matches the directory and its subpackages, not a name that merely
// begins like it.
func TestRuleMatcher(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pkg  string
		to   target
		want bool
	}{
		{pkg: "server", to: pkg("server"), want: true},
		{pkg: "server/call", to: pkg("server")},
		{pkg: "server/metering", to: pkg("server")},
		{pkg: "server", to: dir("server"), want: true},
		{pkg: "server/call", to: dir("server"), want: true},
		{pkg: "server/openaiwire", to: dir("server/openaiwire"), want: true},
		{pkg: "server/openaiwirex", to: dir("server/openaiwire")},
		{pkg: "transcoder", to: dir("server")},
	}
	for _, tt := range tests {
		if got := tt.to.matches(tt.pkg); got != tt.want {
			t.Errorf("%+v.matches(%q) = %v, want %v", tt.to, tt.pkg, got, tt.want)
		}
	}
}
