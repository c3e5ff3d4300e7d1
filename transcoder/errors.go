package transcoder

import (
	"encoding/json"
	"net/http"
	"strconv"

	"google.golang.org/grpc/status"

	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// toFault turns an error of a gRPC call to the core into the core's error.
func toFault(err error) *faults.Error {
	if st, ok := status.FromError(err); ok {
		return faults.FromStatus(st)
	}
	return faults.As(err)
}

// writeOpenAIError writes err in OpenAI's envelope with its HTTP status; an
// upstream 4xx is relayed with its own status and body.
func writeOpenAIError(w http.ResponseWriter, fe *faults.Error) {
	h := w.Header()
	if fe.RetryAfterSeconds > 0 {
		h.Set("Retry-After", strconv.FormatInt(fe.RetryAfterSeconds, 10))
	}
	if fe.Reason == faults.UpstreamStatus && len(fe.UpstreamBody) > 0 {
		ct := fe.UpstreamContentType
		if ct == "" {
			ct = "application/json"
		}
		h.Set("Content-Type", ct)
		w.WriteHeader(fe.HTTPStatus())
		_, _ = w.Write(fe.UpstreamBody)
		return
	}
	h.Set("Content-Type", "application/json")
	w.WriteHeader(fe.HTTPStatus())
	_, _ = w.Write(openaiErrorBody(fe))
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
}

// WriteProblem writes an RFC 9457 `application/problem+json` response.
func WriteProblem(w http.ResponseWriter, r *http.Request, statusCode int, detail string) {
	p := Problem{Type: "about:blank", Title: http.StatusText(statusCode), Status: statusCode, Detail: detail}
	if r != nil {
		p.Instance = r.URL.Path
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(statusCode)
	_ = json.NewEncoder(w).Encode(p)
}
