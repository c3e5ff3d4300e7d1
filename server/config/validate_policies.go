package config

import (
	"unicode"
	"unicode/utf8"
)

// validatePolicies checks ai.policies; id gives the tenants and agents the
// API keys name.
//
// Errors: a name empty, not printable UTF-8, longer than
// [MaxPolicyNameBytes] or used twice; a match.listener other than http or
// grpc; a match.operation other than ai.chatCompletions, ai.embeddings,
// ai.listModels or a service declared under ai.grpc.services; a
// governance.mode other than enforce or shadow; a governance.backends entry
// naming no backend; a budget.per other than tenant, agent or policy; a
// negative cap.
//
// Warnings: a match.tenant neither under ai.tenants nor named by an API
// key (a key or a relay may name it later); a match.agent that neither its
// tenant's agents nor an API key of that tenant name; a listener http with
// a gRPC service's operation (served on the grpc listener only); a policy
// with neither governance nor budget; a governance with neither models nor
// backends; models or backends [] (every call refused); a models entry
// that is neither "*", an alias, nor a model some backend lists; an entry
// listed twice; a budget with no cap.
func (ai AI) validatePolicies(col *collector, id Identity) {
	if len(ai.Policies) == 0 {
		return
	}
	tenants := map[string]bool{}   // tenants declared or named by a key
	agents := map[[2]string]bool{} // {tenant, agent} declared or named by a key
	for name, t := range ai.Tenants {
		tenants[name] = true
		for a := range t.Agents {
			agents[[2]string{name, a}] = true
		}
	}
	for _, k := range id.APIKeys {
		tenants[k.Tenant] = true
		if k.Agent != "" {
			agents[[2]string{k.Tenant, k.Agent}] = true
		}
	}
	models := map[string]bool{"*": true} // what a models entry may name
	for name := range ai.Aliases {
		models[name] = true
	}
	for _, b := range ai.Backends {
		for _, m := range b.Models {
			models[m] = true
		}
	}

	names := map[string]int{}
	for i, p := range ai.Policies {
		path := indexPath("ai.policies", i)
		checkPolicyName(col, path+".name", p.Name)
		if first, dup := names[p.Name]; dup && p.Name != "" {
			col.errorf(path+".name", "policy %q is already declared at ai.policies[%d]: names are unique", p.Name, first)
		} else {
			names[p.Name] = i
		}
		ai.checkPolicyMatch(col, path+".match", p.Match, tenants, agents)
		if p.Governance == nil && p.Budget == nil && p.Guardrails == nil && p.PromptLogging == nil && p.Cache == nil {
			col.warnf(path, "sets neither governance, budget, guardrails, prompt_logging nor cache: it changes no call")
		}
		if g := p.Governance; g != nil {
			ai.checkGovernance(col, path+".governance", *g, models)
		}
		if b := p.Budget; b != nil {
			checkPolicyBudget(col, path+".budget", *b)
		}
		if g := p.Guardrails; g != nil {
			checkGuardrails(col, path+".guardrails", *g)
		}
		if l := p.PromptLogging; l != nil {
			checkPromptLogging(col, path+".prompt_logging", p.Name, *l)
		}
	}
	ai.checkLoggingTies(col)
}

// checkPolicyName reports a policy name that is empty, not printable
// UTF-8, or longer than [MaxPolicyNameBytes].
func checkPolicyName(col *collector, path, name string) {
	switch {
	case name == "":
		col.errorf(path, "required: the policy's name, given in refusals, the audit line and metrics")
	case !utf8.ValidString(name):
		col.errorf(path, "%q is not valid UTF-8", name)
	case len(name) > MaxPolicyNameBytes:
		col.errorf(path, "%d bytes: a policy name is at most %d bytes (it is a metric label)", len(name), MaxPolicyNameBytes)
	default:
		for _, r := range name {
			if !unicode.IsPrint(r) {
				col.errorf(path, "%q: a policy name holds printable characters only (it is written in refusals, the audit line and metric labels)", name)
				return
			}
		}
	}
}

// checkPolicyMatch checks a policy's match; tenants and agents are those
// ai.tenants declares or an API key names.
func (ai AI) checkPolicyMatch(col *collector, path string, m PolicyMatch, tenants map[string]bool, agents map[[2]string]bool) {
	switch m.Listener {
	case "", ListenerHTTP, ListenerGRPC:
	default:
		col.errorf(path+".listener", "unknown listener %q: want http or grpc", m.Listener)
	}
	switch m.Operation {
	case "", OperationChatCompletions, OperationEmbeddings, OperationListModels:
	default:
		if _, ok := ai.GRPC.Services[m.Operation]; !ok {
			col.errorf(path+".operation", "unknown operation %q: want ai.chatCompletions, ai.embeddings, ai.listModels or a gRPC service declared under ai.grpc.services", m.Operation)
		} else if m.Listener == ListenerHTTP {
			col.warnf(path+".operation", "gRPC service %s is served on the grpc listener only: with listener http this policy matches no call", m.Operation)
		}
	}
	if m.Tenant != "" && !tenants[m.Tenant] {
		col.warnf(path+".tenant", "tenant %q is neither under ai.tenants nor named by an identity.api_keys entry: this policy matches no call until a key (or a relay) names it", m.Tenant)
	}
	if m.Tenant != "" && m.Agent != "" && tenants[m.Tenant] && !agents[[2]string{m.Tenant, m.Agent}] {
		col.warnf(path+".agent", "agent %q is neither under ai.tenants.%s.agents nor named by an identity.api_keys entry of tenant %s: this policy matches no call until a key (or a relay) names it", m.Agent, m.Tenant, m.Tenant)
	}
}

// checkGovernance checks a policy's governance; models holds "*", the
// aliases and every model a backend lists.
func (ai AI) checkGovernance(col *collector, path string, g Governance, models map[string]bool) {
	if !g.Mode.Valid() {
		col.errorf(path+".mode", "unknown mode %q: want enforce or shadow", g.Mode)
	}
	if g.Models == nil && g.Backends == nil {
		col.warnf(path, "sets neither models nor backends: it restricts nothing")
	}
	refused := "every call it matches is refused"
	if g.Mode == GovernanceShadow {
		refused = "every call it matches is audited as would_deny"
	}
	if g.Models != nil && len(g.Models) == 0 {
		col.warnf(path+".models", "[]: this policy denies every model (%s, 403 model_not_allowed); list \"*\" to allow every one", refused)
	}
	seen := map[string]int{}
	for i, m := range g.Models {
		ipath := indexPath(path+".models", i)
		if first, dup := seen[m]; dup {
			col.warnf(ipath, "%q is listed twice (first at models[%d])", m, first)
			continue
		}
		seen[m] = i
		if !models[m] {
			col.warnf(ipath, "%q is neither \"*\", an alias, nor a model any backend lists: only a backend's default_model can serve it", m)
		}
	}
	if g.Backends != nil && len(g.Backends) == 0 {
		col.warnf(path+".backends", "[]: this policy allows no backend (%s, 403 backend_not_allowed)", refused)
	}
	clear(seen)
	for i, b := range g.Backends {
		ipath := indexPath(path+".backends", i)
		if first, dup := seen[b]; dup {
			col.warnf(ipath, "%q is listed twice (first at backends[%d])", b, first)
			continue
		}
		seen[b] = i
		if _, ok := ai.Backends[b]; !ok {
			col.errorf(ipath, "no backend %q in ai.backends", b)
		}
	}
}

// checkPolicyBudget checks a policy's budget: its caps and per.
func checkPolicyBudget(col *collector, path string, b PolicyBudget) {
	if !b.Per.Valid() {
		col.errorf(path+".per", "unknown per %q: want tenant, agent or policy", b.Per)
	}
	b.Caps.validate(col, path)
	if b.Caps.IsZero() {
		col.warnf(path, "sets no cap: set tokens_per_minute, requests_per_minute, tokens_per_day, tokens_per_month or eur_per_month, or remove the section")
	}
}
