package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the google.rpc.ErrorInfo domain of every Flexway error.
const Domain = "flexway.dev"

// Reason is a closed list of failure reasons; each is also the OpenAI error
// `code` written on /v1/* and the ErrorInfo reason on gRPC.
type Reason string

// The reasons, per DESIGN.md's error table.
const (
	// InvalidAPIKey: no or unknown API key (401, UNAUTHENTICATED).
	InvalidAPIKey Reason = "invalid_api_key"
	// InvalidRequest: bad JSON, bad field, unknown part type (400, INVALID_ARGUMENT).
	InvalidRequest Reason = "invalid_request"
	// RequestTooLarge: body or image over its limit (413, INVALID_ARGUMENT).
	RequestTooLarge Reason = "request_too_large"
	// NotFound: unknown path or method (404, NOT_FOUND / UNIMPLEMENTED).
	NotFound Reason = "not_found"
	// CapabilityUnavailable: nothing serves the capability the call needs
	// (400, FAILED_PRECONDITION).
	CapabilityUnavailable Reason = "capability_unavailable"
	// BudgetExceeded: a hard cap is reached (429, RESOURCE_EXHAUSTED).
	BudgetExceeded Reason = "budget_exceeded"
	// SensitiveNoInternalBackend: a sensitive call no internal backend can
	// serve (403, PERMISSION_DENIED).
	SensitiveNoInternalBackend Reason = "sensitive_no_internal_backend"
	// UnknownTenant: a trusted relay passed a tenant this gateway does not
	// declare (403, PERMISSION_DENIED): the relay's key is valid, but no
	// budget can be charged to the tenant.
	UnknownTenant Reason = "unknown_tenant"
	// ModelNotAllowed: a policy's governance.models does not list the
	// requested model or alias (403, PERMISSION_DENIED; param "model").
	ModelNotAllowed Reason = "model_not_allowed"
	// BackendNotAllowed: a policy's governance.backends leaves no backend
	// of the call's plan (403, PERMISSION_DENIED).
	BackendNotAllowed Reason = "backend_not_allowed"
	// GuardrailViolation: a guardrail rule of a policy refused the prompt
	// or the answer (403, PERMISSION_DENIED; OpenAI type "content_filter",
	// also on a stream's error event). The message names the policy and
	// the rule's type, never the matched text.
	GuardrailViolation Reason = "guardrail_violation"
	// RateLimited: a per-minute cap (tokens_per_minute,
	// requests_per_minute) holds the call back, or every credential of the
	// backend's pool (ai.backends.NAME.credentials) rests after its
	// upstream's 429 (429, RESOURCE_EXHAUSTED); Retry-After is when the
	// window admits the call, or the earliest key's return.
	RateLimited Reason = "rate_limited"
	// UpstreamError: every backend failed, or one refused the gateway's
	// own credentials (502, UNAVAILABLE).
	UpstreamError Reason = "upstream_error"
	// UpstreamCredentialsExhausted: every credential of the backend's pool
	// was refused by its upstream (401, 402 or 403) and is set aside until
	// restart or reload (502, UNAVAILABLE).
	UpstreamCredentialsExhausted Reason = "upstream_credentials_exhausted"
	// NoBackendAvailable: every circuit is open (503, UNAVAILABLE).
	NoBackendAvailable Reason = "no_backend_available"
	// UpstreamTimeout: the backend timed out (504, DEADLINE_EXCEEDED).
	UpstreamTimeout Reason = "upstream_timeout"
	// UpstreamStatus: the upstream answered a 4xx; its status and body are
	// relayed as they are (status carried in ErrorInfo metadata
	// "http_status", body in a google.api.HttpBody detail).
	UpstreamStatus Reason = "upstream_status"
	// Unavailable: the gateway is shutting down or not ready (503, UNAVAILABLE).
	Unavailable Reason = "unavailable"
	// Canceled: the caller went away (499, CANCELED).
	Canceled Reason = "canceled"
	// Internal: a bug; the message never says more (500, INTERNAL).
	Internal Reason = "internal_error"
)

// Reasons lists every [Reason], for conformance tests.
var Reasons = []Reason{
	InvalidAPIKey, InvalidRequest, RequestTooLarge, NotFound, CapabilityUnavailable,
	BudgetExceeded, SensitiveNoInternalBackend, UnknownTenant, ModelNotAllowed, BackendNotAllowed, GuardrailViolation, RateLimited, UpstreamError,
	UpstreamCredentialsExhausted, NoBackendAvailable, UpstreamTimeout, UpstreamStatus, Unavailable,
	Canceled, Internal,
}

// reasonInfo is the fixed mapping of a reason.
type reasonInfo struct {
	code       codes.Code
	httpStatus int
	openAIType string
}

var reasonTable = map[Reason]reasonInfo{
	InvalidAPIKey:                {codes.Unauthenticated, http.StatusUnauthorized, "invalid_request_error"},
	InvalidRequest:               {codes.InvalidArgument, http.StatusBadRequest, "invalid_request_error"},
	RequestTooLarge:              {codes.InvalidArgument, http.StatusRequestEntityTooLarge, "invalid_request_error"},
	NotFound:                     {codes.NotFound, http.StatusNotFound, "invalid_request_error"},
	CapabilityUnavailable:        {codes.FailedPrecondition, http.StatusBadRequest, "invalid_request_error"},
	BudgetExceeded:               {codes.ResourceExhausted, http.StatusTooManyRequests, "insufficient_quota"},
	SensitiveNoInternalBackend:   {codes.PermissionDenied, http.StatusForbidden, "permission_error"},
	UnknownTenant:                {codes.PermissionDenied, http.StatusForbidden, "permission_error"},
	ModelNotAllowed:              {codes.PermissionDenied, http.StatusForbidden, "permission_error"},
	BackendNotAllowed:            {codes.PermissionDenied, http.StatusForbidden, "permission_error"},
	GuardrailViolation:           {codes.PermissionDenied, http.StatusForbidden, "content_filter"},
	RateLimited:                  {codes.ResourceExhausted, http.StatusTooManyRequests, "requests"},
	UpstreamError:                {codes.Unavailable, http.StatusBadGateway, "server_error"},
	UpstreamCredentialsExhausted: {codes.Unavailable, http.StatusBadGateway, "server_error"},
	NoBackendAvailable:           {codes.Unavailable, http.StatusServiceUnavailable, "server_error"},
	UpstreamTimeout:              {codes.DeadlineExceeded, http.StatusGatewayTimeout, "server_error"},
	UpstreamStatus:               {codes.FailedPrecondition, 0, ""},
	Unavailable:                  {codes.Unavailable, http.StatusServiceUnavailable, "server_error"},
	Canceled:                     {codes.Canceled, 499, "server_error"},
	Internal:                     {codes.Internal, http.StatusInternalServerError, "server_error"},
}

// Error is the core's one error type. Message is shown to the client, so it
// never carries a secret, a prompt or a raw upstream error; Err, which may,
// is only logged.
type Error struct {
	// Reason is the failure reason; it decides the code and HTTP status.
	Reason Reason
	// Message is the client-facing message.
	Message string
	// Param names the offending request field in OpenAI's notation
	// (`messages[2].content[1].type`), or is empty.
	Param string
	// RetryAfterSeconds, when positive, is written as Retry-After.
	RetryAfterSeconds int64
	// UpstreamHTTPStatus is the upstream's status for [UpstreamStatus].
	UpstreamHTTPStatus int
	// UpstreamContentType and UpstreamBody are the upstream's response, for
	// [UpstreamStatus], relayed unchanged.
	UpstreamContentType string
	UpstreamBody        []byte
	// Headers are response headers to send with the refusal besides
	// Retry-After, by lower-case name: a per-minute refusal's x-ratelimit-*
	// (OpenAI's names). The HTTP front writes them; the budget interceptor
	// sends them to a gRPC caller as header metadata. They are not part of
	// [Error.GRPCStatus]. Nil for none.
	Headers map[string]string
	// Err is the underlying cause, for logs only.
	Err error
}

// New returns an error with reason r and a client-facing message.
func New(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an error with reason r, a client-facing message, and cause
// err for logs.
func Wrap(r Reason, err error, message string) *Error {
	return &Error{Reason: r, Message: message, Err: err}
}

// Error implements error. It returns the client-facing message only.
func (e *Error) Error() string {
	if e.Param != "" {
		return e.Message + " (" + e.Param + ")"
	}
	return e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Code returns the gRPC code of the error. An upstream 4xx maps by
// [CodeFromHTTPStatus].
func (e *Error) Code() codes.Code {
	if e.Reason == UpstreamStatus {
		return CodeFromHTTPStatus(e.UpstreamHTTPStatus)
	}
	if info, ok := reasonTable[e.Reason]; ok {
		return info.code
	}
	return codes.Internal
}

// HTTPStatus returns the HTTP status written on /v1/*.
func (e *Error) HTTPStatus() int {
	if e.Reason == UpstreamStatus && e.UpstreamHTTPStatus > 0 {
		return e.UpstreamHTTPStatus
	}
	if info, ok := reasonTable[e.Reason]; ok && info.httpStatus != 0 {
		return info.httpStatus
	}
	return http.StatusInternalServerError
}

// RetryCureSeconds is the longest wait a refusal may ask for and still be
// one a client's automatic retry is meant to cure: 60 seconds, the longest
// Retry-After the OpenAI SDKs (openai-go/v3, openai-node) wait for before
// they fall back to their own backoff.
const RetryCureSeconds = 60

// RetryCures reports whether a retry within [RetryCureSeconds] may cure the
// refusal. It is false for a budget refusal ([BudgetExceeded]) that has no
// Retry-After (the call is bigger than the whole cap: it never fits) or
// whose Retry-After is longer than a minute (a day, month or euro cap,
// which resets at its rollover); true for one with a short Retry-After (a
// per-minute cap, or a day cap in its last minute) and for every other
// error, whose retry rules are the SDKs' own. A per-minute refusal
// ([RateLimited]) without Retry-After (a call bigger than the whole
// per-minute cap: it never fits) cures by no retry either. The HTTP front
// writes `x-should-retry: false` when it is false.
func (e *Error) RetryCures() bool {
	if e.Reason == RateLimited {
		return e.RetryAfterSeconds > 0
	}
	if e.Reason != BudgetExceeded {
		return true
	}
	return e.RetryAfterSeconds > 0 && e.RetryAfterSeconds <= RetryCureSeconds
}

// OpenAIType returns the OpenAI error `type` for the reason.
func (r Reason) OpenAIType() string {
	if info, ok := reasonTable[r]; ok && info.openAIType != "" {
		return info.openAIType
	}
	return "invalid_request_error"
}

// GRPCStatus implements the interface status.FromError looks for: the code,
// the message, and a google.rpc.ErrorInfo{reason, domain, metadata} detail
// (metadata: "param", "retry_after_seconds", "http_status"), plus a
// google.api.HttpBody detail holding a relayed upstream body.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(e.Code(), e.Message)
	md := map[string]string{}
	if e.Param != "" {
		md["param"] = e.Param
	}
	if e.RetryAfterSeconds > 0 {
		md["retry_after_seconds"] = strconv.FormatInt(e.RetryAfterSeconds, 10)
	}
	if e.UpstreamHTTPStatus > 0 {
		md["http_status"] = strconv.Itoa(e.UpstreamHTTPStatus)
	}
	info := &errdetails.ErrorInfo{Reason: string(e.Reason), Domain: Domain, Metadata: md}
	var withDetails *status.Status
	var err error
	if e.Reason == UpstreamStatus && len(e.UpstreamBody) > 0 {
		withDetails, err = st.WithDetails(info, &httpbody.HttpBody{ContentType: e.UpstreamContentType, Data: e.UpstreamBody})
	} else {
		withDetails, err = st.WithDetails(info)
	}
	if err != nil {
		return st
	}
	return withDetails
}

// FromStatus rebuilds the [*Error] a status was made from, by
// [Error.GRPCStatus]. A status without Flexway's ErrorInfo maps by code
// alone (see [ReasonFromCode]).
func FromStatus(st *status.Status) *Error {
	e := &Error{Message: st.Message()}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() != Domain {
				continue
			}
			e.Reason = Reason(d.GetReason())
			e.Param = d.GetMetadata()["param"]
			e.RetryAfterSeconds, _ = strconv.ParseInt(d.GetMetadata()["retry_after_seconds"], 10, 64)
			e.UpstreamHTTPStatus, _ = strconv.Atoi(d.GetMetadata()["http_status"])
		case *httpbody.HttpBody:
			e.UpstreamContentType = d.GetContentType()
			e.UpstreamBody = d.GetData()
		}
	}
	if e.Reason == "" {
		e.Reason = ReasonFromCode(st.Code())
	}
	return e
}

// As returns err as an [*Error]: itself when it is one (through wrapping),
// Canceled or UpstreamTimeout for context errors, the reason of a gRPC
// status, and Internal otherwise (with err kept as the cause).
func As(err error) *Error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) {
		return fe
	}
	switch {
	case errors.Is(err, context.Canceled):
		return Wrap(Canceled, err, "the request was canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return Wrap(UpstreamTimeout, err, "the request timed out")
	}
	if st, ok := status.FromError(err); ok {
		return FromStatus(st)
	}
	return Wrap(Internal, err, "internal error")
}

// ReasonFromCode is the reason of a status that carries none of Flexway's.
func ReasonFromCode(c codes.Code) Reason {
	switch c {
	case codes.Unauthenticated:
		return InvalidAPIKey
	case codes.InvalidArgument, codes.OutOfRange:
		return InvalidRequest
	case codes.NotFound, codes.Unimplemented:
		return NotFound
	case codes.FailedPrecondition:
		return CapabilityUnavailable
	case codes.ResourceExhausted:
		return BudgetExceeded
	case codes.PermissionDenied:
		return SensitiveNoInternalBackend
	case codes.Unavailable:
		return UpstreamError
	case codes.DeadlineExceeded:
		return UpstreamTimeout
	case codes.Canceled:
		return Canceled
	}
	return Internal
}

// CodeFromHTTPStatus maps an upstream HTTP status to a gRPC code, the
// inverse of grpc-gateway's HTTPStatusFromCode where it is one-to-one.
func CodeFromHTTPStatus(s int) codes.Code {
	switch s {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusConflict:
		return codes.Aborted
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case 499:
		return codes.Canceled
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return codes.Unavailable
	}
	switch {
	case s >= 500:
		return codes.Internal
	case s >= 400:
		return codes.FailedPrecondition
	}
	return codes.Unknown
}
