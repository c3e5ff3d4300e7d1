// Package admin implements flexway.v1.AdminService, the operator API: the
// budget state of tenants and agents, read from the ledger, the backends'
// circuits, and the ai.policies that apply to a consumer. Authentication
// (server.admin_key) is the interceptor's (interceptors/adminkey); this
// package answers.
package admin

import (
	"context"
	"errors"
	"slices"
	"strings"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/policy"
	"google.golang.org/protobuf/types/known/structpb"
)

// ServicePrefix is the full-method prefix of the admin service's methods.
const ServicePrefix = "/flexway.v1.AdminService/"

// Accounts says which tenants and agents exist: declared in ai.tenants or
// named by an API key.
type Accounts interface {
	// Known reports whether the tenant (agent "") or the tenant's agent
	// exists.
	Known(tenant, agent string) bool
	// List returns every account, sorted by tenant then agent, each
	// tenant (agent "") before its agents.
	List() []ledger.Account
}

// Policies is the compiled ai.policies, as the policies view reads them
// (a [*policy.Table] is one).
type Policies interface {
	// Consumer returns the policies that may apply to the calls of
	// tenant's agent (agent "" for the tenant's own calls) for operation,
	// whatever their listener and model, most specific first.
	Consumer(operation, tenant, agent string) []*policy.Policy
}

// Service implements [flexwayv1.AdminServiceServer].
type Service struct {
	flexwayv1.UnimplementedAdminServiceServer
	ledger   *ledger.Ledger
	accounts Accounts
	backends func() []*flexwayv1.BackendState
	policies Policies
	services []string // ai.grpc.services' names, sorted
}

// New returns the admin service over the ledger; backends returns the
// backends' current states, in any order; policies is ai.policies
// compiled (nil: none), and services the full names of the gRPC services
// of ai.grpc.services, in any order, the operations the policies view
// lists after Flexway's own.
func New(l *ledger.Ledger, accounts Accounts, backends func() []*flexwayv1.BackendState, policies Policies, services []string) *Service {
	services = slices.Clone(services)
	slices.Sort(services)
	return &Service{ledger: l, accounts: accounts, backends: backends, policies: policies, services: services}
}

// ListUsage implements [flexwayv1.AdminServiceServer.ListUsage].
func (s *Service) ListUsage(ctx context.Context, _ *flexwayv1.ListUsageRequest) (*flexwayv1.ListUsageResponse, error) {
	out := &flexwayv1.ListUsageResponse{}
	for _, a := range s.accounts.List() {
		u, err := s.usage(ctx, a)
		if err != nil {
			return nil, err
		}
		out.Accounts = append(out.Accounts, u)
	}
	return out, nil
}

// ListBackends implements [flexwayv1.AdminServiceServer.ListBackends].
func (s *Service) ListBackends(context.Context, *flexwayv1.ListBackendsRequest) (*flexwayv1.ListBackendsResponse, error) {
	bs := s.backends()
	slices.SortFunc(bs, func(a, b *flexwayv1.BackendState) int { return strings.Compare(a.GetName(), b.GetName()) })
	return &flexwayv1.ListBackendsResponse{Backends: bs}, nil
}

// GetTenantUsage implements [flexwayv1.AdminServiceServer.GetTenantUsage].
// An unknown tenant is NOT_FOUND; a ledger that cannot be read is
// UNAVAILABLE.
func (s *Service) GetTenantUsage(ctx context.Context, req *flexwayv1.GetTenantUsageRequest) (*flexwayv1.BudgetUsage, error) {
	return s.usage(ctx, ledger.Account{Tenant: req.GetTenant()})
}

// GetAgentUsage implements [flexwayv1.AdminServiceServer.GetAgentUsage].
func (s *Service) GetAgentUsage(ctx context.Context, req *flexwayv1.GetAgentUsageRequest) (*flexwayv1.BudgetUsage, error) {
	return s.usage(ctx, ledger.Account{Tenant: req.GetTenant(), Agent: req.GetAgent()})
}

// known is NOT_FOUND unless the tenant (agent "") or its agent exists,
// INVALID_ARGUMENT for an empty tenant.
func (s *Service) known(tenant, agent string) error {
	if tenant == "" {
		return &faults.Error{Reason: faults.InvalidRequest, Message: "tenant is required", Param: "tenant"}
	}
	if !s.accounts.Known(tenant, agent) {
		if agent != "" {
			return faults.New(faults.NotFound, "tenant %q has no agent %q", tenant, agent)
		}
		return faults.New(faults.NotFound, "no tenant %q: it is neither in ai.tenants nor named by an API key", tenant)
	}
	return nil
}

func (s *Service) usage(ctx context.Context, a ledger.Account) (*flexwayv1.BudgetUsage, error) {
	if err := s.known(a.Tenant, a.Agent); err != nil {
		return nil, err
	}
	caps, err := s.ledger.Usage(ctx, a)
	if err != nil {
		if errors.Is(err, ledger.ErrNoMarker) {
			// The caller is an operator: say what to do.
			return nil, faults.Wrap(faults.Unavailable, err, "the budget ledger is unavailable: "+ledger.ErrNoMarker.Error())
		}
		if errors.Is(err, ledger.ErrUnavailable) {
			return nil, faults.Wrap(faults.Unavailable, err, "the budget ledger is unavailable: its store cannot be reached")
		}
		return nil, faults.Wrap(faults.Internal, err, "the budget ledger could not be read")
	}
	out := &flexwayv1.BudgetUsage{Tenant: a.Tenant, Agent: a.Agent}
	for _, c := range caps {
		out.Caps = append(out.Caps, &flexwayv1.CapUsage{
			Cap: string(c.Cap), Period: c.Period, Unit: string(c.Unit),
			Limit: c.Limit, Committed: c.Committed, Reserved: c.Reserved, Remaining: c.Remaining, Soft: c.Soft,
		})
	}
	return out, nil
}

// GetTenantPolicies implements
// [flexwayv1.AdminServiceServer.GetTenantPolicies]: the policies of a
// tenant's own calls. An unknown tenant is NOT_FOUND.
func (s *Service) GetTenantPolicies(_ context.Context, req *flexwayv1.GetTenantPoliciesRequest) (*flexwayv1.ConsumerPolicies, error) {
	return s.consumerPolicies(req.GetTenant(), "")
}

// GetAgentPolicies implements
// [flexwayv1.AdminServiceServer.GetAgentPolicies]. An unknown tenant or
// agent is NOT_FOUND.
func (s *Service) GetAgentPolicies(_ context.Context, req *flexwayv1.GetAgentPoliciesRequest) (*flexwayv1.ConsumerPolicies, error) {
	return s.consumerPolicies(req.GetTenant(), req.GetAgent())
}

func (s *Service) consumerPolicies(tenant, agent string) (*flexwayv1.ConsumerPolicies, error) {
	if err := s.known(tenant, agent); err != nil {
		return nil, err
	}
	out := &flexwayv1.ConsumerPolicies{Tenant: tenant, Agent: agent}
	ops := append([]string{config.OperationChatCompletions, config.OperationEmbeddings, config.OperationListModels}, s.services...)
	for i, op := range ops {
		entry := &flexwayv1.OperationPolicies{Operation: op, Policies: []*flexwayv1.AppliedPolicy{}}
		if s.policies != nil {
			proxied := i >= 3 // served by the gRPC listener only
			for _, p := range s.policies.Consumer(op, tenant, agent) {
				if proxied && p.Match.Listener == config.ListenerHTTP {
					continue // can never select a call of op
				}
				entry.Policies = append(entry.Policies, appliedPolicy(p))
			}
		}
		out.Operations = append(out.Operations, entry)
	}
	return out, nil
}

func appliedPolicy(p *policy.Policy) *flexwayv1.AppliedPolicy {
	mode := config.GovernanceEnforce
	if p.Shadow {
		mode = config.GovernanceShadow
	}
	out := &flexwayv1.AppliedPolicy{
		Name:  p.Name,
		Level: p.Level.String(),
		Match: &flexwayv1.PolicyConditions{Listener: p.Match.Listener, Model: p.Match.Model},
		Mode:  string(mode),
	}
	if p.HasModelRule() {
		out.Models = stringList(p.Models())
	}
	if p.HasBackendRule() {
		out.Backends = stringList(p.Backends())
	}
	if b := p.Caps(); b != nil {
		out.Budget = &flexwayv1.PolicyCaps{Per: string(b.Per)}
		add := func(c ledger.Cap, u ledger.Unit, v *int64) {
			if v != nil {
				out.Budget.Caps = append(out.Budget.Caps, &flexwayv1.CapLimit{Cap: string(c), Unit: string(u), Limit: *v})
			}
		}
		add(ledger.TokensPerMinute, ledger.UnitTokens, b.TokensPerMinute)
		add(ledger.RequestsPerMinute, ledger.UnitRequests, b.RequestsPerMinute)
		add(ledger.TokensPerDay, ledger.UnitTokens, b.TokensPerDay)
		add(ledger.TokensPerMonth, ledger.UnitTokens, b.TokensPerMonth)
		if nano, ok := b.NanoEURPerMonth(); ok {
			add(ledger.EURPerMonth, ledger.UnitNanoEUR, &nano)
		}
	}
	return out
}

// stringList is names as a JSON array ([] for none, never null).
func stringList(names []string) *structpb.ListValue {
	l := &structpb.ListValue{Values: make([]*structpb.Value, 0, len(names))}
	for _, n := range names {
		l.Values = append(l.Values, structpb.NewStringValue(n))
	}
	return l
}
