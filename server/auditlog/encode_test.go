package auditlog

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flexway/flexway/server/money"
)

// checkLine fails t unless appendLine(l) is byte for byte encoding/json's
// encoding of l (HTML escaping off), and appends to what is already in the
// buffer.
func checkLine(t *testing.T, l *Line) {
	t.Helper()
	want, err := marshalLine(l)
	if err != nil {
		t.Fatalf("marshalLine(%+v): %v", l, err)
	}
	if std, _ := json.Marshal(l); !bytes.Equal(unescapeHTML(std), want) {
		t.Fatalf("marshalLine(%+v) = %s, not json.Marshal's %s", l, want, std)
	}
	prefix := []byte("prefix")
	got := appendLine(prefix, l)
	if !bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(got[len("prefix"):], want) {
		t.Fatalf("appendLine(%+v)\n got %s\nwant %s", l, got, want)
	}
	if !encodable(l) {
		t.Fatalf("encodable(%+v) = false for a line encoding/json encodes", l)
	}
}

// sampleLine is a typical line.
func sampleLine() *Line {
	return &Line{Time: time.Date(2025, 3, 14, 9, 26, 53, 589793238, time.UTC), RequestID: "req_0123456789abcdef",
		Operation: "ai.chatCompletions", Tenant: "acme", Agent: "bot", Backend: "main", ModelRequested: "m",
		ModelServed: "m-1", Capability: "chat", InputTokens: 100, OutputTokens: 50, CacheReadTokens: 60, CostEUR: money.FormatEURFixed(24_000),
		CostNanoEUR: 24_000, MeteredBy: "local", Outcome: "ok", Status: 200, DurationMS: 12.5,
		KeyHash: "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"}
}

// TestAppendLineStrings: tricky strings, in every string field, are
// escaped as encoding/json escapes them.
func TestAppendLineStrings(t *testing.T) {
	strs := []string{
		"",
		"plain",
		`say "hi"`,
		`back\slash\\`,
		"\x00\x01\x07\b\t\n\v\f\r\x0e\x1b\x1f \x7f",
		"<script>alert('x')</script> & more",
		"\xff",
		"a\xffb\xc0\xafc\xed\xa0\x80d", // invalid bytes, an overlong, a surrogate
		"truncated \xe2\x82",
		"\u2028line\u2029paragraph\u2027\u202a",
		"emoji 🙂 and 👩‍💻, é, 日本語",
		"\U0010FFFF\uFFFD\uFEFF",
		strings.Repeat(`"<&>\`, 50),
	}
	for _, s := range strs {
		l := sampleLine()
		v := reflect.ValueOf(l).Elem()
		for i := range v.NumField() {
			if f := v.Field(i); f.Kind() == reflect.String {
				f.SetString(s)
			}
		}
		checkLine(t, l)
	}
}

// TestAppendLineFloats: durations are written as encoding/json writes a
// float64.
func TestAppendLineFloats(t *testing.T) {
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, -0.5, 3.14159, 12.5, 1e-7, 1e-6, 9.99999e-7, 1.5e-10,
		123456789012345678901.0, 1e20, 1e21, 1e22, -1e21, 1e100, 5e-324, math.MaxFloat64, -math.MaxFloat64,
		math.SmallestNonzeroFloat64, 1.0 / 3, 2.5e-8, 1e-9, 1e-300}
	for _, f := range floats {
		l := sampleLine()
		l.DurationMS = f
		checkLine(t, l)
	}
}

// TestAppendLineTimes: times are written as time.Time.MarshalJSON writes
// them, zones and nanoseconds included.
func TestAppendLineTimes(t *testing.T) {
	times := []time.Time{
		{},
		time.Now(), // with a monotonic reading
		time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		time.Date(2025, 1, 2, 3, 4, 5, 100, time.UTC),
		time.Date(2025, 1, 2, 3, 4, 5, 120_000_000, time.FixedZone("", 2*3600)),
		time.Date(2025, 1, 2, 3, 4, 5, 1, time.FixedZone("", -(9*3600+30*60))),
		time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("", 23*3600+59*60)),
		time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("", 45)), // seconds of offset are dropped
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
	}
	for _, tm := range times {
		l := sampleLine()
		l.Time = tm
		checkLine(t, l)
	}
}

// TestAppendLineFeature: feature is omitted when empty, written when set.
func TestAppendLineFeature(t *testing.T) {
	l := sampleLine()
	checkLine(t, l)
	if b := appendLine(nil, l); bytes.Contains(b, []byte(`"feature"`)) {
		t.Fatalf("empty feature written: %s", b)
	}
	l.Feature = "ocr"
	checkLine(t, l)
	if b := appendLine(nil, l); !bytes.Contains(b, []byte(`"feature":"ocr"`)) {
		t.Fatalf("feature not written: %s", b)
	}
	checkLine(t, &Line{})
	if got := appendLine(nil, nil); string(got) != "null" {
		t.Fatalf("appendLine(nil) = %s, want null as json.Marshal", got)
	}
}

// TestAppendLineUnencodable: where json.Marshal fails, appendLine appends
// nothing, and Write returns json.Marshal's error and queues nothing.
func TestAppendLineUnencodable(t *testing.T) {
	w, err := Open(filepath.Join(t.TempDir(), "a.jsonl"), []byte("k"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, mod := range []func(*Line){
		func(l *Line) { l.DurationMS = math.NaN() },
		func(l *Line) { l.DurationMS = math.Inf(1) },
		func(l *Line) { l.DurationMS = math.Inf(-1) },
		func(l *Line) { l.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
		func(l *Line) { l.Time = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) },
		func(l *Line) { l.Time = time.Date(2025, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600)) },
		func(l *Line) { l.Time = time.Date(2025, 1, 1, 0, 0, 0, 0, time.FixedZone("", -100*3600)) },
	} {
		l := sampleLine()
		mod(l)
		_, want := marshalLine(l)
		if want == nil {
			t.Fatalf("marshalLine(%+v) did not fail", l)
		}
		if encodable(l) {
			t.Fatalf("encodable(%+v) = true", l)
		}
		if got := appendLine([]byte("prefix"), l); string(got) != "prefix" {
			t.Fatalf("appendLine(%+v) = %q, want the buffer unchanged", l, got)
		}
		if err := w.Write(l); err == nil || err.Error() != want.Error() {
			t.Fatalf("Write(%+v) = %v, want %v", l, err, want)
		}
	}
	w.mu.Lock()
	n := w.pending.Len() + len(w.queued)
	w.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d bytes queued by failed writes", n)
	}
}

// TestAppendLineKnowsEveryField sets every field of Line, whatever it is,
// to a non-zero value: a field appendLine does not write, or writes under
// another name or in another place, shows up as a difference with
// json.Marshal.
func TestAppendLineKnowsEveryField(t *testing.T) {
	var l Line
	v := reflect.ValueOf(&l).Elem()
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch f.Interface().(type) {
		case time.Time:
			f.Set(reflect.ValueOf(time.Date(2025, 6, 7, 8, 9, 10, 11, time.UTC)))
			continue
		case WouldDeny:
			f.Set(reflect.ValueOf(WouldDeny{Policy: "value of " + name, Reason: "reason of " + name}))
			continue
		case []Guardrail:
			f.Set(reflect.ValueOf([]Guardrail{{Policy: "p<1>", Rule: "pii", Phase: "prompt", Action: "redact"}, {Policy: "p\"2", Rule: "webhook", Phase: "response", Action: "would_deny"}}))
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString("value of " + name)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			f.SetInt(int64(1 + i%100))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(uint64(1 + i%100))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Float32, reflect.Float64:
			f.SetFloat(float64(i) + 0.25)
		default:
			t.Fatalf("Line.%s: a %s, which this test cannot set: teach it, and appendLine", name, f.Type())
		}
	}
	checkLine(t, &l)
}

// randString is a random string mixing ASCII, bytes that need escaping,
// multi-byte runes and random (often invalid) bytes.
func randString(r *rand.Rand) string {
	pieces := []string{"a", "Z", "0", " ", `"`, `\`, "<", ">", "&", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "日",
		"🙂", "\u2028", "\u2029", "\ufffd", "\xe2\x80", "\xc3"}
	var b strings.Builder
	for range r.IntN(40) {
		if r.IntN(3) == 0 {
			b.WriteByte(byte(r.UintN(256)))
		} else {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
	}
	return b.String()
}

// randFloat is a random finite float64 of any magnitude.
func randFloat(r *rand.Rand) float64 {
	switch r.IntN(4) {
	case 0:
		return float64(r.IntN(100_000)) / 1000
	case 1:
		return r.NormFloat64() * math.Pow(10, float64(r.IntN(60)-30))
	case 2:
		for {
			if f := math.Float64frombits(r.Uint64()); !math.IsNaN(f) && !math.IsInf(f, 0) {
				return f
			}
		}
	default:
		return r.Float64()
	}
}

// TestAppendLineRandom compares appendLine with json.Marshal on random
// lines.
func TestAppendLineRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	zones := []*time.Location{time.UTC, time.FixedZone("", 3600), time.FixedZone("", -5*3600-30*60)}
	for range 5000 {
		l := &Line{
			Time:                 time.Unix(r.Int64N(253402300799), r.Int64N(1e9)).In(zones[r.IntN(len(zones))]),
			RequestID:            randString(r),
			Operation:            randString(r),
			Tenant:               randString(r),
			Agent:                randString(r),
			Backend:              randString(r),
			ModelRequested:       randString(r),
			ModelServed:          randString(r),
			Capability:           randString(r),
			InputTokens:          r.Int64() - r.Int64(),
			OutputTokens:         r.Int64N(1 << 20),
			CacheReadTokens:      r.Int64N(1 << 20),
			CacheWriteTokens:     r.Int64() - r.Int64(),
			CostEUR:              money.FormatEURFixed(r.Int64()),
			CostNanoEUR:          r.Int64(),
			UsageEstimated:       r.IntN(2) == 0,
			UsageOverReservation: r.IntN(2) == 0,
			MeteredBy:            randString(r),
			Outcome:              randString(r),
			Status:               r.IntN(600),
			Fallback:             r.IntN(2) == 0,
			Soft:                 r.IntN(2) == 0,
			DurationMS:           randFloat(r),
			KeyHash:              randString(r),
			UserHash:             randString(r),
		}
		if r.IntN(2) == 0 {
			// Either field may be empty: the object is written when one is set.
			l.WouldDeny = WouldDeny{Policy: randString(r), Reason: randString(r)}
		}
		if r.IntN(2) == 0 {
			l.Feature = randString(r)
		}
		for range r.IntN(3) {
			l.Guardrails = append(l.Guardrails, Guardrail{Policy: randString(r), Rule: randString(r), Phase: randString(r), Action: randString(r)})
		}
		checkLine(t, l)
	}
}

// BenchmarkAppendLine is the cost of encoding a typical line with
// appendLine, into a reused buffer.
func BenchmarkAppendLine(b *testing.B) {
	l := sampleLine()
	l.Time = time.Now()
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = appendLine(buf[:0], l)
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkMarshalLine is the same with json.Marshal, for comparison.
func BenchmarkMarshalLine(b *testing.B) {
	l := sampleLine()
	l.Time = time.Now()
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = json.Marshal(l)
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkHash is the cost of hashing an identifier.
func BenchmarkHash(b *testing.B) {
	w, err := Open(filepath.Join(b.TempDir(), "a.jsonl"), []byte("a hash key of some length"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.ReportAllocs()
	for b.Loop() {
		_ = w.Hash("acme-support-bot")
	}
}

// unescapeHTML undoes json.Marshal's HTML escaping (\u003c, \u003e,
// \u0026), so that its output can be compared with marshalLine's.
func unescapeHTML(b []byte) []byte {
	b = bytes.ReplaceAll(b, []byte(`\u003c`), []byte("<"))
	b = bytes.ReplaceAll(b, []byte(`\u003e`), []byte(">"))
	return bytes.ReplaceAll(b, []byte(`\u0026`), []byte("&"))
}
