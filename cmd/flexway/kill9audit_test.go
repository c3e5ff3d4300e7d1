package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexway/flexway/server/report"
)

// TestKill9AuditEqualsLedger is issue 12's proof that the records stay
// whole across crashes of a gateway on the embedded ledger: callers run
// unary and streamed chat calls, the gateway is killed with SIGKILL at a
// random moment, restarted on the same directory, and again, 3 times (20
// with more callers under FLEXWAY_SOAK=1). After every restart `flexway
// report` (the report package, over the audit file) equals the ledger's
// committed usage (admin usage API) in tokens and nano-euros, every call a
// caller saw answered is in the ledger and has its audit line, and the
// ledger holds no more than the upstream served. Before the fix, the lines
// queued in the last milliseconds before each kill were lost: the report
// fell short of the ledger.
func TestKill9AuditEqualsLedger(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	kill9Audit(t, "", nil)
}

// TestKill9AuditEqualsRedisLedger is TestKill9AuditEqualsLedger with the
// gateway on a Redis ledger (its own redis-server, which is not killed):
// the replica is killed with SIGKILL at random moments between its
// commits in Redis and its audit writes, and restarted on the same
// directory (its local files: ai.budget.store.path). After every restart
// `flexway report` equals the Redis ledger's committed usage (admin usage
// API) and every answered call has exactly one audit line. Before the
// Redis store kept the commits' notes (its notes files), the calls
// committed in the last milliseconds before a kill had no line: the
// report fell short of the ledger.
func TestKill9AuditEqualsRedisLedger(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	url := testRedis(t, 3)
	kill9Audit(t, fmt.Sprintf("    store: {type: redis, url: %q}\n", url), func(cfgPath string) {
		var out, errb bytes.Buffer
		if err := run(context.Background(), []string{"ledger", "init", "--config", cfgPath}, &out, &errb); err != nil {
			t.Fatalf("ledger init: %v\n%s%s", err, out.String(), errb.String())
		}
	})
}

// kill9Audit runs the kill -9 test on the ledger store (budget config
// lines; "" is the embedded store); initStore, when set, is run once on
// the configuration file before the first start.
func kill9Audit(t *testing.T, store string, initStore func(cfgPath string)) {
	kills, callers, load := 3, 8, [2]time.Duration{150 * time.Millisecond, 450 * time.Millisecond}
	if soak() {
		kills, callers, load = 20, 24, [2]time.Duration{200 * time.Millisecond, 1500 * time.Millisecond}
	}
	const perCall = 15 // the upstream's usage: 10 + 5 tokens
	var servedN int64
	var mu sync.Mutex
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond)
		raw := new(bytes.Buffer)
		_, _ = raw.ReadFrom(r.Body)
		if strings.Contains(raw.String(), `"stream":true`) {
			sseUpstream(chunk(`[{"index":0,"delta":{"content":"one two"}}]`, ""),
				chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""),
				chunk(`[]`, `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`))(w, r)
		} else {
			usageUpstream(10, 5)(w, r)
		}
		mu.Lock()
		servedN++
		mu.Unlock()
	})
	dir := t.TempDir()
	t.Setenv("FLEXWAY_TEST_KEY", demoKey)
	cfg := budgetConfig(t, up.URL, up.URL, store+"    default: {tokens_per_month: 1000000000, eur_per_month: 1000000}")
	if initStore != nil {
		path := filepath.Join(dir, "flexway.yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		initStore(path)
	}
	auditPath := filepath.Join(dir, "flexway-data", "audit.jsonl")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))

	answered := map[string]bool{} // request ids answered 200 in full
	var seq int
	rebuilt := 0
	for round := 0; round <= kills; round++ {
		g := startChild(t, dir, cfg)
		if round > 0 {
			check(t, g, auditPath, round, answered, servedN*perCall, perCall)
		}
		if round == kills {
			rebuilt += rebuiltLines(g.stderr.String())
			break
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		client := &http.Client{Timeout: 5 * time.Second}
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stream := c%4 == 3
				for {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					seq++
					id := fmt.Sprintf("k%d-%d", round, seq)
					mu.Unlock()
					body := chatBody
					if stream {
						body = `{"model":"m","stream":true,"max_tokens":40,"messages":[{"role":"user","content":"Count to three, please."}]}`
					}
					req, _ := http.NewRequest("POST", g.HTTP+"/v1/chat/completions", strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+demoKey)
					req.Header.Set("X-Request-Id", id)
					resp, err := client.Do(req)
					if err != nil {
						return // the gateway is gone
					}
					var buf bytes.Buffer
					_, err = buf.ReadFrom(resp.Body)
					resp.Body.Close()
					ok := err == nil && resp.StatusCode == 200
					if stream {
						ok = ok && strings.HasSuffix(buf.String(), "data: [DONE]\n\n")
					} else {
						ok = ok && strings.Contains(buf.String(), `"total_tokens":15`)
					}
					if ok {
						mu.Lock()
						answered[id] = true
						mu.Unlock()
					}
				}
			}()
		}
		time.Sleep(load[0] + time.Duration(rng.Int64N(int64(load[1]-load[0]))))
		g.kill()
		close(stop)
		wg.Wait()
		rebuilt += rebuiltLines(g.stderr.String())
	}
	if len(answered) < 10*kills {
		t.Fatalf("only %d calls answered over %d kills: the load did not run", len(answered), kills)
	}
	t.Logf("%d kills: %d calls answered, %d served upstream; %d audit lines rebuilt from the ledger's notes at restarts", kills, len(answered), servedN, rebuilt)
}

// check compares, after a restart, the ledger's committed usage with what
// `flexway report` makes of the audit file, and the answered calls with
// both.
func check(t *testing.T, g *child, auditPath string, round int, answered map[string]bool, servedTokens, perCall int64) {
	t.Helper()
	usage := usageOf(t, &g.testGW, "")
	tokens, nano := usage["tokens_per_month"].Committed, usage["eur_per_month"].Committed
	now := time.Now().UTC()
	from := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	rep, err := report.Compute(report.Query{Audit: auditPath, From: from, To: from.AddDate(0, 1, 0), By: []report.Dimension{report.Tenant}})
	if err != nil {
		t.Fatalf("after kill %d: flexway report: %v", round, err)
	}
	rt, rn := rep.Total.InputTokens+rep.Total.OutputTokens, rep.Total.CostNano
	if rt != tokens || rn != nano {
		t.Errorf("after kill %d: report %d tokens, %d nano-euros; ledger %d tokens, %d nano-euros", round, rt, rn, tokens, nano)
	}
	lo := int64(len(answered)) * perCall
	if tokens < lo || tokens > servedTokens || tokens%perCall != 0 {
		t.Errorf("after kill %d: ledger %d tokens; want between %d (%d calls answered) and %d (served upstream), a multiple of %d",
			round, tokens, lo, len(answered), servedTokens, perCall)
	}
	ids := auditIDs(t, auditPath)
	missing := 0
	for id := range answered {
		if ids[id] != 1 {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("after kill %d: %d of %d answered calls have no audit line, or more than one", round, missing, len(answered))
	}
}

// auditIDs counts the audit file's lines per request id.
func auditIDs(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ids := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		ids[l.RequestID]++
	}
	return ids
}

var rebuiltRE = regexp.MustCompile(`audit lines of (\d+) calls committed before a crash`)

// rebuiltLines is how many audit lines a gateway's log says it rebuilt at
// start.
func rebuiltLines(log string) int {
	n := 0
	for _, m := range rebuiltRE.FindAllStringSubmatch(log, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}
