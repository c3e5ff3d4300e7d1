package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexway/flexway/server/guardrail"
	"github.com/google/go-cmp/cmp"
)

// sample is a prompt-phase request with two texts and tools.
func sample() Request {
	return Request{
		Phase: guardrail.Prompt,
		Texts: []Text{
			{Role: "system", Location: "messages[0].content", Text: "be brief <b>"},
			{Role: "user", Location: "messages[1].content", Text: "my card is 4111 1111 1111 1111"},
		},
		Tools:    json.RawMessage(`[{"type":"function","function":{"name":"f"}}]`),
		Metadata: Metadata{Tenant: "acme", Agent: "bot", Policy: "acme-governed", Operation: "ai.chatCompletions", Phase: "ignored", RequestID: "req-1"},
	}
}

// server answers status and body, recording the request it got.
func server(t *testing.T, status int, body string, got *http.Request, gotBody *[]byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got != nil {
			*got = *r.Clone(context.Background())
			*gotBody, _ = io.ReadAll(r.Body)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRequestContract(t *testing.T) {
	t.Parallel()
	var got http.Request
	var body []byte
	srv := server(t, 200, `{"action":"allow"}`, &got, &body)
	c := &Client{URL: srv.URL + "/check", Timeout: time.Second, OnError: Deny, External: true}
	v, err := c.Check(context.Background(), sample())
	if err != nil || v.Action != Allow {
		t.Fatalf("Check = %+v, %v; want allow", v, err)
	}
	if got.Method != http.MethodPost || got.URL.Path != "/check" || got.Header.Get("Content-Type") != "application/json" {
		t.Errorf("request %s %s, Content-Type %q", got.Method, got.URL.Path, got.Header.Get("Content-Type"))
	}
	for name := range got.Header {
		switch name {
		case "Content-Type", "Accept", "Accept-Encoding", "User-Agent", "Content-Length":
		default:
			t.Errorf("header %s sent", name)
		}
	}
	want := `{"phase":"prompt","texts":[{"role":"system","location":"messages[0].content","text":"be brief <b>"},{"role":"user","location":"messages[1].content","text":"my card is 4111 1111 1111 1111"}],"tools":[{"type":"function","function":{"name":"f"}}],"metadata":{"tenant":"acme","agent":"bot","policy":"acme-governed","operation":"ai.chatCompletions","phase":"prompt","request_id":"req-1"}}` + "\n"
	if diff := cmp.Diff(want, string(body)); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}

	// No tools, no texts, response phase: null and [].
	req := Request{Phase: guardrail.Response}
	if _, err := c.Check(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var w map[string]any
	if err := json.Unmarshal(body, &w); err != nil {
		t.Fatal(err)
	}
	if w["tools"] != nil || w["phase"] != "response" || w["metadata"].(map[string]any)["phase"] != "response" {
		t.Errorf("empty request body: %s", body)
	}
	if texts, ok := w["texts"].([]any); !ok || len(texts) != 0 {
		t.Errorf("texts: %s", body)
	}
}

func TestVerdicts(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", MaxReasonBytes) // 2 bytes each
	tests := []struct {
		name   string
		status int
		answer string
		want   Verdict
		err    error
	}{
		{"allow", 200, `{"action":"allow"}`, Verdict{Action: Allow}, nil},
		{"allow on 202", 202, `{"action":"allow"}`, Verdict{Action: Allow}, nil},
		{"deny", 200, `{"action":"deny","reason":"card number"}`, Verdict{Action: Deny, Reason: "card number"}, nil},
		{"deny long reason", 200, `{"action":"deny","reason":"` + long + `"}`, Verdict{Action: Deny, Reason: long[:MaxReasonBytes]}, nil},
		{"replace", 200, `{"action":"replace","texts":[{"location":"messages[1].content","text":"my card is [REDACTED:card]"}]}`,
			Verdict{Action: Replace, Texts: []Replacement{{Location: "messages[1].content", Text: "my card is [REDACTED:card]"}}}, nil},
		{"replace nothing", 200, `{"action":"replace","texts":[]}`, Verdict{Action: Replace, Texts: []Replacement{}}, nil},
		{"replace unknown location", 200, `{"action":"replace","texts":[{"location":"messages[7].content","text":"x"}]}`, Verdict{Action: Deny, Reason: "webhook error"}, ErrGarbage},
		{"replace twice", 200, `{"action":"replace","texts":[{"location":"messages[1].content","text":"x"},{"location":"messages[1].content","text":"y"}]}`, Verdict{Action: Deny, Reason: "webhook error"}, ErrGarbage},
		{"unknown action", 200, `{"action":"maybe"}`, Verdict{Action: Deny, Reason: "webhook error"}, ErrGarbage},
		{"not JSON", 200, `allow`, Verdict{Action: Deny, Reason: "webhook error"}, ErrGarbage},
		{"two values", 200, `{"action":"allow"}{"action":"deny"}`, Verdict{Action: Deny, Reason: "webhook error"}, ErrGarbage},
		{"too long", 200, `{"action":"allow","reason":"` + strings.Repeat("x", MaxAnswerBytes) + `"}`, Verdict{Action: Deny, Reason: "webhook error"}, ErrGarbage},
		{"500", 500, `{"action":"allow"}`, Verdict{Action: Deny, Reason: "webhook error"}, ErrStatus},
		{"404", 404, ``, Verdict{Action: Deny, Reason: "webhook error"}, ErrStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := server(t, tt.status, tt.answer, nil, nil)
			c := &Client{URL: srv.URL, Timeout: 2 * time.Second, OnError: Deny, External: true}
			v, err := c.Check(context.Background(), sample())
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Errorf("err = %v, want %v", err, tt.err)
			}
			if diff := cmp.Diff(tt.want, v); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOnErrorAllow(t *testing.T) {
	t.Parallel()
	srv := server(t, 503, ``, nil, nil)
	c := &Client{URL: srv.URL, OnError: Allow}
	v, err := c.Check(context.Background(), sample())
	if !errors.Is(err, ErrStatus) || v.Action != Allow {
		t.Errorf("Check = %+v, %v; want allow with ErrStatus", v, err)
	}
}

// TestTimeoutBoundsTheWholeExchange: headers at once and a body that
// never ends, or no headers at all, both end at the timeout.
func TestTimeoutBoundsTheWholeExchange(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			w.WriteHeader(200)
			io.WriteString(w, `{"action":`)
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	for _, path := range []string{"/headers", "/body"} {
		c := &Client{URL: srv.URL + path, Timeout: 150 * time.Millisecond, OnError: Deny}
		start := time.Now()
		v, err := c.Check(context.Background(), sample())
		took := time.Since(start)
		if !errors.Is(err, ErrTimeout) || v.Action != Deny {
			t.Errorf("%s: Check = %+v, %v; want deny with ErrTimeout", path, v, err)
		}
		if took < 150*time.Millisecond || took > time.Second {
			t.Errorf("%s: took %s, want about 150ms", path, took)
		}
	}
	close(release) // before srv.Close (cleanups run after), which waits for handlers
}

// TestSensitiveNeverSentToAnExternalWebhook: the on_error verdict, no
// request; an internal webhook does get the text.
func TestSensitiveNeverSentToAnExternalWebhook(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, `{"action":"allow"}`)
	}))
	t.Cleanup(srv.Close)
	req := sample()
	req.Sensitive = true
	for _, onErr := range []Action{Deny, Allow} {
		c := &Client{URL: srv.URL, OnError: onErr, External: true}
		v, err := c.Check(context.Background(), req)
		if !errors.Is(err, ErrSensitive) || v.Action != onErr {
			t.Errorf("on_error %s: Check = %+v, %v; want %s with ErrSensitive", onErr, v, err, onErr)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("external webhook hit %d times with a sensitive call", n)
	}
	internal := &Client{URL: srv.URL, OnError: Deny, External: false}
	if v, err := internal.Check(context.Background(), req); err != nil || v.Action != Allow || hits.Load() != 1 {
		t.Errorf("internal webhook: %+v, %v, %d hits; want allow, 1 hit", v, err, hits.Load())
	}
}

// TestNoRedirectNoSecretInErrors: a redirect is an error status and its
// target is never hit; the URL's query and user info stay out of errors.
func TestNoRedirectNoSecretInErrors(t *testing.T) {
	t.Parallel()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("redirect followed to %s", r.URL)
	}))
	t.Cleanup(target.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)
	u := strings.Replace(srv.URL, "http://", "http://user:pa55@", 1) + "/check?token=SECRET-TOKEN"
	c := &Client{URL: u, OnError: Deny}
	_, err := c.Check(context.Background(), sample())
	if !errors.Is(err, ErrStatus) {
		t.Errorf("redirect: %v, want ErrStatus", err)
	}
	// Unreachable: a closed port. (The card's text is looked for whole:
	// a port like 41117 holds "4111".)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	c2 := &Client{URL: "http://user:pa55@" + addr + "/x?token=SECRET-TOKEN", OnError: Deny}
	_, err2 := c2.Check(context.Background(), sample())
	if !errors.Is(err2, ErrUnreachable) {
		t.Errorf("closed port: %v, want ErrUnreachable", err2)
	}
	for _, e := range []error{err, err2} {
		if strings.Contains(e.Error(), "SECRET") || strings.Contains(e.Error(), "pa55") || strings.Contains(e.Error(), "4111 1111") {
			t.Errorf("error leaks: %v", e)
		}
	}
}

func TestCanceledContext(t *testing.T) {
	t.Parallel()
	srv := server(t, 200, `{"action":"allow"}`, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := &Client{URL: srv.URL, OnError: Deny}
	v, err := c.Check(ctx, sample())
	if !errors.Is(err, ErrUnreachable) || v.Action != Deny {
		t.Errorf("Check(canceled) = %+v, %v", v, err)
	}
}
