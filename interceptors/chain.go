package interceptors

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"

	"buf.build/go/protovalidate"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"

	"github.com/flexway/flexway/interceptors/adminkey"
	"github.com/flexway/flexway/interceptors/audit"
	"github.com/flexway/flexway/interceptors/budget"
	"github.com/flexway/flexway/interceptors/governance"
	"github.com/flexway/flexway/interceptors/guardrails"
	"github.com/flexway/flexway/interceptors/identity"
	"github.com/flexway/flexway/interceptors/promptlog"
	"github.com/flexway/flexway/interceptors/sensitivity"
	"github.com/flexway/flexway/interceptors/validate"
	"github.com/flexway/flexway/interceptors/vision"
	"github.com/flexway/flexway/server/admin"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/guardrail"
	"github.com/flexway/flexway/server/imagecheck"
)

// Config holds the policies the chain enforces.
type Config struct {
	// Keys resolves API keys (identity).
	Keys identity.Keyring
	// OperationNamer names methods for the call state.
	OperationNamer identity.OperationNamer
	// Sensitivity says which tenants and agents are sensitive; nil: none.
	Sensitivity sensitivity.Policy
	// SensitiveHeader is ai.sensitive_header; empty: no header flags.
	SensitiveHeader string
	// Validator checks request messages; nil builds a default one.
	Validator protovalidate.Validator
	// Audit writes the audit line of every inference call and refuses
	// them while it cannot; nil audits nothing.
	Audit *audit.Config
	// Governance resolves each call's ai.policies and applies their model
	// rules (and a proxied call's backend rule); nil, or a table with no
	// policy, leaves the interceptor out of the chain: an ungoverned call
	// pays nothing for it. When some policy has prompt guardrails, the
	// guardrails interceptor follows it (stage 5).
	Governance *governance.Config
	// Vision checks image parts (sizes, data: URIs, origins); nil checks
	// none.
	Vision *imagecheck.Checker
	// Budget plans and meters chat, embeddings and proxied calls
	// (server/metering); nil plans and meters nothing.
	Budget budget.Meter
	// PromptLog writes the prompt logs of the policies that turn
	// prompt_logging on; nil, or a table in which no policy turns it on,
	// leaves the interceptor out of the chain: a call no policy logs pays
	// nothing for it.
	PromptLog *promptlog.Config
	// AdminKeySum is the SHA-256 of server.admin_key; nil turns the admin
	// service away.
	AdminKeySum *[sha256.Size]byte
	// Logger receives recovered panics and failed guardrail webhooks; nil
	// discards.
	Logger *slog.Logger
}

// Chain is Flexway's interceptor chain, built once and installed both on
// the gRPC server and on the HTTP front's in-process channel, so that every
// call passes the same interceptors. Calls pass them as an onion,
// outermost first:
//
//	recovery → admin → identity → audit → sensitivity → validate → governance → guardrails → vision → budget → prompt log → service
//	   ↑___________________________________________________________________________________________________________________________|  (responses return outward)
//
// Validation, governance (the policies' model rules: stages 3 and 4 of
// the AI pipeline), the prompt guardrails (stage 5, over the policies
// governance resolved; in the chain only when some policy has prompt
// rules) and the image checks come before the budget so that a refused
// request reserves nothing and a redacted one is reserved as sent. The
// audit wraps them all, so that a refusal is audited too, and reads what the budget charged. The admin interceptor
// checks the admin key on the admin service's calls and lets every other
// call through; the admin service skips the tenant interceptors.
//
// The prompt log is innermost: it records the request as the service
// receives it, after every other interceptor rewrote it, and the answer
// as the service returns or sends it, after the core's response
// guardrails.
//
// Health checks and reflection (grpc.health.v1, grpc.reflection.*) skip
// identity and validation: they carry no tenant's traffic.
//
// The onion is composed once, in [New]: each interceptor's next handler is
// built then, not per call (see composeUnary).
type Chain struct {
	// unary and stream run the whole onion; exemptUnary and exemptStream
	// the part health, reflection and the admin service pass (recovery
	// and admin).
	unary, exemptUnary   grpc.UnaryServerInterceptor
	stream, exemptStream grpc.StreamServerInterceptor
}

// New builds the chain for c.
func New(c Config) (*Chain, error) {
	v := c.Validator
	if v == nil {
		var err error
		if v, err = protovalidate.New(); err != nil {
			return nil, err
		}
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rec := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		// The panic's value may quote a request: only its type and the
		// stack (function names and addresses) are logged.
		log.ErrorContext(ctx, "panic in a gRPC handler", "panic_type", fmt.Sprintf("%T", p), "stack", string(debug.Stack()))
		return faults.New(faults.Internal, "internal error")
	})
	var idOpts []identity.Option
	if c.OperationNamer != nil {
		idOpts = append(idOpts, identity.WithOperationNamer(c.OperationNamer))
	}
	outerUnary := []grpc.UnaryServerInterceptor{recovery.UnaryServerInterceptor(rec), adminkey.UnaryServerInterceptor(c.AdminKeySum)}
	outerStream := []grpc.StreamServerInterceptor{recovery.StreamServerInterceptor(rec), adminkey.StreamServerInterceptor(c.AdminKeySum)}
	// The tenant-facing interceptors, which exempt methods skip.
	unary := append(slices.Clip(outerUnary), identity.UnaryServerInterceptor(c.Keys, idOpts...))
	stream := append(slices.Clip(outerStream), identity.StreamServerInterceptor(c.Keys, idOpts...))
	if c.Audit != nil {
		unary = append(unary, audit.UnaryServerInterceptor(*c.Audit))
		stream = append(stream, audit.StreamServerInterceptor(*c.Audit))
	}
	unary = append(unary, sensitivity.UnaryServerInterceptor(c.Sensitivity, c.SensitiveHeader), validate.UnaryServerInterceptor(v))
	stream = append(stream, sensitivity.StreamServerInterceptor(c.Sensitivity, c.SensitiveHeader), validate.StreamServerInterceptor(v))
	if g := c.Governance; g != nil && g.Policies != nil && !g.Policies.Empty() {
		unary = append(unary, governance.UnaryServerInterceptor(*g))
		stream = append(stream, governance.StreamServerInterceptor(*g))
		if g.Policies.Guarded(guardrail.Prompt) {
			unary = append(unary, guardrails.UnaryServerInterceptor(guardrails.WithLogger(log)))
			stream = append(stream, guardrails.StreamServerInterceptor(guardrails.WithLogger(log)))
		}
	}
	if c.Vision != nil {
		unary = append(unary, vision.UnaryServerInterceptor(c.Vision))
		stream = append(stream, vision.StreamServerInterceptor(c.Vision))
	}
	if c.Budget != nil {
		unary = append(unary, budget.UnaryServerInterceptor(c.Budget))
		stream = append(stream, budget.StreamServerInterceptor(c.Budget))
	}
	if p := c.PromptLog; p != nil && p.Policies != nil && p.Policies.Logs() {
		unary = append(unary, promptlog.UnaryServerInterceptor(*p))
		stream = append(stream, promptlog.StreamServerInterceptor(*p))
	}
	return &Chain{
		unary: composeUnary(unary...), exemptUnary: composeUnary(outerUnary...),
		stream: composeStream(stream...), exemptStream: composeStream(outerStream...),
	}, nil
}

// ServerOptions returns the chain as gRPC server options: one interceptor
// of each kind, appended to those the server chains before it.
func (c *Chain) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(c.UnaryInterceptor()), grpc.ChainStreamInterceptor(c.StreamInterceptor())}
}

// UnaryInterceptor returns the unary chain as one interceptor, for
// channels that take a single one (an in-process channel).
func (c *Chain) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if exempt(info.FullMethod) {
			return c.exemptUnary(ctx, req, info, handler)
		}
		return c.unary(ctx, req, info, handler)
	}
}

// StreamInterceptor returns the stream chain as one interceptor, for
// channels that take a single one (an in-process channel).
func (c *Chain) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if exempt(info.FullMethod) {
			return c.exemptStream(srv, ss, info, handler)
		}
		return c.stream(srv, ss, info, handler)
	}
}

// exempt reports whether a method skips the tenant interceptors: health,
// reflection and the admin service (which has its own key).
func exempt(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.") || strings.HasPrefix(fullMethod, "/grpc.reflection.") ||
		strings.HasPrefix(fullMethod, admin.ServicePrefix)
}
