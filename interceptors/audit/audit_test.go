package audit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/auditlog"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/ledger"
)

// TestCommitJournalsTheAuditLine: a call the embedded ledger commits
// inside the audit interceptor journals its audit line with the commit;
// after a crash (the files copied while the ledger is open, as kill -9
// leaves them) the next open hands it back, and it is the line the
// interceptor wrote but for outcome, status and duration (ok 200, or
// canceled 499 for usage estimated).
func TestCommitJournalsTheAuditLine(t *testing.T) {
	dir := t.TempDir()
	w, err := auditlog.Open(filepath.Join(dir, "audit.jsonl"), []byte("k"), auditlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := ledger.OpenEmbedded(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	led := ledger.New(ledger.Policy{}, store, ledger.Options{})
	defer led.Close()
	icpt := UnaryServerInterceptor(Config{Writer: w})
	info := &grpc.UnaryServerInfo{FullMethod: flexwayv1.ChatService_CreateChatCompletion_FullMethodName}
	acct := ledger.Account{Tenant: "acme", Agent: "bot"}
	for i, estimated := range []bool{false, true} {
		handler := func(ctx context.Context, _ any) (any, error) {
			res, err := led.Reserve(ctx, acct, ledger.Amount{Tokens: 100})
			if err != nil {
				return nil, err
			}
			o := call.Outcome{Backend: "main", ModelRequested: "m", ModelServed: "m-1", InputTokens: 12, OutputTokens: int64(30 + i), CostNanoEUR: 72_000, Served: true, UsageEstimated: estimated}
			call.FromContext(ctx).SetOutcome(o)
			return nil, led.Commit(ctx, res, ledger.Amount{Tokens: 42 + int64(i), NanoEUR: 72_000})
		}
		st := &call.State{RequestID: "req-" + string(rune('a'+i)), Operation: "ai.chatCompletions", Start: time.Now().Add(-time.Second), Tenant: "acme", Agent: "bot", KeyName: "acme-bot"}
		if _, err := icpt(call.NewContext(context.Background(), st), &flexwayv1.CreateChatCompletionRequest{Model: "m", User: proto.String("u1")}, info, handler); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	written := readLines(t, filepath.Join(dir, "audit.jsonl"))

	crash := t.TempDir()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "ledger.db") {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(crash, e.Name()), b, 0o600)
		}
	}
	var notes [][]byte
	s2, err := ledger.OpenEmbeddedWithOptions(filepath.Join(crash, "ledger.db"), ledger.EmbeddedOptions{Notes: func(n [][]byte) error { notes = n; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if len(notes) != 2 || len(written) != 2 {
		t.Fatalf("%d notes, %d lines written; want 2 each", len(notes), len(written))
	}
	for i, n := range notes {
		var got auditlog.Line
		if err := json.Unmarshal(n, &got); err != nil {
			t.Fatalf("note %q: %v", n, err)
		}
		want := written[i]
		if want.Outcome != "ok" || want.Status != 200 {
			t.Fatalf("written line %+v", want)
		}
		if i == 1 {
			want.Outcome, want.Status = "canceled", 499
		}
		got.DurationMS, want.DurationMS = 0, 0
		if !reflect.DeepEqual(got, want) || got.UserHash == "" || got.KeyHash == "" {
			t.Errorf("note %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
}

// TestGuardrailsField: the line carries the call's guardrail verdicts of
// both phases as {policy, rule, phase, action}, and no guardrails field
// at all for a call no rule matched.
func TestGuardrailsField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := auditlog.Open(path, []byte("k"), auditlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	icpt := UnaryServerInterceptor(Config{Writer: w})
	info := &grpc.UnaryServerInfo{FullMethod: flexwayv1.ChatService_CreateChatCompletion_FullMethodName}
	for i := range 2 {
		st := &call.State{RequestID: "r", Operation: "ai.chatCompletions", Start: time.Now(), Tenant: "acme"}
		handler := func(ctx context.Context, _ any) (any, error) {
			if i == 1 {
				s := call.FromContext(ctx)
				s.AddGuardrail(call.GuardrailVerdict{Policy: "cards", Rule: "pii", Phase: "prompt", Action: "redact"})
				s.AddGuardrail(call.GuardrailVerdict{Policy: "dry", Rule: "secrets", Phase: "response", Action: "would_deny"})
			}
			return nil, nil
		}
		if _, err := icpt(call.NewContext(context.Background(), st), &flexwayv1.CreateChatCompletionRequest{Model: "m"}, info, handler); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 2 || strings.Contains(lines[0], "guardrails") {
		t.Fatalf("lines %q", lines)
	}
	const want = `"guardrails":[{"policy":"cards","rule":"pii","phase":"prompt","action":"redact"},{"policy":"dry","rule":"secrets","phase":"response","action":"would_deny"}]`
	if !strings.Contains(lines[1], want) {
		t.Errorf("line %s lacks %s", lines[1], want)
	}
}

func readLines(t *testing.T, path string) []auditlog.Line {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []auditlog.Line
	for _, ln := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var l auditlog.Line
		if err := json.Unmarshal([]byte(ln), &l); err != nil {
			t.Fatalf("%q: %v", ln, err)
		}
		out = append(out, l)
	}
	return out
}
