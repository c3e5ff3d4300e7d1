package alias

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
)

// MaxScoreBytes bounds the scorer's answer body read by [Score], in bytes:
// a longer answer is garbage (the call goes to above).
const MaxScoreBytes = 64 << 10

// Msg is one message of the scorer's request: {"role", "text"}.
type Msg struct {
	// Role is the OpenAI message role: system, user, assistant, tool.
	Role string `json:"role"`
	// Text is the message's text parts, joined.
	Text string `json:"text"`
}

// The outcomes of [Score], for the audit line and metrics (never the
// text or the score).
const (
	// OutcomeBelow: the scorer answered a score under the threshold.
	OutcomeBelow = "below"
	// OutcomeAbove: the scorer answered a score at or over the threshold.
	OutcomeAbove = "above"
	// OutcomeSensitive: a sensitive call and an external scorer; the
	// scorer was not called.
	OutcomeSensitive = "sensitive"
	// OutcomeTimeout: no answer within the timeout (or the call's context
	// ended first).
	OutcomeTimeout = "timeout"
	// OutcomeError: the scorer could not be reached, or answered a status
	// other than 2xx.
	OutcomeError = "error"
	// OutcomeGarbage: the answer was not {"score": <a number in [0, 1]>}
	// within [MaxScoreBytes].
	OutcomeGarbage = "garbage"
)

// Verdict is what [Score] decided.
type Verdict struct {
	// Below is set when the call goes to spec.Below; else it keeps the
	// above route.
	Below bool
	// Outcome is one of the Outcome constants.
	Outcome string
}

// Classify reports whether a classifier alias's call goes to its below
// route: [Score]'s verdict. It never fails: every failure keeps the
// above route, and it costs the call at most spec.Timeout.
func Classify(ctx context.Context, spec ClassifierSpec, text string, messages []Msg, sensitive bool, client *http.Client) (below bool) {
	return Score(ctx, spec, text, messages, sensitive, client).Below
}

// Score asks the scorer at spec.URL about a call: it POSTs
// {"text": text, "messages": [{"role", "text"}, ...]} (text is the last
// user message's text) as application/json and reads {"score": s}. The
// call goes below when s < spec.Threshold; it stays above when s is at or
// over it, and on a timeout (spec.Timeout bounds the whole exchange, body
// read included), a connection error, a status other than 2xx, an answer
// over [MaxScoreBytes], or a score that is missing, not a JSON number or
// outside [0, 1]. A sensitive call and an external scorer (spec.External)
// stay above without any request: the text never leaves.
//
// client nil uses a client that follows no redirect (the text goes to the
// declared URL only). Score logs nothing: neither the text nor the score.
func Score(ctx context.Context, spec ClassifierSpec, text string, messages []Msg, sensitive bool, client *http.Client) Verdict {
	if sensitive && spec.External {
		return Verdict{Outcome: OutcomeSensitive}
	}
	if client == nil {
		client = noRedirect
	}
	if messages == nil {
		messages = []Msg{}
	}
	body, err := json.Marshal(scoreRequest{Text: text, Messages: messages})
	if err != nil {
		return Verdict{Outcome: OutcomeError}
	}
	ctx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, spec.URL, bytes.NewReader(body))
	if err != nil {
		return Verdict{Outcome: OutcomeError}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return Verdict{Outcome: failure(ctx)}
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Verdict{Outcome: OutcomeError}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxScoreBytes+1))
	if err != nil {
		return Verdict{Outcome: failure(ctx)}
	}
	if len(data) > MaxScoreBytes {
		return Verdict{Outcome: OutcomeGarbage}
	}
	var answer struct {
		Score *float64 `json:"score"`
	}
	if json.Unmarshal(data, &answer) != nil || answer.Score == nil || *answer.Score < 0 || *answer.Score > 1 {
		return Verdict{Outcome: OutcomeGarbage}
	}
	if *answer.Score < spec.Threshold {
		return Verdict{Below: true, Outcome: OutcomeBelow}
	}
	return Verdict{Outcome: OutcomeAbove}
}

// scoreRequest is the body POSTed to a scorer.
type scoreRequest struct {
	Text     string `json:"text"`
	Messages []Msg  `json:"messages"`
}

// failure names a failed exchange: a timeout when the context ended, else
// an error.
func failure(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(ctx.Err(), context.Canceled) {
		return OutcomeTimeout
	}
	return OutcomeError
}

// noRedirect is the client [Score] uses by default.
var noRedirect = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}
