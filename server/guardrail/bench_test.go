package guardrail

import (
	"regexp"
	"strings"
	"testing"
)

// prose4K is 4 KiB of ordinary English with a few numbers, an email and a
// card in it: what a prompt looks like.
var prose4K = func() string {
	para := "The quarterly report shows revenue of 4,210 units in region 7, up 12% on last year. " +
		"Please summarise the main risks for the board and suggest three actions we could take before March. " +
		"Contact jane.doe@example.com for the raw figures; the invoice total was 1,234.56 EUR, due 2024-03-01. "
	var b strings.Builder
	for b.Len() < 4096 {
		b.WriteString(para)
	}
	return b.String()[:4096]
}()

var asciiNoMatch4K = func() string {
	para := "the quick brown fox jumps over the lazy dog while the cat sleeps on a warm mat near the window and dreams of birds "
	var b strings.Builder
	for b.Len() < 4096 {
		b.WriteString(para)
	}
	return b.String()[:4096]
}()

func benchScanner(b *testing.B) *Scanner {
	return mustCompile(b,
		Spec{Type: TypePII},
		Spec{Type: TypeSecrets, Action: Deny},
		Spec{Type: TypeInjection, Action: Deny},
		Spec{Type: TypeBanned, Words: []string{"hydra", "project x", "acme secret", "blackbird", "codename"}},
	)
}

// BenchmarkFloor4KiB is the floor the others are compared with: one pass
// of strings.Count over the same 4 KiB.
func BenchmarkFloor4KiB(b *testing.B) {
	b.SetBytes(4096)
	for b.Loop() {
		_ = strings.Count(prose4K, "q")
	}
}

// BenchmarkFind4KiB: pii + secrets + injection + banned over 4 KiB of prose.
func BenchmarkFind4KiB(b *testing.B) {
	s := benchScanner(b)
	var dst []Match
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		dst = s.Find(prose4K, dst[:0])
	}
}

// BenchmarkFindASCIINoMatch: the same rules over 4 KiB of text that matches
// nothing.
func BenchmarkFindASCIINoMatch(b *testing.B) {
	s := benchScanner(b)
	var dst []Match
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		dst = s.Find(asciiNoMatch4K, dst[:0])
	}
}

// BenchmarkFindUnicode4KiB: the same over 4 KiB with non-ASCII text (the
// NFKC path).
func BenchmarkFindUnicode4KiB(b *testing.B) {
	s := benchScanner(b)
	text := strings.Repeat("Grüße aus Köln — naïve café, ２０２４年の報告書。 ", 80)[:4096]
	var dst []Match
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		dst = s.Find(text, dst[:0])
	}
}

// BenchmarkHolderChunk: one ~20-byte streamed chunk through a Holder, hold
// back included.
func BenchmarkHolderChunk(b *testing.B) {
	b.ReportAllocs()
	pushChunks(b, benchScanner(b), prose4K, 20)
}

// pushChunks pushes text to Holders of s in chunks of size bytes, one
// chunk per iteration, a new Holder each time the text is done.
func pushChunks(b *testing.B, s *Scanner, text string, size int) {
	var chunks []string
	for t := text; len(t) > 0; {
		k := min(len(t), size)
		chunks = append(chunks, t[:k])
		t = t[k:]
	}
	h := s.NewHolder()
	i := 0
	for b.Loop() {
		h.Push(chunks[i])
		i++
		if i == len(chunks) {
			h.Flush()
			h = s.NewHolder()
			i = 0
		}
	}
}

// The banned words: the word-start trie Find uses against one RE2
// alternation over the same folded text.
var bannedWords = []string{"hydra", "project x", "acme secret", "blackbird", "codename", "falcon", "nightjar", "orion", "pegasus", "zephyr"}

func BenchmarkBannedTrie4KiB(b *testing.B) {
	s := mustCompile(b, Spec{Type: TypeBanned, Words: bannedWords})
	var dst []Match
	b.SetBytes(4096)
	for b.Loop() {
		dst = s.Find(prose4K, dst[:0])
	}
}

// BenchmarkInjection4KiB: the maintained injection list (about 2,700
// phrasings once expanded) over the same prose: the trie's cost per byte
// does not grow with the number of phrases.
func BenchmarkInjection4KiB(b *testing.B) {
	s := mustCompile(b, Spec{Type: TypeInjection})
	var dst []Match
	b.SetBytes(4096)
	for b.Loop() {
		dst = s.Find(prose4K, dst[:0])
	}
}

func BenchmarkBannedRE2Alternation4KiB(b *testing.B) {
	var q []string
	for _, w := range bannedWords {
		q = append(q, regexp.QuoteMeta(w))
	}
	re := regexp.MustCompile(`\b(?:` + strings.Join(q, "|") + `)\b`)
	b.SetBytes(4096)
	for b.Loop() {
		v := foldedView(prose4K)
		_ = re.FindAllStringIndex(v.s, -1)
	}
}

// BenchmarkHolderChunkNonASCII: a Holder fed 10-byte chunks of text that
// is not ASCII (Japanese, em dashes, tag characters), per chunk: the
// window's look-behind is rescanned on every push, so the cost of the
// non-ASCII views bounds what a stream in small chunks costs per MiB.
func BenchmarkHolderChunkNonASCII(b *testing.B) {
	for _, tc := range []struct{ name, unit string }{
		{"japanese", "日本語のテキストです。"},
		{"emdash", "\u2014"},
		{"tag", "\U000E0041"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(10)
			b.ReportAllocs()
			pushChunks(b, benchScanner(b), strings.Repeat(tc.unit, 4096/len(tc.unit)), 10)
		})
	}
}
