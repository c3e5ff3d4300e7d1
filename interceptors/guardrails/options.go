package guardrails

import (
	"log/slog"

	"github.com/flexway/flexway/server/guardrail/promptcheck"
)

// Option configures the interceptors.
type Option func(*options)

type options struct {
	logger *slog.Logger
}

// WithLogger sets where a webhook rule's failed exchange is logged
// (policy, URL without user info or query, error; never a text). The
// default discards.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// checker is the prompt phase the options configure.
func checker(opts []Option) promptcheck.Checker {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return promptcheck.Checker{Logger: o.logger}
}
