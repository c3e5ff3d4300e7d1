package alias_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/routing/alias"
)

// TestReferenceAliases loads the reference's ai.aliases through
// config.Load, as serve does, compiles them and resolves each.
func TestReferenceAliases(t *testing.T) {
	cfg, warnings, err := config.Load(filepath.Join("testdata", "reference-aliases.yaml"))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Load = %v, %v", warnings, err)
	}
	tab := compileTable(t, cfg)
	s := alias.Subject{Tenant: "acme", Agent: "support-bot", Rand: fixed(95)}
	route := func(name string) alias.Route {
		r, ok := tab.Resolve(name, s)
		if !ok {
			t.Fatalf("%s: not resolved", name)
		}
		return r
	}
	tests := []struct {
		alias string
		want  []alias.Target
	}{
		{"fast", []alias.Target{{"cheap", "mini-1", "0"}, {"main", "small-1", "1"}}},
		{"smart", []alias.Target{{"claude", "claude-sonnet-4-5", "1"}, {"main", "large-1", "0"}}}, // draw 95 of [0, 100)
		{"thrifty", []alias.Target{{"cheap", "mini-1", "1"}, {"main", "small-1", "0"}}},           // 0.75 € before 12.50 €
		{"triage", []alias.Target{{"main", "large-1", "above"}}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, route(tt.alias).Targets); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.alias, diff)
		}
	}
	if r := route("reviewer"); r.Arm != wantABArm("reviewer", "support-bot") {
		t.Errorf("reviewer arm = %q, want %q", r.Arm, wantABArm("reviewer", "support-bot"))
	}
	c := route("triage").Classifier
	if c == nil || c.External || c.Timeout != 150*time.Millisecond || c.Threshold != 0.5 || c.Below.Targets[0].Backend != "cheap" {
		t.Errorf("triage classifier = %+v", c)
	}
}
