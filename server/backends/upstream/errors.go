package upstream

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
)

// maxRetryAfterSeconds caps a relayed Retry-After.
const maxRetryAfterSeconds = 24 * 60 * 60

// failedBodyCountBytes bounds the read of a 5xx (or other non-4xx) answer's
// body, whose bytes are counted for logs but never kept: one more than the
// bytes reported, so that a longer body is told apart.
const failedBodyCountBytes = 64<<10 + 1

// failure maps an error of a request or of a body read, reqCtx being the
// request's context and parent the caller's. message is the client-facing
// message of a plain upstream error.
func (b *Backend) failure(parent, reqCtx context.Context, err error, message string) *faults.Error {
	err = redactURLError(err)
	switch cause := context.Cause(reqCtx); {
	case errors.Is(cause, errHeaderTimeout):
		return faults.Wrap(faults.UpstreamTimeout, err, fmt.Sprintf("upstream %s did not answer within %s", b.name, b.timeout))
	case errors.Is(cause, errIdleTimeout):
		return faults.Wrap(faults.UpstreamTimeout, err, fmt.Sprintf("upstream %s sent nothing for %s", b.name, b.idleTimeout))
	}
	if parent.Err() != nil {
		return contextError(parent)
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return faults.Wrap(faults.UpstreamTimeout, err, "upstream "+b.name+" timed out")
	}
	return faults.Wrap(faults.UpstreamError, err, message)
}

// redactURLError returns err with the URL of a *url.Error at its top (what
// http.Client.Do and url.Parse return) cut to scheme://host/path: its user
// info and query may hold a credential, and causes are logged. Any other
// error is returned as is.
func redactURLError(err error) error {
	ue, ok := err.(*url.Error)
	if !ok {
		return err
	}
	return &url.Error{Op: ue.Op, URL: redactURL(ue.URL), Err: ue.Err}
}

// redactURL is raw without user info, query and fragment, or a placeholder
// when it does not parse.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String()
}

// contextError maps the caller's context once it is done: its deadline is
// a timeout, anything else a cancellation.
func contextError(ctx context.Context) *faults.Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return faults.Wrap(faults.UpstreamTimeout, context.Cause(ctx), "the request's deadline passed")
	}
	return faults.Wrap(faults.Canceled, context.Cause(ctx), "the request was canceled")
}

// readError maps an error reading the answer body.
func (ex *exchange) readError(err error) *faults.Error {
	return ex.b.failure(ex.parent, ex.ctx, err, "upstream "+ex.b.name+" cut its answer short")
}

// statusError maps a non-2xx answer:
//   - a 401 or 403 is the upstream refusing the gateway's own credentials:
//     an upstream error wrapping [backends.ErrUpstreamAuth]; its message
//     names neither the backend nor a configuration key (the caller must not
//     learn them), its cause, for logs, names both; the body, which may echo
//     the credential, is neither kept nor logged;
//   - any other 4xx keeps the upstream's status, Content-Type and body (its
//     first MiB) for relay;
//   - any other status is an upstream error whose message says the status
//     only, and whose cause, for logs, says the status, Content-Type and
//     how many body bytes came at once, never the bytes themselves.
//
// decodeErr is the failure to decode the body, if any.
func (ex *exchange) statusError(decodeErr error) *faults.Error {
	code := ex.resp.StatusCode
	msg := fmt.Sprintf("upstream %s answered %d", ex.b.name, code)
	retry := retryAfter(ex.resp.Header.Get("Retry-After"), time.Now())
	switch {
	case code == http.StatusForbidden && !ex.b.identity.isZero():
		// A relay's peer is a Flexway: its 403 is a policy refusal of the
		// caller's call (sensitive_no_internal_backend), not of our
		// credentials, which it would refuse with 401. Relayed as is below.
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return &faults.Error{
			Reason:  faults.UpstreamError,
			Message: "the backend refused the gateway's credentials",
			Err: fmt.Errorf("upstream %s status %d, check ai.backends.%s.auth: %w",
				ex.b.name, code, ex.b.name, backends.ErrUpstreamAuth),
		}
	case code < 400 || code > 499:
		fe := &faults.Error{Reason: faults.UpstreamError, Message: msg, RetryAfterSeconds: retry}
		if decodeErr != nil {
			fe.Err = decodeErr
			return fe
		}
		// Only what comes at once: a slow body must not delay a fallback.
		// The body is counted, never kept: it may echo a prompt or a token.
		t := time.AfterFunc(drainTimeout, func() { ex.cancel(errDrainTimeout) })
		n, err := io.Copy(io.Discard, io.LimitReader(ex.body, failedBodyCountBytes))
		t.Stop()
		size := fmt.Sprintf("%d body bytes read", n)
		switch {
		case n == failedBodyCountBytes:
			size = fmt.Sprintf("over %d body bytes, the rest not read", n-1)
		case err != nil:
			size += " before the body failed"
		}
		fe.Err = fmt.Errorf("upstream %s status %d, Content-Type %q, %s", ex.b.name, code, logMediaType(ex.resp.Header.Get("Content-Type")), size)
		if err != nil && ex.parent.Err() != nil {
			return contextError(ex.parent)
		}
		return fe
	}
	fe := &faults.Error{
		Reason:             faults.UpstreamStatus,
		Message:            msg,
		RetryAfterSeconds:  retry,
		UpstreamHTTPStatus: code,
	}
	if decodeErr != nil {
		// Status kept, body dropped: an undecodable body cannot be
		// relayed.
		fe.Err = decodeErr
		return fe
	}
	body, err := io.ReadAll(io.LimitReader(ex.body, maxStatusBodyBytes))
	if err != nil {
		if ex.parent.Err() != nil {
			return contextError(ex.parent)
		}
		// A 4xx stays a 4xx (never fallen back from); a cut body is not
		// relayed.
		fe.Err = fmt.Errorf("reading the upstream's %d body: %w", code, err)
		return fe
	}
	fe.UpstreamContentType = ex.resp.Header.Get("Content-Type")
	fe.UpstreamBody = body
	return fe
}

// maxLoggedMediaType bounds the media type [logMediaType] returns.
const maxLoggedMediaType = 64

// logMediaType is what a cause keeps of a Content-Type: its media type
// alone (parameters, which are free text, are dropped), lower-cased and cut
// to 64 bytes; "(invalid)" when there is none to read.
func logMediaType(v string) string {
	if strings.TrimSpace(v) == "" {
		return ""
	}
	// A media type is kept even when a parameter does not parse.
	mt, _, _ := mime.ParseMediaType(v)
	if mt == "" {
		return "(invalid)"
	}
	if len(mt) > maxLoggedMediaType {
		mt = mt[:maxLoggedMediaType]
	}
	return mt
}

// retryAfter returns the seconds of a Retry-After header value: a number of
// seconds (a fraction rounded up) or an HTTP date; 0 when absent, past or
// unreadable, capped at a day.
func retryAfter(v string, now time.Time) int64 {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var secs float64
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		secs = f
	} else if t, err := http.ParseTime(v); err == nil {
		secs = t.Sub(now).Seconds()
	}
	switch {
	case math.IsNaN(secs) || secs <= 0:
		return 0
	case secs >= maxRetryAfterSeconds:
		return maxRetryAfterSeconds
	}
	return int64(math.Ceil(secs))
}

// decodedBody returns r, the raw body of resp, decoded per its
// Content-Encoding when the transport did not decode it already. Only gzip
// is accepted, the one encoding the transport asks for.
func decodedBody(resp *http.Response, r io.Reader) (io.Reader, error) {
	if resp.Uncompressed {
		return r, nil
	}
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return r, nil
	case "gzip", "x-gzip":
		return &gunzipReader{r: r}, nil
	default:
		return nil, fmt.Errorf("unsupported Content-Encoding %q", enc)
	}
}

// gunzipReader decodes gzip, reading the gzip header on the first Read
// rather than at once: a stream's first bytes may come late.
type gunzipReader struct {
	r   io.Reader
	zr  *gzip.Reader
	err error
}

func (g *gunzipReader) Read(p []byte) (int, error) {
	if g.zr == nil {
		if g.err != nil {
			return 0, g.err
		}
		zr, err := gzip.NewReader(g.r)
		if err != nil {
			g.err = err
			return 0, err
		}
		g.zr = zr
	}
	return g.zr.Read(p)
}

// idleReader arms timer for d during each Read: a read that waits longer
// fires it, and the timer cancels the request, which fails the read.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
}

func (ir *idleReader) Read(p []byte) (int, error) {
	ir.timer.Reset(ir.d)
	n, err := ir.r.Read(p)
	ir.timer.Stop()
	return n, err
}

// minScrubbedSecret is the shortest credential [exchange.scrub] looks for:
// a shorter one would redact ordinary words.
const minScrubbedSecret = 8

// redacted replaces the gateway's own credential in what is relayed.
const redacted = "[redacted]"

// scrub removes the credential the exchange sent from an error that may
// reach the caller: its Message and the relayed upstream body (an
// upstream may quote the key it refused). Anything else is returned as is.
func (ex *exchange) scrub(fe *faults.Error) *faults.Error {
	if fe == nil || len(ex.secret) < minScrubbedSecret {
		return fe
	}
	if strings.Contains(fe.Message, ex.secret) {
		fe.Message = strings.ReplaceAll(fe.Message, ex.secret, redacted)
	}
	if bytes.Contains(fe.UpstreamBody, []byte(ex.secret)) {
		fe.UpstreamBody = bytes.ReplaceAll(fe.UpstreamBody, []byte(ex.secret), []byte(redacted))
	}
	return fe
}

// scrubErr is [exchange.scrub] for an error of any type.
func (ex *exchange) scrubErr(err error) error {
	var fe *faults.Error
	if errors.As(err, &fe) {
		ex.scrub(fe)
	}
	return err
}
