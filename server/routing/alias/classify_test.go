package alias_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/flexway/flexway/server/routing/alias"
)

// scorer starts an httptest scorer that answers with handle and counts
// its calls; it is closed at the end of the test.
func scorer(t *testing.T, handle http.HandlerFunc) (url string, calls *atomic.Int64) {
	t.Helper()
	calls = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		handle(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections() // ends a hanging handler's request context
		srv.Close()
	})
	return srv.URL + "/score", calls
}

// hang reads the request and waits until the client goes away or the test
// ends, whichever comes first: a scorer that never answers. (The server
// sees a client leave only once the body is read.)
func hang(t *testing.T) func(r *http.Request) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return func(r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}
}

func answer(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}
}

func spec(url string, external bool) alias.ClassifierSpec {
	return alias.ClassifierSpec{URL: url, External: external, Timeout: 150 * time.Millisecond, Threshold: 0.5}
}

var msgs = []alias.Msg{{Role: "system", Text: "be brief"}, {Role: "user", Text: "2+2?"}}

// TestScoreRequest pins what the scorer receives: a JSON POST of the last
// user message's text and every message's role and text.
func TestScoreRequest(t *testing.T) {
	var got struct {
		method, contentType string
		body                map[string]any
	}
	url, _ := scorer(t, func(w http.ResponseWriter, r *http.Request) {
		got.method, got.contentType = r.Method, r.Header.Get("Content-Type")
		json.NewDecoder(r.Body).Decode(&got.body)
		io.WriteString(w, `{"score": 0.1}`)
	})
	if v := alias.Score(context.Background(), spec(url, true), "2+2?", msgs, false, nil); v != (alias.Verdict{Below: true, Outcome: alias.OutcomeBelow}) {
		t.Errorf("Score = %+v, want below", v)
	}
	want := map[string]any{"text": "2+2?", "messages": []any{
		map[string]any{"role": "system", "text": "be brief"}, map[string]any{"role": "user", "text": "2+2?"}}}
	if got.method != http.MethodPost || got.contentType != "application/json" {
		t.Errorf("request = %s %s, want POST application/json", got.method, got.contentType)
	}
	if diff := cmp.Diff(want, got.body); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
}

func TestScoreOutcomes(t *testing.T) {
	big := `{"score": 0.1, "pad": "` + strings.Repeat("x", alias.MaxScoreBytes) + `"}`
	tests := []struct {
		name   string
		handle http.HandlerFunc
		want   alias.Verdict
	}{
		{"below threshold", answer(`{"score": 0.49}`), alias.Verdict{Below: true, Outcome: alias.OutcomeBelow}},
		{"zero", answer(`{"score": 0}`), alias.Verdict{Below: true, Outcome: alias.OutcomeBelow}},
		{"at threshold", answer(`{"score": 0.5}`), alias.Verdict{Outcome: alias.OutcomeAbove}},
		{"above threshold", answer(`{"score": 0.93}`), alias.Verdict{Outcome: alias.OutcomeAbove}},
		{"one", answer(`{"score": 1}`), alias.Verdict{Outcome: alias.OutcomeAbove}},
		{"garbage", answer(`<html>no</html>`), alias.Verdict{Outcome: alias.OutcomeGarbage}},
		{"score a string", answer(`{"score": "0.1"}`), alias.Verdict{Outcome: alias.OutcomeGarbage}},
		{"score missing", answer(`{"label": "easy"}`), alias.Verdict{Outcome: alias.OutcomeGarbage}},
		{"score null", answer(`{"score": null}`), alias.Verdict{Outcome: alias.OutcomeGarbage}},
		{"score negative", answer(`{"score": -0.1}`), alias.Verdict{Outcome: alias.OutcomeGarbage}},
		{"score over one", answer(`{"score": 1.5}`), alias.Verdict{Outcome: alias.OutcomeGarbage}},
		{"answer too large", answer(big), alias.Verdict{Outcome: alias.OutcomeGarbage}},
		{"500", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"score": 0.1}`)
		}, alias.Verdict{Outcome: alias.OutcomeError}},
		{"redirect not followed", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://elsewhere.example/score", http.StatusTemporaryRedirect)
		}, alias.Verdict{Outcome: alias.OutcomeError}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, calls := scorer(t, tt.handle)
			if got := alias.Score(context.Background(), spec(url, true), "hi", msgs, false, nil); got != tt.want {
				t.Errorf("Score = %+v, want %+v", got, tt.want)
			}
			if calls.Load() != 1 {
				t.Errorf("scorer called %d times, want 1", calls.Load())
			}
			if got := alias.Classify(context.Background(), spec(url, true), "hi", msgs, false, nil); got != tt.want.Below {
				t.Errorf("Classify = %v, want %v", got, tt.want.Below)
			}
		})
	}
}

// TestScoreHangHonoursTimeout: a scorer that never answers costs the call
// its timeout and no more, and the call stays above.
func TestScoreHangHonoursTimeout(t *testing.T) {
	for _, tt := range []struct {
		name   string
		handle func(wait func(*http.Request)) http.HandlerFunc
	}{
		{"no headers", func(wait func(*http.Request)) http.HandlerFunc {
			return func(_ http.ResponseWriter, r *http.Request) { wait(r) }
		}},
		{"headers then a stalled body", func(wait func(*http.Request)) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"score": `)
				w.(http.Flusher).Flush()
				wait(r)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			url, _ := scorer(t, tt.handle(hang(t)))
			sp := spec(url, false)
			sp.Timeout = 100 * time.Millisecond
			start := time.Now()
			v := alias.Score(context.Background(), sp, "hi", msgs, false, nil)
			elapsed := time.Since(start)
			if v != (alias.Verdict{Outcome: alias.OutcomeTimeout}) {
				t.Errorf("Score = %+v, want a timeout, above", v)
			}
			if elapsed < sp.Timeout || elapsed > sp.Timeout+150*time.Millisecond {
				t.Errorf("took %v, want the timeout %v plus at most 150ms", elapsed, sp.Timeout)
			}
		})
	}
}

func TestScoreUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	if v := alias.Score(context.Background(), spec(url, false), "hi", msgs, false, nil); v != (alias.Verdict{Outcome: alias.OutcomeError}) {
		t.Errorf("Score = %+v, want an error, above", v)
	}
	if alias.Classify(context.Background(), spec("http://[::1", false), "hi", msgs, false, nil) {
		t.Error("an unparsable URL went below")
	}
}

// TestScoreSensitive: an external scorer never receives a sensitive call's
// text; an internal one does.
func TestScoreSensitive(t *testing.T) {
	url, calls := scorer(t, answer(`{"score": 0.1}`))
	if v := alias.Score(context.Background(), spec(url, true), "secret plan", msgs, true, nil); v != (alias.Verdict{Outcome: alias.OutcomeSensitive}) {
		t.Errorf("external, sensitive: Score = %+v, want above without a call", v)
	}
	if calls.Load() != 0 {
		t.Fatalf("the external scorer was called %d times for a sensitive call", calls.Load())
	}
	if !alias.Classify(context.Background(), spec(url, false), "secret plan", msgs, true, nil) || calls.Load() != 1 {
		t.Errorf("internal, sensitive: want the scorer called once and below; called %d", calls.Load())
	}
}

// TestScoreCallerContext: a caller's context that ends first ends the
// scorer call too.
func TestScoreCallerContext(t *testing.T) {
	wait := hang(t)
	url, _ := scorer(t, func(_ http.ResponseWriter, r *http.Request) { wait(r) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sp := spec(url, false)
	sp.Timeout = 10 * time.Second
	start := time.Now()
	if v := alias.Score(ctx, sp, "hi", nil, false, nil); v.Below || time.Since(start) > time.Second {
		t.Errorf("Score = %+v after %v, want above at once", v, time.Since(start))
	}
}
