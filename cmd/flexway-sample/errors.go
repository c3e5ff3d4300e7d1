package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// maxBodyBytes bounds request bodies.
const maxBodyBytes = 8 << 20

// errorBody is OpenAI's error envelope.
type errorBody struct {
	Error errorDetail `json:"error"`
}

// errorDetail is the inside of OpenAI's error envelope. Param and Code are
// null when not set.
type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// errorType returns the OpenAI error type for an HTTP status, following
// what api.openai.com sends: "requests" for rate limits, "server_error" for
// 5xx and "invalid_request_error" for every other 4xx, 401 and 404 included.
func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// writeError writes status with an OpenAI error body whose type follows
// from status; an empty param or code is written as null.
func writeError(w http.ResponseWriter, status int, message, param, code string) {
	d := errorDetail{Message: message, Type: errorType(status)}
	if param != "" {
		d.Param = &param
	}
	if code != "" {
		d.Code = &code
	}
	writeJSON(w, status, errorBody{Error: d})
}

// writeJSON writes v as a JSON response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":{"message":"flexway-sample: cannot encode response","type":"server_error","param":null,"code":null}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// decodeBody reads r's JSON body into v. On failure it writes the error
// response (400 or 413) and returns false.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body larger than %d bytes.", maxBodyBytes), "", "request_too_large")
			return false
		}
		writeError(w, http.StatusBadRequest, "Could not read the request body.", "", "")
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("We could not parse the JSON body of your request: %v", err), "", "invalid_json")
		return false
	}
	return true
}
