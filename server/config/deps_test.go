package config_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsOnlyStdAndYAML guards the dependency direction: server/config
// imports none of the packages it configures (routing, budget, backends,
// audit, telemetry read a *Config, not the reverse), and nothing but the
// standard library, go.yaml.in/yaml/v3, the arithmetic of server/money and
// the token-file rules of server/tokenfile.
func TestImportsOnlyStdAndYAML(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(path, "/")
			// server/money is a leaf of pure arithmetic that configures
			// nothing; it is shared so that config and the gRPC proxy
			// convert euros alike. server/tokenfile is a leaf too: config
			// warns about a token file by the rules the backends read it by.
			if path != "go.yaml.in/yaml/v3" && path != "github.com/flexway/flexway/server/money" && path != "github.com/flexway/flexway/server/tokenfile" && strings.Contains(first, ".") {
				t.Errorf("%s imports %s: server/config may import only the standard library, go.yaml.in/yaml/v3, server/money and server/tokenfile, never a package it configures", name, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source file checked")
	}
}
