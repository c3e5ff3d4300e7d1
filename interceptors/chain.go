package interceptors

import (
	"context"
	"log/slog"
	"strings"

	"buf.build/go/protovalidate"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"

	"github.com/flexway/flexway/interceptors/identity"
	"github.com/flexway/flexway/interceptors/validate"
	"github.com/flexway/flexway/server/faults"
)

// Config holds the policies the chain enforces.
type Config struct {
	// Keys resolves API keys (identity).
	Keys identity.Keyring
	// OperationNamer names methods for the call state.
	OperationNamer identity.OperationNamer
	// Validator checks request messages; nil builds a default one.
	Validator protovalidate.Validator
	// Logger receives recovered panics; nil discards.
	Logger *slog.Logger
}

// ServerOptions returns the chain as gRPC server options. Calls pass the
// interceptors as an onion, outermost first:
//
//	recovery → identity → validate → service
//	   ↑__________________________________|  (responses return outward)
//
// Health checks and reflection (grpc.health.v1, grpc.reflection.*) skip
// identity and validation: they carry no tenant's traffic.
func ServerOptions(c Config) ([]grpc.ServerOption, error) {
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
		log.ErrorContext(ctx, "panic in a gRPC handler", "panic", p)
		return faults.New(faults.Internal, "internal error")
	})
	var idOpts []identity.Option
	if c.OperationNamer != nil {
		idOpts = append(idOpts, identity.WithOperationNamer(c.OperationNamer))
	}
	guarded := selector.MatchFunc(func(_ context.Context, cm interceptors.CallMeta) bool {
		return !exempt(cm.FullMethod())
	})
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(
			recovery.UnaryServerInterceptor(rec),
			selector.UnaryServerInterceptor(identity.UnaryServerInterceptor(c.Keys, idOpts...), guarded),
			selector.UnaryServerInterceptor(validate.UnaryServerInterceptor(v), guarded),
		),
		grpc.ChainStreamInterceptor(
			recovery.StreamServerInterceptor(rec),
			selector.StreamServerInterceptor(identity.StreamServerInterceptor(c.Keys, idOpts...), guarded),
			selector.StreamServerInterceptor(validate.StreamServerInterceptor(v), guarded),
		),
	}, nil
}

// exempt reports whether a method skips identity: health and reflection.
func exempt(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.") || strings.HasPrefix(fullMethod, "/grpc.reflection.")
}
