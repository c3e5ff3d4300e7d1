// Package admin implements flexway.v1.AdminService, the operator API: the
// budget state of tenants and agents, read from the ledger. Authentication
// (server.admin_key) is the interceptor's (interceptors/adminkey); this
// package answers.
package admin

import (
	"context"
	"errors"
	"slices"
	"strings"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/ledger"
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

// Service implements [flexwayv1.AdminServiceServer].
type Service struct {
	flexwayv1.UnimplementedAdminServiceServer
	ledger   *ledger.Ledger
	accounts Accounts
	backends func() []*flexwayv1.BackendState
}

// New returns the admin service over the ledger; backends returns the
// backends' current states, in any order.
func New(l *ledger.Ledger, accounts Accounts, backends func() []*flexwayv1.BackendState) *Service {
	return &Service{ledger: l, accounts: accounts, backends: backends}
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

func (s *Service) usage(ctx context.Context, a ledger.Account) (*flexwayv1.BudgetUsage, error) {
	if a.Tenant == "" {
		return nil, &faults.Error{Reason: faults.InvalidRequest, Message: "tenant is required", Param: "tenant"}
	}
	if !s.accounts.Known(a.Tenant, a.Agent) {
		if a.Agent != "" {
			return nil, faults.New(faults.NotFound, "tenant %q has no agent %q", a.Tenant, a.Agent)
		}
		return nil, faults.New(faults.NotFound, "no tenant %q: it is neither in ai.tenants nor named by an API key", a.Tenant)
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
