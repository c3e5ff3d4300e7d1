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
		from, to, why string
	}{
		{"server", "transcoder", "the core never depends on the HTTP front; the front calls the core"},
		{"server", "interceptors", "the core never depends on the interceptors; they fill the call state the core reads"},
		{"server/ledger", "server/backends", "the ledger never calls a model"},
		{"server/routing", "server/backends", "route planning is pure: no network"},
		{"server/config", "server/routing", "config imports none of the packages it configures"},
		{"server/config", "server/ledger", "config imports none of the packages it configures"},
		{"server/config", "server/backends", "config imports none of the packages it configures"},
		{"server/config", "server/auditlog", "config imports none of the packages it configures"},
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
				if under(strings.TrimPrefix(strings.TrimPrefix(d, module), "/"), r.to) && strings.HasPrefix(d, module) {
					t.Errorf("%s imports %s: %s", p.ImportPath, d, r.why)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package matched the rules: the test checks nothing")
	}
}

func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }
