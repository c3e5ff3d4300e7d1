package policy

import "github.com/flexway/flexway/server/config"

// Cache returns the policy's cache section as declared (defaults set), nil
// when it has none. Read-only.
func (p *Policy) Cache() *config.PolicyCache { return p.decl.Cache }

// Cache returns the most specific policy of the set with a cache section,
// whatever its mode (a more specific policy's mode off turns off what a
// broader one turns on); nil when none has one. It walks the set (a few
// pointers) and allocates nothing.
func (s Set) Cache() *Policy {
	for _, p := range s.Policies {
		if p.decl.Cache != nil {
			return p
		}
	}
	return nil
}
