package transcoder

import (
	"sync/atomic"

	"github.com/flexway/flexway/server/faults"
)

// inflight counts the bytes of request bodies being read and parsed at
// once, against a limit ([Options.MaxInflightBodyBytes]): a body is admitted
// only if its bytes fit, and gives them back once it is parsed. It is safe
// for concurrent use.
type inflight struct {
	limit int64
	used  atomic.Int64
	peak  atomic.Int64 // the most ever held at once, for tests
}

// take reserves n bytes; false, and nothing reserved, when they do not
// fit under the limit.
func (b *inflight) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			for p := b.peak.Load(); u+n > p && !b.peak.CompareAndSwap(p, u+n); p = b.peak.Load() {
			}
			return true
		}
	}
}

// give returns n bytes taken before.
func (b *inflight) give(n int64) { b.used.Add(-n) }

// busyRetryAfter is the Retry-After, in seconds, of a request refused
// because the bodies being read fill server.max_inflight_body_bytes: the
// bodies in flight are typically parsed within it.
const busyRetryAfter = 1

// busy is the refusal of a body that does not fit: 503 unavailable with
// Retry-After.
func (b *inflight) busy() *faults.Error {
	fe := faults.New(faults.Unavailable, "the gateway is reading as many request bodies as it may at once (server.max_inflight_body_bytes, %d bytes): retry", b.limit)
	fe.RetryAfterSeconds = busyRetryAfter
	return fe
}
