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
// folded phrases (phrases.go), not an RE2 alternation: over the same
// 4 KiB of prose with ten banned words, the trie takes 5.3–6.0 µs and
// `\b(?:w1|w2|…)\b` on the folded text 375–420 µs (BenchmarkBanned*,
// same runs, 2-core machine); the ~2,700 expanded injection phrasings
// take 5.8–6.3 µs (BenchmarkInjection4KiB). On ASCII text the trie is
// tried only at word starts, found eight bytes at a time with a SWAR
// word mask, each checked against one table of the byte pairs patterns
// begin with. The detectors skip what cannot begin a match the same
// way (a SWAR mask of the bytes that are not lower case or space) and
// find keys from an anchor inside them. BenchmarkFind4KiB (pii +
// secrets + injection + banned): 13.5 µs median, 12.7 best of 12
// interleaved runs on a quiet day (the session's first build: 15.6 and
// 14.4; strings.Count over the same bytes, the floor: 0.075 µs).
//
// Every decision reads a bounded stretch, measured once (a base64 run,
// the digits of a number, the search for a PEM END line), so a text is
// read in time linear in its size whatever it holds (TestFindLinear,
// TestFindKeyBlobs), and a Holder holds no more than the longest match a
// rule can still make (TestHolderBlobBounded).
//
// JSON \u escapes are not decoded here (integrators check the decoded
// strings), but JSON's whitespace escapes (\t, \n, \u0009…) read as the
// whitespace they stand for, offsets kept, since a tool call's arguments
// are JSON text.
package guardrail
