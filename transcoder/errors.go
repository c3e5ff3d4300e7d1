package transcoder

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// toFault turns an error of a gRPC call to the core into the core's error.
// A status the core did not make (no Flexway ErrorInfo: the in-process
// channel's own, when it is closed or a message is over its limit) keeps
// none of its message, which describes Flexway's internals; the status is
// kept as the cause, for logs.
func toFault(err error) *faults.Error {
	// The in-process channel hands the core's error over as it is: use it
	// directly (its cause kept for the log) rather than building a status
	// and its details only to decode them again.
	var fe *faults.Error
	if errors.As(err, &fe) {
		return fe
	}
	st, ok := status.FromError(err)
	if !ok {
		return faults.As(err)
	}
	if fromCore(st) {
		return faults.FromStatus(st)
	}
	switch st.Code() {
	case codes.Canceled:
		return faults.Wrap(faults.Canceled, err, "the request was canceled")
	case codes.DeadlineExceeded:
		return faults.Wrap(faults.UpstreamTimeout, err, "the request timed out")
	case codes.Unavailable:
		return faults.Wrap(faults.Unavailable, err, "the gateway cannot take this call now; retry")
	}
	return faults.Wrap(faults.Internal, err, "internal error")
}

// fromCore reports whether st carries Flexway's ErrorInfo.
func fromCore(st *status.Status) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == faults.Domain {
			return true
		}
	}
	return false
}

// HeaderShouldRetry is the response header the OpenAI SDKs read before
// their own retry rules: "false" stops openai-go/v3 and openai-node from
// retrying (and from sleeping for a Retry-After first).
const HeaderShouldRetry = "X-Should-Retry"

// writeOpenAIError writes err in OpenAI's envelope with its HTTP status; an
// upstream 4xx is relayed with its own status and body. A refusal no retry
// within a minute can cure ([faults.Error.RetryCures]) carries
// `x-should-retry: false`. The refusal's own headers ([faults.Error].Headers:
// a per-minute cap's x-ratelimit-*) are written too.
func writeOpenAIError(w http.ResponseWriter, fe *faults.Error) {
	h := w.Header()
	for k, v := range fe.Headers {
		h.Set(k, v)
	}
	if fe.RetryAfterSeconds > 0 {
		h.Set("Retry-After", strconv.FormatInt(fe.RetryAfterSeconds, 10))
	}
	if !fe.RetryCures() {
		h.Set(HeaderShouldRetry, "false")
	}
	if fe.Reason == faults.UpstreamStatus && len(fe.UpstreamBody) > 0 {
		ct := fe.UpstreamContentType
		if ct == "" {
			ct = "application/json"
		}
		h.Set("Content-Type", ct)
		writeBody(w, fe.HTTPStatus(), fe.UpstreamBody)
		return
	}
	writeJSONBody(w, fe.HTTPStatus(), openaiErrorBody(fe))
}

// writeJSONBody answers status with body as application/json; see
// writeBody.
func writeJSONBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	writeBody(w, status, body)
}

// writeBody answers status with the whole body, declaring its
// Content-Length: the answer is not chunked, and it can leave in one write
// as soon as the handler is done with it (withAccess flushes it before
// logging the request).
func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// openaiErrorBody is the OpenAI envelope of fe, newline-terminated.
func openaiErrorBody(fe *faults.Error) []byte {
	code := string(fe.Reason)
	if fe.Reason == faults.UpstreamStatus {
		code = ""
	}
	b := openaiwire.AppendError(nil, fe.Message, fe.Reason.OpenAIType(), fe.Param, code)
	return append(b, '\n')
}

// Problem is an RFC 9457 problem details object.
type Problem struct {
	// Type is a URI reference naming the problem type; "about:blank" when
	// the status says it all.
	Type string `json:"type"`
	// Title is the status's short summary.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail,omitempty"`
	// Instance is the request path.
	Instance string `json:"instance,omitempty"`
	// Code, an extension member, is Flexway's reason (invalid_api_key,
	// not_found, ...) when the core refused the request.
	Code string `json:"code,omitempty"`
}

// WriteProblem writes an RFC 9457 `application/problem+json` response.
func WriteProblem(w http.ResponseWriter, r *http.Request, statusCode int, detail string) {
	writeProblem(w, r, Problem{Type: "about:blank", Title: http.StatusText(statusCode), Status: statusCode, Detail: detail})
}

// writeFaultProblem writes fe as problem details, its reason as code.
func writeFaultProblem(w http.ResponseWriter, r *http.Request, fe *faults.Error) {
	status := fe.HTTPStatus()
	if fe.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(fe.RetryAfterSeconds, 10))
	}
	writeProblem(w, r, Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: fe.Error(), Code: string(fe.Reason)})
}

func writeProblem(w http.ResponseWriter, r *http.Request, p Problem) {
	statusCode := p.Status
	if r != nil {
		p.Instance = r.URL.Path
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(statusCode)
	_ = json.NewEncoder(w).Encode(p)
}
