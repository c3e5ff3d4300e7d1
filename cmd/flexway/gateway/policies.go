package gateway

import (
	"github.com/flexway/flexway/interceptors/governance"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/grpcproxy"
	"github.com/flexway/flexway/server/policy"
)

// policyTable compiles ai.policies, which cfg's validation accepted.
func policyTable(cfg *config.Config) *policy.Table {
	return policy.Compile(cfg.AI.Policies)
}

// governing is the governance interceptor's configuration over the
// compiled policies: a proxied method's backend is the one its service is
// routed to (ai.grpc.services), which its policies' backend rules must
// allow.
func governing(t *policy.Table, p *grpcproxy.Proxy) *governance.Config {
	c := &governance.Config{Policies: t}
	if p != nil {
		c.ProxiedBackend = func(fullMethod string) (string, bool) {
			m, ok := p.Lookup(fullMethod)
			return m.Backend, ok
		}
	}
	return c
}
