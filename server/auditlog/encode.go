package auditlog

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/flexway/flexway/server/jsonstring"
)

// appendLine appends to dst the JSON encoding of l, byte for byte what
// [marshalLine] (encoding/json, HTML escaping off) returns, without
// reflection or allocation beyond growing dst. Where encoding/json fails (a
// Time whose year is outside [0,9999] or whose zone offset is 24h or more;
// a NaN or infinite DurationMS), appendLine returns dst unchanged: the
// caller gets the error from marshalLine (see [Writer.Write]).
//
// It must follow [Line]: same fields, same order, same names, same
// omitempty; TestAppendLineKnowsEveryField fails when it does not.
//
// It stays, rather than encoding/json, because a line is still encoded on
// the call's path: the note the budget ledger journals with a call's
// commit ([AppendEncoded]) is encoded when the call settles. Measured
// with encoding/json in its place (issue 13): BenchmarkMarshalLine 2.7 to
// 4.4 µs against BenchmarkAppendLine's 1.25 µs, and in the whole gateway
// (BenchmarkAuditAndMetricsAdded, 8 interleaved runs) audit+metrics-added
// p50 7.5 µs → 10.6 µs (p=0.05), past issue 7's 10 µs target, and about
// 6 more allocations an audited call.
func appendLine(dst []byte, l *Line) []byte {
	if l == nil {
		return append(dst, "null"...)
	}
	if math.IsNaN(l.DurationMS) || math.IsInf(l.DurationMS, 0) {
		return appendMarshal(dst, l)
	}
	start := len(dst)
	dst = append(dst, `{"time":`...)
	var ok bool
	if dst, ok = appendTime(dst, l.Time); !ok {
		return appendMarshal(dst[:start], l)
	}
	dst = append(dst, `,"request_id":`...)
	dst = jsonstring.Append(dst, l.RequestID)
	dst = append(dst, `,"operation":`...)
	dst = jsonstring.Append(dst, l.Operation)
	dst = append(dst, `,"tenant":`...)
	dst = jsonstring.Append(dst, l.Tenant)
	dst = append(dst, `,"agent":`...)
	dst = jsonstring.Append(dst, l.Agent)
	dst = append(dst, `,"backend":`...)
	dst = jsonstring.Append(dst, l.Backend)
	dst = append(dst, `,"model_requested":`...)
	dst = jsonstring.Append(dst, l.ModelRequested)
	dst = append(dst, `,"model_served":`...)
	dst = jsonstring.Append(dst, l.ModelServed)
	dst = append(dst, `,"capability":`...)
	dst = jsonstring.Append(dst, l.Capability)
	if l.Feature != "" {
		dst = append(dst, `,"feature":`...)
		dst = jsonstring.Append(dst, l.Feature)
	}
	if l.Alias != "" {
		dst = append(dst, `,"alias":`...)
		dst = jsonstring.Append(dst, l.Alias)
		dst = append(dst, `,"arm":`...)
		dst = jsonstring.Append(dst, l.Arm)
	}
	if l.WouldDeny != (WouldDeny{}) {
		dst = append(dst, `,"would_deny":{"policy":`...)
		dst = jsonstring.Append(dst, l.WouldDeny.Policy)
		dst = append(dst, `,"reason":`...)
		dst = jsonstring.Append(dst, l.WouldDeny.Reason)
		dst = append(dst, '}')
	}
	if len(l.Guardrails) > 0 {
		dst = append(dst, `,"guardrails":[`...)
		for i, g := range l.Guardrails {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"policy":`...)
			dst = jsonstring.Append(dst, g.Policy)
			dst = append(dst, `,"rule":`...)
			dst = jsonstring.Append(dst, g.Rule)
			dst = append(dst, `,"phase":`...)
			dst = jsonstring.Append(dst, g.Phase)
			dst = append(dst, `,"action":`...)
			dst = jsonstring.Append(dst, g.Action)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"input_tokens":`...)
	dst = strconv.AppendInt(dst, l.InputTokens, 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, l.OutputTokens, 10)
	dst = append(dst, `,"cache_read_tokens":`...)
	dst = strconv.AppendInt(dst, l.CacheReadTokens, 10)
	dst = append(dst, `,"cache_write_tokens":`...)
	dst = strconv.AppendInt(dst, l.CacheWriteTokens, 10)
	if l.Cache != "" {
		dst = append(dst, `,"cache":`...)
		dst = jsonstring.Append(dst, l.Cache)
	}
	if l.CacheSavedTokens != 0 {
		dst = append(dst, `,"cache_saved_tokens":`...)
		dst = strconv.AppendInt(dst, l.CacheSavedTokens, 10)
	}
	dst = append(dst, `,"cost_eur":`...)
	dst = jsonstring.Append(dst, l.CostEUR)
	// CostNanoEUR is not written (json:"-").
	dst = append(dst, `,"usage_estimated":`...)
	dst = strconv.AppendBool(dst, l.UsageEstimated)
	if l.UsageOverReservation {
		dst = append(dst, `,"usage_over_reservation":true`...)
	}
	dst = append(dst, `,"metered_by":`...)
	dst = jsonstring.Append(dst, l.MeteredBy)
	dst = append(dst, `,"outcome":`...)
	dst = jsonstring.Append(dst, l.Outcome)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(l.Status), 10)
	dst = append(dst, `,"fallback":`...)
	dst = strconv.AppendBool(dst, l.Fallback)
	dst = append(dst, `,"soft":`...)
	dst = strconv.AppendBool(dst, l.Soft)
	dst = append(dst, `,"duration_ms":`...)
	dst = appendFloat64(dst, l.DurationMS)
	dst = append(dst, `,"key_hash":`...)
	dst = jsonstring.Append(dst, l.KeyHash)
	dst = append(dst, `,"user_hash":`...)
	dst = jsonstring.Append(dst, l.UserHash)
	return append(dst, '}')
}

// appendMarshal is appendLine's slow path, for lines it does not encode
// itself: marshalLine's bytes, or dst unchanged when it fails.
func appendMarshal(dst []byte, l *Line) []byte {
	b, err := marshalLine(l)
	if err != nil {
		return dst
	}
	return append(dst, b...)
}

// marshalLine is the reference encoding of a line: encoding/json with HTML
// escaping off (an audit line is read by programs, not browsers), with no
// trailing newline.
func marshalLine(l *Line) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// encodeError returns encoding/json's error for a line that appendLine
// does not encode (see [encodable]), nil for any other; only such a line
// is marshalled, to get the error.
func encodeError(l *Line) error {
	if encodable(l) {
		return nil
	}
	_, err := marshalLine(l)
	return err
}

// encodable reports whether appendLine can encode l: a finite DurationMS,
// and a Time with a year in [0,9999] and a zone offset under 24 hours (the
// checks of time.Time.MarshalJSON).
func encodable(l *Line) bool {
	if math.IsNaN(l.DurationMS) || math.IsInf(l.DurationMS, 0) {
		return false
	}
	if y := l.Time.Year(); y < 0 || y > 9999 {
		return false
	}
	_, off := l.Time.Zone()
	return off > -24*3600 && off < 24*3600
}

// appendTime appends t quoted, as [time.Time.MarshalJSON] does (RFC 3339
// with nanoseconds); it reports false where MarshalJSON fails, with the
// same checks: a year outside [0,9999], a zone offset of 24h or more.
func appendTime(dst []byte, t time.Time) ([]byte, bool) {
	dst = append(dst, '"')
	n0 := len(dst)
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	if dst[n0+len("9999")] != '-' { // year not exactly 4 digits wide
		return dst, false
	}
	if dst[len(dst)-1] != 'Z' {
		c := dst[len(dst)-len("Z07:00")]
		h := dst[len(dst)-len("07:00"):]
		if ('0' <= c && c <= '9') || 10*(h[0]-'0')+(h[1]-'0') >= 24 {
			return dst, false
		}
	}
	return append(dst, '"'), true
}

// appendFloat64 appends f as encoding/json's float encoder does (ES6
// number to string: 'f' format, 'e' below 1e-6 or from 1e21, exponents
// not padded). f must be finite.
func appendFloat64(dst []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}
