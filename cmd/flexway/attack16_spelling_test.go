package main

import (
	"testing"
)

// TestAttack16ModelBudgetSpelling: a policy's per-minute cap matched on
// model m (m is main's model and its default_model) holds every call
// served as m. A second call naming "M" (or any name the backend does not
// list) is served by the same backend as model m — the backend maps an
// unlisted model to its default_model — but the policy, matched on the
// name as sent, does not select it: the cap on m is passed by a change of
// case.
func TestAttack16ModelBudgetSpelling(t *testing.T) {
	up := newUpstream(t, usageUpstream(10, 5))
	g := startGateway(t, rateConfig(t, up.URL, "", "  policies:\n    - name: m-rpm\n      match: {model: m}\n      budget: {requests_per_minute: 1}\n"))
	if resp, body := postKey(t, g, demoKey, chatBody); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, body)
	}
	resp, _ := postKey(t, g, demoKey, `{"model":"M","max_tokens":40,"messages":[{"role":"user","content":"Hi"}]}`)
	reqs := up.requests()
	if resp.StatusCode == 200 {
		t.Fatalf("second call in the minute, named \"M\", served (upstream saw model %v) past m-rpm's requests_per_minute 1", reqs[len(reqs)-1].Body["model"])
	}
}
