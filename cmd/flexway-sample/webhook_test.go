package main

import (
	"testing"
)

// TestWebhookCheck: the sample webhook allows, denies a text holding the
// deny word (any case) with its reason, and answers 400 to a body that is
// not a webhook request.
func TestWebhookCheck(t *testing.T) {
	srv := newTestServer(t, fastOptions())
	for _, tt := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"allow", `{"phase":"prompt","texts":[{"role":"user","location":"messages[0].content","text":"hello"}]}`, 200, `{"action":"allow"}`},
		{"deny", `{"phase":"response","texts":[{"role":"assistant","location":"choices[0].message.content","text":"ok"},{"text":"say SAMPLE-WEBHOOK-DENY"}]}`, 200,
			`{"action":"deny","reason":"the sample webhook denies texts that say sample-webhook-deny"}`},
	} {
		resp, body := do(t, srv, "POST", webhookPath, tt.body, nil)
		if resp.StatusCode != tt.status || string(body) != tt.want+"\n" {
			t.Errorf("%s: %d %q, want %d %q", tt.name, resp.StatusCode, body, tt.status, tt.want)
		}
	}
	if resp, _ := do(t, srv, "POST", webhookPath, `not json`, nil); resp.StatusCode != 400 {
		t.Errorf("garbage: %d, want 400", resp.StatusCode)
	}
	if resp, _ := do(t, srv, "GET", webhookPath, "", nil); resp.StatusCode != 405 {
		t.Errorf("GET: %d, want 405", resp.StatusCode)
	}
}
