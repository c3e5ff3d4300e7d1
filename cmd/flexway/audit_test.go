package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/money"
)

// auditLines reads the audit file of the gateway configured in dir.
func auditLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// auditConfig is budgetConfig with the audit at path, hashed under key
// FLEXWAY_TEST_KEY's value.
func auditConfig(t *testing.T, mainURL, path string) string {
	c := budgetTestConfig(t, mainURL, mainURL, "    default: {tokens_per_day: 100000, eur_per_month: 5}")
	c.AuditPath = path
	return c.yaml()
}

// TestAuditLines: one line per inference call with the call's metadata:
// what was charged (exact to the nano-euro), the outcome and status, the
// hashed key name and user; refusals are audited; model listings are not.
func TestAuditLines(t *testing.T) {
	up := newUpstream(t, usageUpstream(7, 3))
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	g := startGateway(t, auditConfig(t, up.URL, path))
	resp := post(t, g, "/v1/chat/completions", `{"model":"m","max_tokens":10,"user":"alice@example.com","messages":[{"role":"user","content":"hi"}]}`)
	io.Copy(io.Discard, resp.Body)
	resp = post(t, g, "/v1/chat/completions", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`)
	io.Copy(io.Discard, resp.Body)
	send(t, g, "GET", "/v1/models", nil, nil)
	g.stop()
	g.wait(t, 10*time.Second)

	lines := auditLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("%d audit lines, want 2 (the models listing is no inference call): %v", len(lines), lines)
	}
	hash := func(s string) string {
		m := hmac.New(sha256.New, []byte(demoKey))
		m.Write([]byte(s))
		return hex.EncodeToString(m.Sum(nil))
	}
	ok, refused := lines[0], lines[1]
	want := map[string]any{
		"operation": "ai.chatCompletions", "tenant": "acme", "agent": "bot", "backend": "main",
		"model_requested": "m", "model_served": "m", "capability": "chat",
		"input_tokens": 7.0, "output_tokens": 3.0,
		"cost_eur":        "0.000013000", // 7 × 1 € + 3 × 2 € per million tokens
		"usage_estimated": false, "metered_by": "local", "outcome": "ok", "status": 200.0,
		"fallback": false, "soft": false, "key_hash": hash("acme-bot"), "user_hash": hash("alice@example.com"),
	}
	for k, v := range want {
		if ok[k] != v {
			t.Errorf("%s = %v, want %v", k, ok[k], v)
		}
	}
	if refused["outcome"] != "refused" || refused["status"] != 400.0 || refused["cost_eur"] != "0.000000000" {
		t.Errorf("refused call's line: %v", refused)
	}
}

// TestAuditNeverHoldsContent: a marker in the prompt, the response, an
// image, a caller header and an upstream error body never reaches the
// audit file or the logs, on success, upstream error and panic paths.
func TestAuditNeverHoldsContent(t *testing.T) {
	const marker = "ZQXJ-MARKER-7781"
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("X-Case"), "fail") {
			jsonHandler(500, `{"error":{"message":"`+marker+` upstream body"}}`)(w, r)
			return
		}
		usageUpstream(5, 5)(w, r)
	})
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	cfg := auditConfig(t, up.URL, path)
	var stderr syncBuffer
	g := startGatewayLog(t, cfg, &stderr)
	img := "data:image/png;base64," + strings.Repeat("QUJD", 8)
	body := `{"model":"m","max_tokens":5,"user":"` + marker + `","messages":[{"role":"user","content":[{"type":"text","text":"` + marker + `"},{"type":"image_url","image_url":{"url":"` + img + `"}}]}]}`
	for _, h := range []map[string]string{{"X-Note": marker}, {"X-Case": "fail", "X-Note": marker}} {
		resp := send(t, g, "POST", "/v1/chat/completions", strings.NewReader(body), h)
		io.Copy(io.Discard, resp.Body)
	}
	// A bad request echoing nothing of the body either.
	resp := post(t, g, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"`+marker+`"}]}]}`)
	io.Copy(io.Discard, resp.Body)
	g.stop()
	g.wait(t, 10*time.Second)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(auditLines(t, path)) < 2 {
		t.Fatalf("audit lines missing:\n%s", raw)
	}
	for what, text := range map[string]string{"audit file": string(raw), "logs": stderr.String()} {
		if strings.Contains(text, marker) || strings.Contains(text, "QUJD") {
			t.Errorf("the %s holds the marker:\n%s", what, text)
		}
	}
}

// TestUnwritableAuditRefusesCalls: with an audit that cannot be written (a
// full disk), inference calls are refused with 503 and never reach the
// upstream.
func TestUnwritableAuditRefusesCalls(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	up := newUpstream(t, usageUpstream(5, 5))
	g := startGateway(t, auditConfig(t, up.URL, "/dev/full"))
	// The first call is served; its line cannot be written.
	resp := post(t, g, "/v1/chat/completions", chatBody)
	io.Copy(io.Discard, resp.Body)
	deadline := time.Now().Add(3 * time.Second)
	for {
		resp = post(t, g, "/v1/chat/completions", chatBody)
		body := readJSON(t, resp)
		if resp.StatusCode == 503 {
			if !strings.Contains(fmt.Sprint(body), "audit log cannot be written") {
				t.Fatalf("503 without a clear message: %v", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls still served (%d) with an unwritable audit", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
	before := len(up.requests())
	resp = post(t, g, "/v1/chat/completions", chatBody)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 503 || len(up.requests()) != before {
		t.Fatalf("status %d, upstream calls %d → %d; want 503 and no upstream call", resp.StatusCode, before, len(up.requests()))
	}
}

// TestReportEqualsLedger: after a mixed run (served, refused, streamed,
// cut, embeddings, a fallback at another price), `flexway report` over the
// audit log gives the ledger's committed euros and tokens to the unit.
func TestReportEqualsLedger(t *testing.T) {
	cheap := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/embeddings") {
			jsonHandler(200, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5]}],"model":"m","usage":{"prompt_tokens":9,"total_tokens":9}}`)(w, r)
			return
		}
		usageUpstream(11, 4)(w, r)
	})
	failing := newUpstream(t, jsonHandler(500, `{}`))
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	// main fails: every call falls back to cheap, at cheap's price.
	c := budgetTestConfig(t, failing.URL, cheap.URL, "    default: {tokens_per_day: 100000, eur_per_month: 5}")
	c.AuditPath = path
	g := startGateway(t, c.yaml())
	for _, body := range []string{
		chatBody,
		`{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"refused"}]}`,
		`{"model":"m","stream":true,"max_tokens":20,"messages":[{"role":"user","content":"stream"}]}`,
	} {
		resp := post(t, g, "/v1/chat/completions", body)
		io.Copy(io.Discard, resp.Body)
	}
	resp := post(t, g, "/v1/embeddings", `{"model":"m","input":"abc"}`)
	io.Copy(io.Discard, resp.Body)
	u := usageOf(t, g, "")
	g.stop()
	g.wait(t, 10*time.Second)

	var out, errb strings.Builder
	if err := run(context.Background(), []string{"report", "--audit", path, "--format", "json"}, &out, &errb); err != nil {
		t.Fatalf("report: %v\n%s", err, errb.String())
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out.String()), &rows); err != nil || len(rows) == 0 {
		t.Fatalf("report output %q: %v", out.String(), err)
	}
	total := rows[len(rows)-1]
	eur := u["eur_per_month"].Committed
	if total["cost_eur"] != money.FormatEUR(eur) || eur == 0 {
		t.Fatalf("report total %v EUR, ledger %d nano-euros (%s)", total["cost_eur"], eur, money.FormatEUR(eur))
	}
	tokens := int64(total["input_tokens"].(float64) + total["output_tokens"].(float64))
	if tokens != u["tokens_per_day"].Committed {
		t.Fatalf("report total %d tokens, ledger %d", tokens, u["tokens_per_day"].Committed)
	}
	if total["calls"] != 4.0 {
		t.Errorf("report counts %v calls, want 4 (the refused one included)", total["calls"])
	}
}

// TestMetricsAfterKnownCalls: /metrics holds the calls, euros and tokens of
// known calls under the configuration's label values (a model the
// configuration does not name is "other"), the budget gauges and the
// circuit states.
func TestMetricsAfterKnownCalls(t *testing.T) {
	up := newUpstream(t, jsonHandler(200, `{"id":"c","object":"chat.completion","created":1,"model":"evil-x","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`))
	g := startGateway(t, budgetConfig(t, up.URL, up.URL, "    default: {tokens_per_day: 1000, eur_per_month: 5}"))
	for range 2 {
		resp := post(t, g, "/v1/chat/completions", chatBody)
		io.Copy(io.Discard, resp.Body)
	}
	// Callers cannot mint series: an invented Host, path or gRPC method.
	req, _ := http.NewRequest("GET", g.HTTP+"/v1/evil-path", nil)
	req.Host = "evil-host.example:4242"
	if r, err := http.DefaultClient.Do(req); err == nil {
		r.Body.Close()
	}
	_ = grpcConn(t, g).Invoke(withKey(t, ""), "/evil.v1.Service/EvilMethod", &flexwayv1.ListModelsRequest{}, &flexwayv1.ListModelsResponse{})
	// otelhttp records a request's duration after its response is
	// written: the 404's may land a moment after the client read it.
	var text string
	var resp *http.Response
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp = send(t, g, "GET", "/metrics", nil, map[string]string{"Authorization": ""})
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text = string(raw)
		if strings.Contains(text, `http_response_status_code="404"`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	labels := `agent="bot",backend="main",capability="chat",feature="",metered_by="local",model="other",operation="ai.chatCompletions",outcome="ok",tenant="acme"`
	for _, want := range []string{
		`flexway_inference_calls_total{` + labels + `} 2`,
		`flexway_inference_cost_EUR_total{` + labels + `} 2.6e-05`, // 2 × (7 × 1 € + 3 × 2 €) per million
		`flexway_budget_committed{agent="",cap="tokens_per_day",tenant="acme",unit="tokens"} 20`,
		`flexway_budget_limit{agent="",cap="eur_per_month",tenant="acme",unit="eur"} 5`,
		`flexway_backend_circuit{backend="main"} 0`,
		// The HTTP server metric, with otelhttp's bounded attributes.
		`http_server_request_duration_seconds_count{http_request_method="POST",http_response_status_code="200",url_scheme="http"} 2`,
		`http_server_request_duration_seconds_count{http_request_method="GET",http_response_status_code="404",url_scheme="http"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if resp.StatusCode != 200 || strings.Contains(text, "evil") {
		t.Fatalf("status %d; an unconfigured model name reached /metrics:\n%s", resp.StatusCode, text)
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}

// readyz returns the status and body of GET /readyz.
func readyz(t *testing.T, g *testGW) (int, string) {
	t.Helper()
	resp, err := http.Get(g.HTTP + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitReadyz waits until GET /readyz answers status; it returns the body.
func waitReadyz(t *testing.T, g *testGW, status int, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, body := readyz(t, g)
		if code == status {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz answers %d %s, want %d", code, body, status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReadyzWhileAuditUnwritable: while the audit log cannot be written
// (a directory put in the file's place), /readyz answers 503, without the
// path or the cause (it is unauthenticated); once it can be written again,
// 200, and serve ends without error, every line written.
func TestReadyzWhileAuditUnwritable(t *testing.T) {
	up := newUpstream(t, usageUpstream(5, 5))
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	g := startGateway(t, auditConfig(t, up.URL, path))
	waitReadyz(t, g, 200, time.Second)
	resp := post(t, g, "/v1/chat/completions", chatBody)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("first call: %d", resp.StatusCode)
	}

	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o750); err != nil {
		t.Fatal(err)
	}
	// Served while the audit still looked healthy; its line cannot be
	// written.
	resp = post(t, g, "/v1/chat/completions", chatBody)
	io.Copy(io.Discard, resp.Body)
	body := waitReadyz(t, g, 503, 3*time.Second)
	if !strings.Contains(body, "audit log cannot be written") || !strings.Contains(body, "inference calls are refused") {
		t.Errorf("/readyz 503 without a clear message: %s", body)
	}
	if strings.Contains(body, dir) || strings.Contains(body, "regular file") {
		t.Errorf("/readyz tells the path or the cause: %s", body)
	}
	resp = post(t, g, "/v1/chat/completions", chatBody)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 503 {
		t.Fatalf("call while /readyz is 503: %d, want 503", resp.StatusCode)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, g, 200, 5*time.Second)
	resp = post(t, g, "/v1/chat/completions", chatBody)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("call once the audit is written again: %d, want 200", resp.StatusCode)
	}
	g.stop()
	if err := g.wait(t, 10*time.Second); err != nil {
		t.Fatalf("serve: %v, want nil: every audit line was written", err)
	}
	if n := len(auditLines(t, path)); n < 2 {
		t.Fatalf("%d lines in the new audit file, want the one kept while it could not be written and the last call's", n)
	}
}

// TestUnwritableAuditFailsServe: audit lines still unwritten when serve
// stops make it fail (the command exits 1), after an orderly shutdown.
func TestUnwritableAuditFailsServe(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	up := newUpstream(t, usageUpstream(5, 5))
	var stderr syncBuffer
	g := startGatewayLog(t, auditConfig(t, up.URL, "/dev/full"), &stderr)
	resp := post(t, g, "/v1/chat/completions", chatBody)
	io.Copy(io.Discard, resp.Body)
	waitReadyz(t, g, 503, 3*time.Second)
	g.stop()
	if err := g.wait(t, 10*time.Second); err == nil {
		t.Fatalf("serve returned nil with audit lines unwritten:\n%s", stderr.String())
	}
	if log := stderr.String(); !strings.Contains(log, "could not be written") || !strings.Contains(log, "flexway stopped") {
		t.Fatalf("the log lacks the unwritten lines or the orderly stop:\n%s", log)
	}
}

// TestUnwritableAuditExitStatus: `flexway serve` stopped by SIGTERM with
// audit lines it could not write exits with status 1.
func TestUnwritableAuditExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	up := newUpstream(t, usageUpstream(5, 5))
	t.Setenv("FLEXWAY_TEST_KEY", demoKey)
	c := startChild(t, t.TempDir(), auditConfig(t, up.URL, "/dev/full"))
	resp := post(t, &c.testGW, "/v1/chat/completions", chatBody)
	io.Copy(io.Discard, resp.Body)
	waitReadyz(t, &c.testGW, 503, 3*time.Second)
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatal("flexway serve did not exit after SIGTERM")
	}
	if code := c.cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit status %d, want 1:\n%s", code, c.stderr.String())
	}
	if log := c.stderr.String(); !strings.Contains(log, "could not be written") || !strings.Contains(log, "flexway stopped") {
		t.Fatalf("the log lacks the unwritten lines or the orderly stop:\n%s", log)
	}
}

// TestReportAfterIncompleteAuditLine: a gateway that starts on an audit
// file ending in the middle of a line (a write cut short by a full disk,
// then a stop) removes the incomplete line, so that `flexway report` reads
// the file.
func TestReportAfterIncompleteAuditLine(t *testing.T) {
	up := newUpstream(t, usageUpstream(7, 3))
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	g := startGateway(t, auditConfig(t, up.URL, path))
	resp := post(t, g, "/v1/chat/completions", chatBody)
	io.Copy(io.Discard, resp.Body)
	g.stop()
	if err := g.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The start of the same line again, cut short.
	if err := os.WriteFile(path, append(raw, raw[:len(raw)/2]...), 0o640); err != nil {
		t.Fatal(err)
	}

	var stderr syncBuffer
	g = startGatewayLog(t, auditConfig(t, up.URL, path), &stderr)
	resp = post(t, g, "/v1/chat/completions", chatBody)
	io.Copy(io.Discard, resp.Body)
	g.stop()
	if err := g.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf(`"bytes_removed":%d`, len(raw)/2)) {
		t.Errorf("no warning that %d bytes were removed:\n%s", len(raw)/2, stderr.String())
	}
	var out, errb strings.Builder
	if err := run(context.Background(), []string{"report", "--audit", path, "--format", "json"}, &out, &errb); err != nil {
		t.Fatalf("report: %v\n%s", err, errb.String())
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out.String()), &rows); err != nil || len(rows) == 0 {
		t.Fatalf("report output %q: %v", out.String(), err)
	}
	if calls := rows[len(rows)-1]["calls"]; calls != 2.0 {
		t.Fatalf("report counts %v calls, want 2", calls)
	}
}

// TestAuditModelRequestedDeclaredOnly: issue 12, item 8. The audit line
// records the requested model as given only when the configuration
// declares it (a backend's models or default_model), else "other", the
// label the metrics give an undeclared model; a model served by mapping
// to default_model is still served.
func TestAuditModelRequestedDeclaredOnly(t *testing.T) {
	up := newUpstream(t, usageUpstream(7, 3))
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	g := startGateway(t, auditConfig(t, up.URL, path))
	for _, model := range []string{"m", "gpt-unknown-" + strings.Repeat("x", 200)} {
		resp := post(t, g, "/v1/chat/completions", `{"model":"`+model+`","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != 200 {
			t.Fatalf("model %.20s…: status %d: %s", model, resp.StatusCode, readAll(resp))
		}
		io.Copy(io.Discard, resp.Body)
	}
	emb := post(t, g, "/v1/embeddings", `{"model":"text-embedding-undeclared","input":"a"}`)
	io.Copy(io.Discard, emb.Body)
	g.stop()
	g.wait(t, 10*time.Second)
	lines := auditLines(t, path)
	if len(lines) != 3 {
		t.Fatalf("%d audit lines, want 3: %v", len(lines), lines)
	}
	for i, want := range []string{"m", "other", "other"} {
		if got := lines[i]["model_requested"]; got != want {
			t.Errorf("line %d: model_requested %v, want %q", i, got, want)
		}
		if got := lines[i]["model_served"]; got != "m" {
			t.Errorf("line %d: model_served %v, want m", i, got)
		}
	}
}

// TestHugeModelRefused: issue 12, item 8. A 2,000,000-character model is
// refused (400 over HTTP, INVALID_ARGUMENT over gRPC) and never reaches
// the upstream or the audit file, which `flexway report` still reads.
func TestHugeModelRefused(t *testing.T) {
	up := newUpstream(t, usageUpstream(7, 3))
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	g := startGateway(t, auditConfig(t, up.URL, path))
	huge := strings.Repeat("m", 2_000_000)
	for _, p := range []string{"/v1/chat/completions", "/v1/embeddings"} {
		resp := post(t, g, p, `{"model":"`+huge+`","input":"a","messages":[{"role":"user","content":"hi"}]}`)
		raw := readAll(resp)
		if resp.StatusCode != 400 || !strings.Contains(raw, `"param":"model"`) || len(raw) > 1000 {
			t.Fatalf("%s: status %d: %.300s", p, resp.StatusCode, raw)
		}
	}
	conn := grpcConn(t, g)
	_, err := flexwayv1.NewChatServiceClient(conn).CreateChatCompletion(withKey(t, demoKey), &flexwayv1.CreateChatCompletionRequest{
		Model: huge, Messages: []*flexwayv1.ChatMessage{userMessage("hi")},
	})
	if code, param := grpcParam(err); code != codes.InvalidArgument || param != "model" {
		t.Fatalf("gRPC: %v (param %q)", err, param)
	}
	resp := post(t, g, "/v1/chat/completions", chatBody)
	io.Copy(io.Discard, resp.Body)
	g.stop()
	g.wait(t, 10*time.Second)
	if n := len(up.requests()); n != 1 {
		t.Fatalf("the upstream saw %d requests, want 1", n)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 4096 {
		t.Fatalf("the audit file holds %d bytes for two lines", len(raw))
	}
	if calls := reportCalls(t, path); calls != 2 {
		t.Fatalf("report counts %v calls, want 2 (the gRPC refusal and the served call)", calls)
	}
}

// reportCalls runs `flexway report` on the audit file at path and returns
// the calls of its last row, the total.
func reportCalls(t *testing.T, path string) float64 {
	t.Helper()
	var out, errb strings.Builder
	if err := run(context.Background(), []string{"report", "--audit", path, "--format", "json"}, &out, &errb); err != nil {
		t.Fatalf("report: %v\n%s", err, errb.String())
	}
	var rows []struct{ Calls float64 }
	if err := json.Unmarshal([]byte(out.String()), &rows); err != nil || len(rows) == 0 {
		t.Fatalf("report output %q: %v", out.String(), err)
	}
	return rows[len(rows)-1].Calls
}
