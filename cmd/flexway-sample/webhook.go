package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// webhookPath is where the OpenAI-wire sample answers as a guardrail
// webhook (ai.policies[].guardrails' webhook rule, whose contract is
// server/guardrail/webhook's package doc), so that `make run` shows the
// rule without another service.
const webhookPath = "/guardrail/check"

// webhookDenyWord is the word the sample webhook denies a text for.
const webhookDenyWord = "sample-webhook-deny"

// webhookRequest is the part of a webhook request the sample reads.
type webhookRequest struct {
	Phase string `json:"phase"`
	Texts []struct {
		Role     string `json:"role"`
		Location string `json:"location"`
		Text     string `json:"text"`
	} `json:"texts"`
}

// webhookCheck serves POST /guardrail/check: {"action":"deny","reason":…}
// when a text holds webhookDenyWord, {"action":"allow"} otherwise; a body
// that is not a webhook request is a 400 (Flexway then applies the rule's
// on_error).
func (h *handler) webhookCheck(w http.ResponseWriter, r *http.Request) {
	var req webhookRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 32<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("flexway-sample webhook: the body is not a guardrail webhook request: %v", err), "", "invalid_request")
		return
	}
	for _, t := range req.Texts {
		if strings.Contains(strings.ToLower(t.Text), webhookDenyWord) {
			writeJSON(w, http.StatusOK, map[string]string{"action": "deny",
				"reason": "the sample webhook denies texts that say " + webhookDenyWord})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"action": "allow"})
}
