package guardrail

import "testing"

// TestFindSecretsGluedAfter: a provider key followed by letters, digits of
// another alphabet or `_` is still the key (attack: "AKIA…EXAMPLEnever"
// went to the client in a stream).
func TestFindSecretsGluedAfter(t *testing.T) {
	s := allRules(t)
	for _, tc := range []struct{ text, want string }{
		{"key AKIAIOSFODNN7EXAMPLEnever read", "AKIAIOSFODNN7EXAMPLE"},
		{"key AKIAIOSFODNN7EXAMPLE_old", "AKIAIOSFODNN7EXAMPLE"},
		{"tok ghp_abcdefghijklmnopqrstuvwxyz0123456789_old", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"},
	} {
		got := hits(s, tc.text)
		if len(got) != 1 || got[0].text != tc.want || got[0].entity != "secret" {
			t.Errorf("%q: %v, want %q", tc.text, got, tc.want)
		}
	}
}
