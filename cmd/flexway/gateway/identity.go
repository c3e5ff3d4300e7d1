package gateway

import (
	"crypto/sha256"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/interceptors/identity"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/routing"
)

// routingTable is the routing part of cfg.
func routingTable(cfg *config.Config) *routing.Table {
	t := &routing.Table{
		Default:          cfg.AI.Backend,
		SensitiveBackend: cfg.AI.SensitiveBackend,
		SoftBackend:      cfg.AI.Budget.SoftBackend,
		Tenants:          map[string]routing.Tenant{},
		Capabilities:     map[call.Capability]string{},
		Backends:         map[string]routing.Backend{},
	}
	for c, b := range cfg.AI.Capabilities {
		t.Capabilities[call.Capability(c)] = b
	}
	for name, tc := range cfg.AI.Tenants {
		rt := routing.Tenant{Backend: tc.Backend, Agents: map[string]string{}}
		for a, ac := range tc.Agents {
			rt.Agents[a] = ac.Backend
		}
		t.Tenants[name] = rt
	}
	for name, b := range cfg.AI.Backends {
		external := routing.External(b.IsExternal(), b.Kind == config.KindRelay, b.IdentityHeaders.Sensitive)
		rb := routing.Backend{External: external, Fallback: b.Fallback}
		for _, c := range b.Capabilities {
			rb.Capabilities = append(rb.Capabilities, call.Capability(c))
		}
		t.Backends[name] = rb
	}
	return t
}

// sensitivePolicy reads ai.tenants.T.sensitive and
// ai.tenants.T.agents.A.sensitive.
type sensitivePolicy struct{ cfg *config.Config }

// Sensitive implements [sensitivity.Policy.Sensitive].
func (p sensitivePolicy) Sensitive(tenant, agent string) bool {
	t, ok := p.cfg.AI.Tenants[tenant]
	if !ok {
		return false
	}
	return t.Sensitive || (agent != "" && t.Agents[agent].Sensitive)
}

// accounts are the tenants and agents that exist: declared in ai.tenants,
// or named by an API key.
type accounts map[string]map[string]bool // tenant → its agents

func newAccounts(cfg *config.Config) accounts {
	a := accounts{}
	add := func(tenant, agent string) {
		if a[tenant] == nil {
			a[tenant] = map[string]bool{}
		}
		if agent != "" {
			a[tenant][agent] = true
		}
	}
	for name, t := range cfg.AI.Tenants {
		add(name, "")
		for agent := range t.Agents {
			add(name, agent)
		}
	}
	for _, k := range cfg.Identity.APIKeys {
		add(k.Tenant, k.Agent)
	}
	return a
}

// List implements [admin.Accounts.List].
func (a accounts) List() []ledger.Account {
	var out []ledger.Account
	for tenant, agents := range a {
		out = append(out, ledger.Account{Tenant: tenant})
		for agent := range agents {
			out = append(out, ledger.Account{Tenant: tenant, Agent: agent})
		}
	}
	slices.SortFunc(out, func(x, y ledger.Account) int {
		if c := strings.Compare(x.Tenant, y.Tenant); c != 0 {
			return c
		}
		return strings.Compare(x.Agent, y.Agent)
	})
	return out
}

// Known implements [admin.Accounts.Known].
func (a accounts) Known(tenant, agent string) bool {
	agents, ok := a[tenant]
	return ok && (agent == "" || agents[agent])
}

// keyring resolves API keys and relay keys by their SHA-256.
type keyring map[[sha256.Size]byte]identity.Key

var _ identity.Keyring = keyring(nil)

// Lookup implements [identity.Keyring.Lookup].
func (k keyring) Lookup(sum [sha256.Size]byte) (identity.Key, bool) {
	key, ok := k[sum]
	return key, ok
}

func newKeyring(cfg *config.Config) keyring {
	k := keyring{}
	for _, a := range cfg.Identity.APIKeys {
		k[a.Hash()] = identity.Key{Name: a.Name, Tenant: a.Tenant, Agent: a.Agent}
	}
	for _, r := range cfg.Identity.Relays {
		h := r.IdentityHeaders
		k[r.Hash()] = identity.Key{Name: r.Name, Relay: &identity.RelayHeaders{
			Tenant: strings.ToLower(h.Tenant), Agent: strings.ToLower(h.Agent), Sensitive: strings.ToLower(h.Sensitive),
		}}
	}
	return k
}

// newOperationNamer names a method by its (flexway.v1.operation).name
// option, else its full method name; names are cached, so the descriptor
// registry is read once per method.
func newOperationNamer() identity.OperationNamer {
	var cache sync.Map // full method → name
	return func(fullMethod string) string {
		if v, ok := cache.Load(fullMethod); ok {
			return v.(string)
		}
		name := operationName(fullMethod)
		cache.Store(fullMethod, name)
		return name
	}
}

// operationName reads the method's (flexway.v1.operation).name.
func operationName(fullMethod string) string {
	name := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(fullMethod, "/"), "/", "."))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return fullMethod
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return fullMethod
	}
	op, _ := proto.GetExtension(md.Options(), flexwayv1.E_Operation).(*flexwayv1.Operation)
	if op.GetName() != "" {
		return op.GetName()
	}
	return fullMethod
}
