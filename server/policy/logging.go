package policy

// Logging returns the policy's prompt_logging section (enabled or not),
// nil when it has none. Read-only.
func (p *Policy) Logging() *Logging {
	if p.guards == nil {
		return nil
	}
	return p.guards.logging
}

// logs reports whether the policy's prompt_logging turns logging on.
func (p *Policy) logs() bool {
	l := p.Logging()
	return l != nil && l.Enabled
}

// Logs reports whether any policy of the table turns prompt logging on;
// when none does, no call is ever logged.
func (t *Table) Logs() bool {
	for _, p := range t.policies {
		if p.logs() {
			return true
		}
	}
	return false
}

// MayLog reports whether a call of k might be prompt-logged, before its
// model is known (k.Model is ignored): true when a policy that turns
// logging on and names no model selects k, or when any policy that turns
// it on names a model. False means that [Set.Logging] of the call's
// policies, once resolved, cannot be enabled; true only that it may be (a
// more specific policy may turn it off). It costs a few map lookups, one
// per declared match shape, and no allocation: a streaming call asks it
// before its request, and so its model, is received.
func (t *Table) MayLog(k Key) bool {
	k.Model = ""
	for _, sh := range t.preBody {
		if g := sh.groups[sh.key(k)]; g != nil && g.hasGuards {
			for _, p := range g.set.Policies {
				if p.logs() {
					return true
				}
			}
		}
	}
	return t.modelLogs
}
