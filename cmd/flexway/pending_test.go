package main

import (
	"strings"
	"testing"

	"github.com/flexway/flexway/server/config"
)

// TestNotYetEnforcedNamesReferenceFeatures: the reference configuration
// uses every feature, and this build enforces them all: no note.
func TestNotYetEnforcedNamesReferenceFeatures(t *testing.T) {
	for k, v := range map[string]string{
		"FLEXWAY_ADMIN_KEY": "a", "GLOBEX_KEY": "g", "MAIN_TOKEN": "m",
		"CHEAP_KEY": "c", "PEER_KEY": "p", "FLEXWAY_AUDIT_KEY": "h",
	} {
		t.Setenv(k, v)
	}
	cfg, _, err := config.Load("../../testdata/config/compat/reference.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(notYetEnforced(cfg), "\n")
	for _, enforced := range []string{"ai.budget", "ai.vision", "circuit_breaker", "ai.grpc", "kind: grpc", "audit"} {
		if strings.Contains(got, enforced) {
			t.Errorf("%s is enforced, yet noted as not:\n%s", enforced, got)
		}
	}
	if got != "" {
		t.Errorf("every feature of the reference is built, yet notes say:\n%s", got)
	}
}

// TestExampleConfigValidates: the configuration make run starts loads,
// builds and has no warning.
func TestExampleConfigValidates(t *testing.T) {
	t.Setenv("FLEXWAY_ADMIN_KEY", "sk-flexway-admin-demo")
	var out strings.Builder
	if err := validate("../../examples/flexway.yaml", &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "warning:") || !strings.Contains(out.String(), "ok (0 warnings") {
		t.Errorf("warnings:\n%s", out.String())
	}
}

// TestNotYetEnforcedSaysNothingOfRelaysOrTLS: server.tls and kind: relay
// backends (identity_headers, metering, client TLS) are enforced: the
// compatibility files using them get no note about them.
func TestNotYetEnforcedSaysNothingOfRelaysOrTLS(t *testing.T) {
	for k, v := range map[string]string{"HQ_RELAY_KEY": "h", "PARTNER_RELAY_KEY": "p", "DIRECT_KEY": "d"} {
		t.Setenv(k, v)
	}
	for _, file := range []string{"relay-upstream.yaml", "server-tls.yaml"} {
		cfg, _, err := config.Load("../../testdata/config/compat/" + file)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(notYetEnforced(cfg), "\n")
		for _, bad := range []string{"tls", "relay", "identity", "metering"} {
			if strings.Contains(got, bad) {
				t.Errorf("%s: a note mentions %q:\n%s", file, bad, got)
			}
		}
	}
}
