package ledger

import (
	"strings"
	"time"
)

// periods are the current day and month in the ledger's Location.
type periods struct {
	dayStart, dayEnd, monthEnd time.Time
	day, month                 string
	dayExp, monthExp           int64 // unix seconds: when the buckets may be forgotten
}

const (
	dayBucketLife   = 3 * 24 * time.Hour  // from the start of the day
	monthBucketLife = 70 * 24 * time.Hour // from the start of the month
)

func (l *Ledger) periodsAt(now time.Time) *periods {
	if p := l.per.Load(); p != nil && !now.Before(p.dayStart) && now.Before(p.dayEnd) {
		return p
	}
	t := now.In(l.loc)
	y, m, d := t.Date()
	monthStart := time.Date(y, m, 1, 0, 0, 0, 0, l.loc)
	p := &periods{
		dayStart: time.Date(y, m, d, 0, 0, 0, 0, l.loc),
		dayEnd:   time.Date(y, m, d+1, 0, 0, 0, 0, l.loc),
		monthEnd: time.Date(y, m+1, 1, 0, 0, 0, 0, l.loc),
		day:      t.Format("2006-01-02"),
		month:    t.Format("2006-01"),
	}
	p.dayExp = p.dayStart.Add(dayBucketLife).Unix()
	p.monthExp = monthStart.Add(monthBucketLife).Unix()
	l.per.Store(p)
	return p
}

// period is cap ci's current period; "" for a per-minute window.
func (p *periods) period(ci int) string {
	switch ci {
	case ciTokDay:
		return p.day
	case ciTokMin, ciReqMin:
		return ""
	}
	return p.month
}

func (p *periods) end(ci int) time.Time {
	if ci == ciTokDay {
		return p.dayEnd
	}
	return p.monthEnd
}

func (p *periods) exp(ci int) int64 {
	if ci == ciTokDay {
		return p.dayExp
	}
	return p.monthExp
}

// windowLife is how long a per-minute window's state is kept after its
// last use (the embedded store's eviction, the Redis keys' TTL): past 61
// seconds nothing in it counts any more.
const windowLife = 2 * time.Minute

// isWindow reports whether ci is a per-minute cap.
func isWindow(ci int) bool { return ci == ciTokMin || ci == ciReqMin }

// isWindowBucket reports whether a bucket id names a per-minute window:
// its id ends with the cap (a period-less bucket, see bucketID).
func isWindowBucket(id string) bool {
	return strings.HasSuffix(id, ":"+string(TokensPerMinute)) || strings.HasSuffix(id, ":"+string(RequestsPerMinute))
}

// bucketID names one bucket: "t:<tenant>:<cap>:<period>" or
// "a:<tenant>:<agent>:<cap>:<period>", with '%' and ':' in names escaped
// as %25 and %3A so that distinct accounts never share a bucket. A
// per-minute window (period "") is "t:<tenant>:<cap>" or
// "a:<tenant>:<agent>:<cap>".
func bucketID(a Account, agent bool, c Cap, period string) string {
	var b strings.Builder
	b.Grow(len(a.Tenant) + len(a.Agent) + len(c) + len(period) + 6)
	writeOwner(&b, a, agent)
	writeCap(&b, c, period)
	return b.String()
}

// policyBucketID names one bucket of a policy's caps:
// "p:<policy>:t:<tenant>:<cap>[:<period>]" per tenant,
// "p:<policy>:a:<tenant>:<agent>:<cap>[:<period>]" per agent (the tenant's
// bucket for an account without an agent), "p:<policy>:<cap>[:<period>]"
// per policy; escaped like bucketID.
func policyBucketID(policy string, per Per, a Account, c Cap, period string) string {
	var b strings.Builder
	b.Grow(len(policy) + len(a.Tenant) + len(a.Agent) + len(c) + len(period) + 9)
	b.WriteString("p:")
	escapeTo(&b, policy)
	b.WriteByte(':')
	if per != PerPolicy {
		writeOwner(&b, a, per == PerAgent && a.Agent != "")
		b.WriteByte(':')
	}
	b.WriteString(string(c))
	if period != "" {
		b.WriteByte(':')
		b.WriteString(period)
	}
	return b.String()
}

func writeOwner(b *strings.Builder, a Account, agent bool) {
	if agent {
		b.WriteString("a:")
		escapeTo(b, a.Tenant)
		b.WriteByte(':')
		escapeTo(b, a.Agent)
	} else {
		b.WriteString("t:")
		escapeTo(b, a.Tenant)
	}
}

func writeCap(b *strings.Builder, c Cap, period string) {
	b.WriteByte(':')
	b.WriteString(string(c))
	if period != "" {
		b.WriteByte(':')
		b.WriteString(period)
	}
}

func escapeTo(b *strings.Builder, s string) {
	if !strings.ContainsAny(s, "%:") {
		b.WriteString(s)
		return
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '%':
			b.WriteString("%25")
		case ':':
			b.WriteString("%3A")
		default:
			b.WriteByte(s[i])
		}
	}
}
