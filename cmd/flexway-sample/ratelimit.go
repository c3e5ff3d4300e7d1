package main

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// presentedKey is the API key r carries: the bearer token of
// Authorization (openai and a2a wires), else x-api-key (anthropic), else
// x-goog-api-key (gemini); empty when none.
func presentedKey(r *http.Request) string {
	if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(token)
	}
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	return r.Header.Get("X-Goog-Api-Key")
}

// rateLimited answers 429 with Retry-After: opts.rateLimitRetryAfter
// seconds, in OpenAI's error envelope, to a request bearing
// opts.rateLimitKey (--rate-limit-key), and reports whether it did: the
// upstream side of Flexway's credential pools, one key rate limited while
// the others serve.
func (h *handler) rateLimited(w http.ResponseWriter, r *http.Request) bool {
	k := h.opts.rateLimitKey
	if k == "" || subtle.ConstantTimeCompare([]byte(presentedKey(r)), []byte(k)) != 1 {
		return false
	}
	w.Header().Set("Retry-After", strconv.Itoa(h.opts.rateLimitRetryAfter))
	writeError(w, http.StatusTooManyRequests,
		fmt.Sprintf("flexway-sample: this key is rate limited (--rate-limit-key); retry after %d s.", h.opts.rateLimitRetryAfter), "", "rate_limit_exceeded")
	return true
}
