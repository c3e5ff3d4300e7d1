package main

import (
	"slices"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/breaker"
	"github.com/flexway/flexway/server/config"
)

// withBreakers puts each backend behind its circuit breaker
// (ai.backends.NAME.circuit_breaker; defaults 5 failures, 30 s).
func withBreakers(cfg *config.Config, bs map[string]backends.Backend, onChange func(backend, state string)) {
	for name, b := range bs {
		cb := cfg.AI.Backends[name].CircuitBreaker
		bs[name] = breaker.Wrap(b, cb.Failures, cb.OpenFor.Std(), onChange)
	}
}

// backendStates reports every configured backend and its circuit's state
// for the admin API; a backend Flexway does not call itself (kind: grpc,
// proxied) reports its circuit as closed.
func backendStates(cfg *config.Config, bs map[string]backends.Backend) []*flexwayv1.BackendState {
	out := make([]*flexwayv1.BackendState, 0, len(cfg.AI.Backends))
	for name, b := range cfg.AI.Backends {
		st := &flexwayv1.BackendState{Name: name, Kind: string(b.Kind), External: b.IsExternal(), Circuit: breaker.Closed}
		for _, c := range b.Capabilities {
			st.Capabilities = append(st.Capabilities, string(c))
		}
		slices.Sort(st.Capabilities)
		if w, ok := bs[name].(*breaker.Backend); ok {
			st.Circuit = w.State()
		}
		out = append(out, st)
	}
	return out
}
