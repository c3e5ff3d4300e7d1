package guardrail

import (
	"strings"
	"testing"
)

// TestFindGluedBefore: a card or a provider key written straight after
// a letter, `_`, `-`, `=` or a dash run is still found (attack pass:
// card4111…, API_KEY_sk-…, AWS_KEY_AKIA…, tokenghp_…, x-----BEGIN and a
// sixth dash before BEGIN all passed), and so are the key kinds the
// first pass missed (ASIA session keys, github_pat_, ghr_); what only
// looks like a prefix inside a word (risk-assessment-…, a longer
// upper-case id) is not.
func TestFindGluedBefore(t *testing.T) {
	s := allRules(t)
	gh := strings.Repeat("a1B2", 9)
	sk := "sk-proj-Ab3dEf6hIj9lMn2pQr5tUv8xYz1bC4eF7hK0"
	for _, tc := range []struct{ text, want, entity string }{
		{"card4111111111111111 ok", "4111111111111111", EntityCreditCard},
		{"x_4111111111111111 ok", "4111111111111111", EntityCreditCard},
		{"n 4111111111111111abc", "4111111111111111", EntityCreditCard},
		{"n 4111 1111 1111 1111abc", "4111 1111 1111 1111", EntityCreditCard},
		{"cc:card_4111-1111-1111-1111_exp", "4111-1111-1111-1111", EntityCreditCard},
		{"API_KEY_sk-proj-abcdefghijklmnopqrstuvwxyz0123 x", "sk-proj-abcdefghijklmnopqrstuvwxyz0123", "secret"},
		{"--sk-proj-abcdefghijklmnopqrstuvwxyz0123 x", "sk-proj-abcdefghijklmnopqrstuvwxyz0123", "secret"},
		{"token" + sk + " x", sk, "secret"},
		{"AWS_KEY_AKIAIOSFODNN7EXAMPLE x", "AKIAIOSFODNN7EXAMPLE", "secret"},
		{"tokenAKIAIOSFODNN7EXAMPLE x", "AKIAIOSFODNN7EXAMPLE", "secret"},
		{"sts ASIAIOSFODNN7EXAMPLE x", "ASIAIOSFODNN7EXAMPLE", "secret"},
		{"tokenghp_" + gh + " x", "ghp_" + gh, "secret"},
		{"a ghr_" + gh + " x", "ghr_" + gh, "secret"},
		{"a GH_TOKEN=gho_" + gh, "gho_" + gh, "secret"},
		{"pat github_pat_11ABCDEFG0123456789abc_" + strings.Repeat("xY9", 20) + " x", "github_pat_11ABCDEFG0123456789abc_" + strings.Repeat("xY9", 20), "secret"},
		{"slacktokenxoxb-1234567890-abcdefghij x", "xoxb-1234567890-abcdefghij", "secret"},
		{"keyAIzaSyA-1234567890abcdefghijklmnopqrstu x", "AIzaSyA-1234567890abcdefghijklmnopqrstu", "secret"},
		{"tokeneyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl x", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "secret"},
	} {
		got := hits(s, tc.text)
		if len(got) != 1 || got[0].text != tc.want || got[0].entity != tc.entity {
			t.Errorf("%q: %v, want %q (%s)", tc.text, got, tc.want, tc.entity)
		}
	}
	for _, text := range []string{
		"x-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY----- after",
		"------BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY----- after",
		"k=-----BEGIN PRIVATE KEY-----\nMIIE",
	} {
		ms := s.Find(text, nil)
		if len(ms) != 1 || ms[0].Entity != "secret" || strings.Contains(Redacted(text, ms), "MIIE") {
			t.Errorf("%q: %v", text, ms)
		}
	}
	for _, text := range []string{
		"see risk-assessment-framework-for-models-v2 and task-abcdefghijklmnopqrstuvwxyz0123",
		"disk-Q3-report-2024-final-summary-notes ok",
		"id XAKIAIOSFODNN7EXAMPLE and 9AKIAIOSFODNN7EXAMPLE",
		"ts 1733011200000ms and v1733011200000",
		"sha a94111111111111111 and 41111111111111110000abc",
		"x_ghp_short and AIzaSyA-1234567890abcdefghijklmnopqrstuvwxyz",
	} {
		if got := hits(s, text); len(got) != 0 {
			t.Errorf("%q: %v, want none", text, got)
		}
	}
}
