package config

import (
	"math"
	"net/url"
)

func (b Budget) validate(col *collector, ref func(path, name string) (Backend, bool)) {
	if !(b.Soft > 0 && b.Soft < 1) {
		col.errorf("ai.budget.soft", "%v is not in (0, 1): it is a fraction of every cap, below the cap itself", b.Soft)
	}
	if b.SoftBackend != "" {
		ref("ai.budget.soft_backend", b.SoftBackend)
	}
	if b.ReserveOutputTokens < 0 {
		col.errorf("ai.budget.reserve_output_tokens", "must not be negative")
	}
	if b.MaxOutputTokens < 0 {
		col.errorf("ai.budget.max_output_tokens", "must not be negative (leave it out for none)")
	}
	if _, err := b.Location(); err != nil {
		col.errorf("ai.budget.timezone", "unknown time zone %q: want an IANA name such as UTC or Europe/Paris", b.Timezone)
	}
	s := b.Store
	switch s.Type {
	case StoreEmbedded:
		if s.Path == "" {
			col.errorf("ai.budget.store.path", "required for store type embedded")
		}
	case StoreRedis:
		u, err := url.Parse(s.URL)
		switch {
		case s.URL == "":
			col.errorf("ai.budget.store.url", "required for store type redis, e.g. redis://127.0.0.1:6379/0")
		case err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "":
			col.errorf("ai.budget.store.url", "want redis://host:port/db or rediss://host:port/db")
		default:
			if _, hasPassword := u.User.Password(); hasPassword {
				col.warnf("ai.budget.store.url", "holds an inline password; prefer a redis ACL user without one, or a socket reachable only from this host")
			}
		}
	default:
		col.errorf("ai.budget.store.type", "unknown store type %q: want embedded or redis", s.Type)
	}
	b.Default.validate(col, "ai.budget.default")
}

// validate reports, at path, a negative cap: tokens_per_minute,
// requests_per_minute, tokens_per_day, tokens_per_month, eur_per_month
// (which must also convert to nano-euros).
func (c Caps) validate(col *collector, path string) {
	if c.TokensPerMinute != nil && *c.TokensPerMinute < 0 {
		col.errorf(path+".tokens_per_minute", "must not be negative")
	}
	if c.RequestsPerMinute != nil && *c.RequestsPerMinute < 0 {
		col.errorf(path+".requests_per_minute", "must not be negative")
	}
	if c.TokensPerDay != nil && *c.TokensPerDay < 0 {
		col.errorf(path+".tokens_per_day", "must not be negative")
	}
	if c.TokensPerMonth != nil && *c.TokensPerMonth < 0 {
		col.errorf(path+".tokens_per_month", "must not be negative")
	}
	if c.EURPerMonth != nil {
		checkEUR(col, path+".eur_per_month", *c.EURPerMonth)
	}
}

// checkEUR checks a euro amount: not negative, and convertible to nano-euros.
func checkEUR(col *collector, path string, eur float64) {
	switch {
	case math.IsNaN(eur) || math.IsInf(eur, 0):
		col.errorf(path, "not a number")
	case eur < 0:
		col.errorf(path, "must not be negative")
	case eur > MaxEUR:
		col.errorf(path, "too large: at most %d euros", MaxEUR)
	}
}
