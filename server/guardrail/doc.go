// Package guardrail finds, in text, what the guardrails of ai.policies look
// for (stages 5 and 13 of DESIGN.md's AI pipeline): personal data (pii:
// email, phone, credit_card, iban, ipv4, ipv6), provider secrets, prompt
// injection phrasings, banned words and operators' RE2 patterns; and
// redacts it. It is pure: no I/O, no configuration types (server/policy
// compiles ai.policies into [Spec]s).
//
// Text is matched after normalisation, so that Unicode tricks do not slip
// through: NFKC (full-width digits become ASCII digits), default-ignorable
// characters (zero-width joiners, soft hyphens) removed; injection and
// banned rules also case-fold, drop combining marks and collapse
// whitespace. Matches are reported as byte spans of the original text.
//
// A [Holder] applies a [Scanner] to a stream of text (one channel of an
// answer: its content, its reasoning, one tool call's arguments) without
// releasing any byte a rule could still match once more text arrives.
//
// Banned words and injection phrases are found with one trie of the
// folded phrases walked only where a word begins (phrases.go), not an
// RE2 alternation: over the same 4 KiB of prose with ten banned words,
// the trie takes 6.4 µs and `\b(?:w1|w2|…)\b` on the folded text 360 µs
// (BenchmarkBanned*, same run, 2-core machine); the ~2,050 expanded
// injection phrasings take 7.4 µs (BenchmarkInjection4KiB). The trie
// replaced an Aho-Corasick automaton that stepped through every byte:
// BenchmarkFind4KiB (pii + secrets + injection + banned) went from 22.6
// to 19.6 µs, and 4 KiB of prose with nothing to find from 15.0 to
// 11.7 µs, against a floor (strings.Count) of 0.075 µs; keys found from
// their anchor, with lower-case letters and spaces skipped 8 bytes at a
// time, then took them to 18.9 and 9.8 µs (same run: 20.6 and 12.1). The
// rest is the two passes over every byte (the detectors' and the
// trie's, about half each) and the numbers of prose (card, phone and
// IPv4 candidates).
//
// JSON \u escapes are not decoded here: integrators check the decoded
// strings.
package guardrail
