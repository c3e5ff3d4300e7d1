package report

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkCompute reads a generated audit of one million lines (30 days,
// 20 tenants, 5 backends, metered local and upstream, some estimated) by
// tenant and model, and reports lines/s.
func BenchmarkCompute(b *testing.B) {
	const n = 1_000_000
	p := filepath.Join(b.TempDir(), "audit.jsonl")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var wantNano int64
	for i := range n {
		r := rec{
			Time:           start.Add(time.Duration(i) * 2591 * time.Millisecond).Format(time.RFC3339Nano),
			Tenant:         fmt.Sprintf("tenant-%02d", i%20),
			Agent:          fmt.Sprintf("agent-%d", i%7),
			Backend:        fmt.Sprintf("backend-%d", i%5),
			ModelRequested: "model",
			ModelServed:    fmt.Sprintf("model-%d", i%3),
			InputTokens:    int64(i % 4000),
			OutputTokens:   int64(i % 900),
			CostEUR:        fmt.Sprintf("0.%09d", i%100_000),
			MeteredBy:      [2]string{"local", "upstream"}[i%2],
			UsageEstimated: i%97 == 0,
			DurationMS:     123.4,
		}
		wantNano += int64(i % 100_000)
		w.WriteString(r.line())
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	st, _ := os.Stat(p)
	from, to := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	q := Query{Audit: p, From: from, To: to, By: []Dimension{Tenant, Model}}
	b.SetBytes(st.Size())
	b.ResetTimer()
	for b.Loop() {
		rep, err := Compute(q)
		if err != nil {
			b.Fatal(err)
		}
		if rep.InPeriod != n || rep.Total.CostNano != wantNano || len(rep.Rows) != 60 {
			b.Fatalf("in period %d, cost %d (want %d), rows %d", rep.InPeriod, rep.Total.CostNano, wantNano, len(rep.Rows))
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}
