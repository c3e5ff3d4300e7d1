package openaiwire

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/flexway/flexway/server/faults"
)

// AppendError appends OpenAI's error envelope to dst and returns the
// extended slice:
//
//	{"error":{"message":"...","type":"...","param":null,"code":null}}
//
// message and typ are always written as strings; param and code are written
// as JSON null when empty. For a [*faults.Error] e, the HTTP front passes
// e.Message, e.Reason.OpenAIType(), e.Param and string(e.Reason).
func AppendError(dst []byte, message, typ, param, code string) []byte {
	dst = append(dst, `{"error":`...)
	o := open(dst)
	o.str("message", message)
	o.str("type", typ)
	if param == "" {
		o.null("param")
	} else {
		o.str("param", param)
	}
	if code == "" {
		o.null("code")
	} else {
		o.str("code", code)
	}
	return append(o.close(), '}')
}

// clientError turns a parse error of a client request into a
// [*faults.Error] of reason [faults.InvalidRequest]; the cause is kept for
// logs.
func clientError(err error) error {
	var fe *fieldError
	if errors.As(err, &fe) {
		return &faults.Error{Reason: faults.InvalidRequest, Message: fe.Error(), Param: fe.param, Err: err}
	}
	return &faults.Error{Reason: faults.InvalidRequest, Message: "request body: " + err.Error(), Err: err}
}

// upstreamError wraps a parse error of an upstream response.
func upstreamError(what string, err error) error {
	return fmt.Errorf("openaiwire: parse upstream %s: %w", what, err)
}

// syntaxError is malformed JSON, at a byte offset of the input.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("malformed JSON at byte offset %d: %s", e.off, e.msg)
}

// utf8Error is input that is not valid UTF-8, at a byte offset.
type utf8Error struct {
	off int
}

func (e *utf8Error) Error() string {
	return fmt.Sprintf("invalid UTF-8 at byte offset %d", e.off)
}

// fieldError is well-formed JSON with a field of the wrong type or value.
// param is relative to the object being parsed until the callers have
// prefixed it with their own key or index (see nestKey, nestIndex).
type fieldError struct {
	param string
	msg   string
}

func (e *fieldError) Error() string {
	if e.param == "" {
		return e.msg
	}
	return "invalid '" + e.param + "': " + e.msg
}

// fieldErr returns a *fieldError for param.
func fieldErr(param, format string, args ...any) error {
	return &fieldError{param: param, msg: fmt.Sprintf(format, args...)}
}

// nestKey prefixes the param of a *fieldError with the object key it was
// found under; other errors are returned as they are.
func nestKey(err error, key string) error { return nest(err, key) }

// nestIndex prefixes the param of a *fieldError with the array index it was
// found at; other errors are returned as they are.
func nestIndex(err error, i int) error { return nest(err, "["+strconv.Itoa(i)+"]") }

// nest prefixes the param of a *fieldError with prefix (a key or an
// "[i]"), joined with a "." unless the param starts with an index.
func nest(err error, prefix string) error {
	if fe, ok := err.(*fieldError); ok {
		switch {
		case fe.param == "":
			fe.param = prefix
		case fe.param[0] == '[':
			fe.param = prefix + fe.param
		default:
			fe.param = prefix + "." + fe.param
		}
	}
	return err
}
