package guardrail

import "testing"

// TestFindSecretsGluedAfter: an AWS access key id or a GitHub token
// followed directly by lower-case text or `_` is still the key (found
// while testing a denied stream: "AKIA…EXAMPLEnever" reached the client);
// an id that goes on in the key's own alphabet is a longer id, not a key.
func TestFindSecretsGluedAfter(t *testing.T) {
	s := allRules(t)
	for _, tc := range []struct{ text, want string }{
		{"key AKIAIOSFODNN7EXAMPLEnever read", "AKIAIOSFODNN7EXAMPLE"},
		{"key AKIAIOSFODNN7EXAMPLE_old", "AKIAIOSFODNN7EXAMPLE"},
		{"tok ghp_abcdefghijklmnopqrstuvwxyz0123456789_old", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"},
		{"id AKIAIOSFODNN7EXAMPLE42 is longer", ""},
		{"id AKIAIOSFODNN7EXAMPLEX is longer", ""},
	} {
		got := hits(s, tc.text)
		if tc.want == "" {
			if len(got) != 0 {
				t.Errorf("%q: %v, want no match", tc.text, got)
			}
			continue
		}
		if len(got) != 1 || got[0].text != tc.want || got[0].entity != "secret" {
			t.Errorf("%q: %v, want %q", tc.text, got, tc.want)
		}
	}
}
