package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRedisReplicasHoldTokensPerMinute: two gateway processes on one
// real redis-server hold one tenant's tokens_per_minute together. 64
// callers spread over both call for a few seconds, each call reserving its
// input bound plus max_tokens, and the upstream, honouring max_tokens,
// reports exactly that much: exactly floor(cap/amount) calls are admitted
// in the run (far shorter than the window, so that no admission leaves it),
// every other is 429 rate_limited, and the tokens admitted in any 60 s
// window never pass the cap.
func TestRedisReplicasHoldTokensPerMinute(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	url := testRedis(t, 3)
	est := reservedFor(t, chatBody, 1024)
	perCall := est.Input + est.Output
	const n = 20
	capTokens := n*perCall + perCall/2 // floor(cap/perCall) = n

	type admission struct {
		at     time.Time
		tokens int64
	}
	var mu sync.Mutex
	var admitted []admission
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			MaxTokens           *int64 `json:"max_tokens"`
			MaxCompletionTokens *int64 `json:"max_completion_tokens"`
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &req)
		out := int64(0)
		switch {
		case req.MaxCompletionTokens != nil:
			out = *req.MaxCompletionTokens
		case req.MaxTokens != nil:
			out = *req.MaxTokens
		}
		mu.Lock()
		admitted = append(admitted, admission{time.Now(), est.Input + out})
		mu.Unlock()
		time.Sleep(10 * time.Millisecond) // keep reservations in flight together
		usageUpstream(est.Input, out)(w, r)
	})

	t.Setenv("FLEXWAY_TEST_KEY", demoKey)
	var gws []*child
	for range 2 {
		c := rateTestConfig(t, up.URL, fmt.Sprintf("{tokens_per_minute: %d}", capTokens), "")
		c.Budget = fmt.Sprintf("    store: {type: redis, url: %q}", url)
		cfg := c.yaml()
		dir := t.TempDir()
		if len(gws) == 0 {
			path := filepath.Join(dir, "flexway.yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if err := run(context.Background(), []string{"ledger", "init", "--config", path}, &out, &errb); err != nil {
				t.Fatalf("ledger init: %v\n%s%s", err, out.String(), errb.String())
			}
		}
		gws = append(gws, startChild(t, dir, cfg))
	}

	const runFor = 3 * time.Second
	start := time.Now()
	deadline := start.Add(runFor)
	client := &http.Client{Timeout: 10 * time.Second}
	var ok, limited atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := gws[i%2]
			for time.Now().Before(deadline) {
				req, _ := http.NewRequest("POST", g.HTTP+"/v1/chat/completions", strings.NewReader(chatBody))
				req.Header.Set("Authorization", "Bearer "+demoKey)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == 200:
					ok.Add(1)
				case resp.StatusCode == 429 && strings.Contains(string(body), `"code":"rate_limited"`) && resp.Header.Get("Retry-After") != "" && resp.Header.Get("X-Ratelimit-Limit-Tokens") != "":
					limited.Add(1)
					time.Sleep(5 * time.Millisecond) // not Retry-After: it outlasts the run
				default:
					t.Errorf("status %d, headers %v: %s", resp.StatusCode, resp.Header, body)
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)

	mu.Lock()
	defer mu.Unlock()
	sort.Slice(admitted, func(i, j int) bool { return admitted[i].at.Before(admitted[j].at) })
	// The heaviest 60-second window of admissions.
	var worst, sum int64
	for i, j := 0, 0; j < len(admitted); j++ {
		sum += admitted[j].tokens
		for admitted[j].at.Sub(admitted[i].at) >= time.Minute {
			sum -= admitted[i].tokens
			i++
		}
		worst = max(worst, sum)
	}
	t.Logf("tokens_per_minute %d on Redis, 2 replicas, 64 callers for %v: %d calls of %d tokens admitted (floor(cap/amount) = %d), %d refused rate_limited (%.0f answers/s); heaviest 60 s window %d tokens",
		capTokens, took.Round(time.Millisecond), ok.Load(), perCall, capTokens/perCall, limited.Load(), float64(ok.Load()+limited.Load())/took.Seconds(), worst)
	if ok.Load() != n || int64(len(admitted)) != n {
		t.Fatalf("%d answered 200, %d reached the upstream; want exactly %d", ok.Load(), len(admitted), n)
	}
	if worst > capTokens {
		t.Fatalf("%d tokens admitted in one 60 s window, over the cap %d", worst, capTokens)
	}
	if limited.Load() == 0 {
		t.Fatal("no call was refused")
	}
}
