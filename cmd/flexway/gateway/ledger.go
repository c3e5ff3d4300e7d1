package gateway

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"

	"github.com/flexway/flexway/server/auditlog"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/ledger"
)

// openLedger opens ai.budget.store and returns the ledger over it with the
// configured caps. The embedded store is a file only one process may hold;
// opening it after a crash rebuilds, from the audit lines journaled with
// the commits (see interceptors/audit), the lines of committed calls the
// audit file lacks (log says how many), before the audit is opened. A
// Redis store need not be up or initialised: the gateway starts, log is
// told, and metered calls are refused until it is (its state is checked on
// every call); its own files (ai.budget.store.path: the commit sequence
// it saw, the journal of commits Redis could not take, the notes of its
// last commits) are one replica's, and opening it after a crash rebuilds
// the audit lines of its last commits Redis holds, as for the embedded
// store.
// log may be nil; o are the ledger's options (a test's clock and lease).
func openLedger(ctx context.Context, cfg *config.Config, log *slog.Logger, o ledger.Options) (*ledger.Ledger, error) {
	p, err := ledgerPolicy(cfg)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	warn := func(msg string) { log.Warn("budget ledger", "warning", msg) }
	var store ledger.Store
	switch s := cfg.AI.Budget.Store; s.Type {
	case config.StoreRedis:
		store, err = ledger.OpenRedisWithOptions(ctx, s.URL, ledger.RedisOptions{Path: s.Path, Logger: log, Notes: rebuildAudit(cfg.Audit.Path, warn)})
		if err == nil {
			if cerr := ledger.CheckRedis(ctx, s.URL); cerr != nil {
				warn("metered calls are refused (503) until the Redis ledger is back: " + cerr.Error())
			}
		}
	default:
		store, err = ledger.OpenEmbeddedWithOptions(s.Path, ledger.EmbeddedOptions{Warn: warn, Notes: rebuildAudit(cfg.Audit.Path, warn)})
	}
	if err != nil {
		return nil, fmt.Errorf("ai.budget.store: %w", err)
	}
	return ledger.New(p, store, o), nil
}

// rebuildAudit returns the receiver of the notes a ledger kept after a
// crash (the embedded store's journal, the Redis store's notes files):
// the audit lines of its last commits, of which it appends to the audit
// file at path those it lacks.
func rebuildAudit(path string, warn func(string)) func([][]byte) error {
	if warn == nil {
		warn = func(string) {}
	}
	return func(notes [][]byte) error {
		if path == "-" {
			warn(fmt.Sprintf("the audit goes to stdout: %d calls committed in the last second before a crash may have no audit line, which cannot be checked", len(notes)))
			return nil
		}
		n, err := auditlog.Rebuild(path, notes, nil)
		if err != nil {
			return fmt.Errorf("rebuilding the audit lines of calls committed before a crash: %w", err)
		}
		if n > 0 {
			warn(fmt.Sprintf("appended to %s the audit lines of %d calls committed before a crash (a kill or a power loss) whose lines had not been written; they come from the ledger's journal or notes", path, n))
		}
		return nil
	}
}

// ledgerPolicy is the caps part of cfg.
func ledgerPolicy(cfg *config.Config) (ledger.Policy, error) {
	b := cfg.AI.Budget
	loc, err := b.Location()
	if err != nil {
		return ledger.Policy{}, fmt.Errorf("ai.budget.timezone: %w", err)
	}
	p := ledger.Policy{
		Default:  limits(b.Default),
		Tenants:  map[string]ledger.TenantPolicy{},
		Soft:     b.Soft,
		Location: loc,
	}
	for name, t := range cfg.AI.Tenants {
		tp := ledger.TenantPolicy{Limits: limits(t.Budget), Agents: map[string]ledger.Limits{}}
		for a, ac := range t.Agents {
			tp.Agents[a] = limits(ac.Budget)
		}
		p.Tenants[name] = tp
	}
	for _, pol := range cfg.AI.Policies {
		if pol.Budget == nil {
			continue
		}
		if p.Policies == nil {
			p.Policies = map[string]ledger.PolicyLimits{}
		}
		p.Policies[pol.Name] = ledger.PolicyLimits{Limits: limits(pol.Budget.Caps), Per: ledgerPer(pol.Budget.Per)}
	}
	return p, nil
}

// ledgerPer is the ledger's owner of a policy's buckets for budget.per:
// tenant when unset.
func ledgerPer(per config.PolicyPer) ledger.Per {
	switch per {
	case config.PerAgent:
		return ledger.PerAgent
	case config.PerPolicy:
		return ledger.PerPolicy
	}
	return ledger.PerTenant
}

// limits converts configured caps (euros) to the ledger's (nano-euros);
// tokens_per_minute and requests_per_minute pass as they are (tokens,
// requests).
func limits(c config.Caps) ledger.Limits {
	l := ledger.Limits{
		TokensPerMinute:   c.TokensPerMinute,
		RequestsPerMinute: c.RequestsPerMinute,
		TokensPerDay:      c.TokensPerDay,
		TokensPerMonth:    c.TokensPerMonth,
	}
	if nano, ok := c.NanoEURPerMonth(); ok {
		l.NanoEURPerMonth = &nano
	}
	return l
}

// prices returns every backend's price in nano-euros per million tokens
// (cache_read and cache_write at input when not configured) and
// nano-euros per call.
func prices(cfg *config.Config) map[string]ledger.Price {
	ps := make(map[string]ledger.Price, len(cfg.AI.Backends))
	for name, b := range cfg.AI.Backends {
		ps[name] = ledger.Price{
			Input:      b.Price.InputNanoEURPerMTok(),
			Output:     b.Price.OutputNanoEURPerMTok(),
			CacheRead:  b.Price.CacheReadNanoEURPerMTok(),
			CacheWrite: b.Price.CacheWriteNanoEURPerMTok(),
			PerCall:    b.Price.PerCallNanoEUR(),
		}
	}
	return ps
}

// promptOverheads is each backend's prompt_overhead_tokens, by name.
func promptOverheads(cfg *config.Config) map[string]int64 {
	m := make(map[string]int64, len(cfg.AI.Backends))
	for name, b := range cfg.AI.Backends {
		m[name] = b.PromptOverheadTokens
	}
	return m
}

// backendOutputTokens is, by backend name, the max_tokens a backend sends
// itself for a request that sets none: kind anthropic's
// max_output_tokens ([metering.Config.BackendOutputTokens]).
func backendOutputTokens(cfg *config.Config) map[string]int64 {
	m := map[string]int64{}
	for name, b := range cfg.AI.Backends {
		if b.Kind == config.KindAnthropic && b.MaxOutputTokens > 0 {
			m[name] = b.MaxOutputTokens
		}
	}
	return m
}

// openAudit opens audit.path with audit.hash_key; onFailure is told why
// a batch could not be written. Without a hash key,
// identifiers are hashed under a key made at start: hashes then differ from
// one start to the next, which the log says.
func openAudit(cfg *config.Config, log *slog.Logger, onFailure func(reason string)) (*auditlog.Writer, error) {
	var key []byte
	if cfg.Audit.HashKey.IsZero() {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
		log.Warn("configuration", "warning", "audit.hash_key is not set: identifiers in audit lines are hashed under a key made at this start, so their hashes change at each restart")
	} else {
		v, err := cfg.Audit.HashKey.Resolve()
		if err != nil {
			return nil, fmt.Errorf("audit.hash_key: %w", err)
		}
		key = []byte(v)
	}
	return auditlog.Open(cfg.Audit.Path, key, auditlog.Options{Logger: log, OnFailure: onFailure})
}
