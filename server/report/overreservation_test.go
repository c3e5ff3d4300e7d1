package report

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinesWithAndWithoutUsageOverReservation: `flexway report` reads
// audit lines that carry usage_over_reservation (true, written only then)
// and lines without it (earlier gateways, and every call within its
// reservation) alike.
func TestLinesWithAndWithoutUsageOverReservation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	line := `{"time":"2026-11-10T08:00:0%dZ","request_id":"r%d","operation":"ai.chatCompletions","tenant":"acme","agent":"bot","backend":"main","model_requested":"m","model_served":"m","capability":"chat","input_tokens":10,"output_tokens":%d,"cost_eur":"0.000001000","usage_estimated":false%s,"metered_by":"local","outcome":"ok","status":200,"fallback":false,"soft":false,"duration_ms":1.5,"key_hash":"k","user_hash":""}` + "\n"
	content := strings.Join([]string{
		fmt.Sprintf(line, 1, 1, 5, ""),
		fmt.Sprintf(line, 2, 2, 2000, `,"usage_over_reservation":true`),
	}, "")
	writeFile(t, path, content)
	got, _ := runOut(t, "--audit", path, "--month", "2026-11", "--format", "csv")
	want := "tenant,calls,input_tokens,output_tokens,cost_eur,cost_local_eur,cost_upstream_eur,estimated_calls,cost_estimated_eur,cache_read_tokens,cache_write_tokens,cache_hits,cache_saved_tokens\nacme,2,20,2005,0.000002,0.000002,0.00,0,0.00,0,0,0,0\n"
	if !strings.HasPrefix(got, want) {
		t.Fatalf("report:\n%s\nwant it to start with:\n%s", got, want)
	}
}
