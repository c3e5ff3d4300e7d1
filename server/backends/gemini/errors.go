package gemini

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// maxErrorMessage bounds the upstream message kept in a relayed 4xx.
const maxErrorMessage = 4 << 10

// gError is Google's error envelope
// (https://ai.google.dev/gemini-api/docs/troubleshooting#error-codes,
// https://cloud.google.com/apis/design/errors#http_mapping).
type gError struct {
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []struct {
			Type       string `json:"@type"`
			RetryDelay string `json:"retryDelay"`
			Reason     string `json:"reason"`
		} `json:"details"`
	} `json:"error"`
}

// DecodeError maps a Gemini error answer, its HTTP status, the seconds of
// its Retry-After header as the shared upstream path read it (0 when
// none) and its body, to the error the gateway answers:
//
//   - 401 and 403 (UNAUTHENTICATED, PERMISSION_DENIED), and a 400 whose
//     google.rpc.ErrorInfo reason is API_KEY_* (Gemini's answer to a bad
//     API key: API_KEY_INVALID, API_KEY_EXPIRED), refuse the gateway's
//     own credentials: upstream_error (502) wrapping
//     [backends.ErrUpstreamAuth]; the body is neither kept nor shown;
//   - 429 (RESOURCE_EXHAUSTED) is relayed as a 429 with Retry-After: the
//     header's seconds, else the google.rpc.RetryInfo retryDelay of the
//     body;
//   - any other 4xx keeps its status; the relayed body is OpenAI's error
//     envelope with Gemini's message and the status mapped to OpenAI's type
//     (INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE → and other 4xx
//     invalid_request_error, NOT_FOUND → not_found_error, 429 →
//     rate_limit_error), code being Gemini's status;
//   - a 5xx (INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED: Gemini's overload)
//     or any other status, a JSON error or garbage or HTML alike, is
//     upstream_error (502), which the fallback rules act on; its cause, for
//     logs, says the status and Gemini's status name, never the message.
//
// A 4xx whose body is not Google's envelope keeps its status with a
// generic message.
func DecodeError(status int, retryAfterSeconds int64, body []byte) *faults.Error {
	var ge gError
	parsed := json.Unmarshal(body, &ge) == nil && ge.Error != nil
	var gstatus, message string
	keyRefused := false
	if parsed {
		gstatus, message = ge.Error.Status, ge.Error.Message
		if retryAfterSeconds <= 0 {
			for _, d := range ge.Error.Details {
				if strings.HasSuffix(d.Type, "google.rpc.RetryInfo") {
					retryAfterSeconds = retryDelaySeconds(d.RetryDelay)
				}
			}
		}
		for _, d := range ge.Error.Details {
			if strings.HasSuffix(d.Type, "google.rpc.ErrorInfo") && strings.HasPrefix(d.Reason, "API_KEY_") {
				keyRefused = true
			}
		}
	}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden || keyRefused:
		return &faults.Error{
			Reason:  faults.UpstreamError,
			Message: "the backend refused the gateway's credentials",
			Err:     fmt.Errorf("gemini upstream status %d %s: %w", status, logStatus(gstatus), backends.ErrUpstreamAuth),
		}
	case status < 400 || status > 499:
		return &faults.Error{
			Reason:            faults.UpstreamError,
			Message:           fmt.Sprintf("the Gemini upstream answered %d", status),
			RetryAfterSeconds: retryAfterSeconds,
			Err:               fmt.Errorf("gemini upstream status %d %s, %d body bytes", status, logStatus(gstatus), len(body)),
		}
	}
	if message == "" {
		message = fmt.Sprintf("the Gemini upstream answered %d", status)
	}
	if len(message) > maxErrorMessage {
		message = message[:maxErrorMessage]
	}
	typ := "invalid_request_error"
	switch {
	case status == http.StatusTooManyRequests || gstatus == "RESOURCE_EXHAUSTED":
		typ = "rate_limit_error"
	case status == http.StatusNotFound || gstatus == "NOT_FOUND":
		typ = "not_found_error"
	}
	return &faults.Error{
		Reason:              faults.UpstreamStatus,
		Message:             fmt.Sprintf("the Gemini upstream answered %d", status),
		RetryAfterSeconds:   retryAfterSeconds,
		UpstreamHTTPStatus:  status,
		UpstreamContentType: "application/json",
		UpstreamBody:        openaiwire.AppendError(nil, message, typ, "", logStatus(gstatus)),
	}
}

// logStatus is a Gemini status name as logs and codes keep it: upper-case
// letters and '_' only, cut to 32 bytes.
func logStatus(s string) string {
	if len(s) > 32 {
		s = s[:32]
	}
	for _, r := range s {
		if (r < 'A' || r > 'Z') && r != '_' {
			return ""
		}
	}
	return s
}

// retryDelaySeconds reads a google.protobuf.Duration in JSON ("30s",
// "1.5s"), rounded up, capped at a day; 0 when unreadable.
func retryDelaySeconds(d string) int64 {
	v, err := time.ParseDuration(d)
	if err != nil || v <= 0 {
		return 0
	}
	s := int64((v + time.Second - 1) / time.Second)
	return min(s, 24*60*60)
}
